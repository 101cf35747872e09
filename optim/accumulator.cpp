// The end of an accumulation window (see accumulator.h): unscale, the gradient hook, the
// non-finite decision, clipping, the learning rate, the step and zeroing, in that order.
#include "optim/accumulator.h"

#include <algorithm>
#include <cmath>

#include "kernels/optimizer.h"

namespace reel::optim {

std::vector<Tensor> Accumulator::step_grads() const {
  std::vector<Tensor> grads = options_.sync ? options_.sync->step_grads() : std::vector<Tensor>{};
  if (grads.empty())
    for (const Tensor& p : optimizer_.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

void Accumulator::skip(WindowResult& r) {
  optimizer_.zero_grad();
  r.skipped_nonfinite = true;
  ++skipped_;
}

void Accumulator::finish(WindowResult& r) {
  const profile::PhaseScope profiled(profile::Phase::Optimizer);  // the hook, clipping and zeroing too
  WindowSync* sync = options_.sync;
  // 1. Unscale what the optimizer will read; the pass also finds inf/NaN, the answer while no hook
  // changes the gradients after it.
  bool found = options_.scaler && options_.scaler->unscale(step_grads());
  // 2. The hook, on the unscaled gradients.
  if (grad_hook_) grad_hook_(optimizer_.params(), r);
  // 3. The non-finite decision, on the gradients as the hook left them (it may have written an inf,
  // replaced a .grad or cleaned one). Across ranks one rank's inf skips the window everywhere: the
  // flag is summed over the ranks, since a replicated gradient's norm is taken on each rank alone
  // and the hook may change one rank's gradients only.
  if (options_.scaler || options_.skip_nonfinite) {
    if (grad_hook_ || !options_.scaler) {
      const std::vector<Tensor> grads = step_grads();
      found = !grads.empty() && !std::isfinite(kernels::global_grad_norm(grads));
    }
    if (sync) found = sync->global_sum(found ? 1.0 : 0.0) > 0;
    if (options_.scaler) options_.scaler->update(found);  // once per window: back off, or one clean window
    if (found) return skip(r);
  }
  // 4. Clipping, clip_grad_norm's rule on the global norm.
  if (options_.clip_norm > 0 && sync) {
    r.grad_norm = sync->grad_norm();
    const double factor = options_.clip_norm / (r.grad_norm + 1e-6);
    const std::vector<Tensor>& params = optimizer_.params();
    if (!params.empty() && clip_scales(factor, params.front().device())) sync->scale_grads(std::min(factor, 1.0));
  } else if (options_.clip_norm > 0) {
    r.grad_norm = clip_grad_norm(optimizer_.params(), options_.clip_norm);
  }
  // 5. The learning rate, 6. the step, 7. zeroing.
  optimizer_.set_lr(r.lr);
  optimizer_.step();
  if (sync) sync->after_step();
  optimizer_.zero_grad();
  r.stepped = true;
}

}  // namespace reel::optim
