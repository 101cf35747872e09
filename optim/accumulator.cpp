// The end of an accumulation window (see accumulator.h).
#include "optim/accumulator.h"

#include <cmath>

#include "kernels/optimizer.h"

namespace reel::optim {

bool Accumulator::unscale_found_inf() {
  std::vector<Tensor> grads = options_.sync ? options_.sync->step_grads() : std::vector<Tensor>{};
  if (grads.empty())
    for (const Tensor& p : optimizer_.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  const bool found = options_.scaler->unscale(grads);
  // Shards (FSDP, ZeRO-1) differ by rank: one rank's inf must skip the window everywhere.
  const bool any = options_.sync ? options_.sync->global_sum(found ? 1.0 : 0.0) > 0 : found;
  options_.scaler->update(any);
  return any;
}

void Accumulator::skip(WindowResult& r) {
  optimizer_.zero_grad();
  r.skipped_nonfinite = true;
  ++skipped_;
}

void Accumulator::finish(WindowResult& r) {
  const profile::PhaseScope profiled(profile::Phase::Optimizer);  // the hook, clipping and zeroing too
  if (options_.scaler && unscale_found_inf()) return skip(r);
  if (grad_hook_) grad_hook_(optimizer_.params(), r);
  WindowSync* sync = options_.sync;
  double norm = -1;  // the global norm, once measured (across ranks it costs a collective)
  if (options_.skip_nonfinite) {
    if (sync) {
      norm = sync->grad_norm();  // the same on every rank, so every rank skips or none does
    } else {
      std::vector<Tensor> grads;
      for (const Tensor& p : optimizer_.params())
        if (p.grad().defined()) grads.push_back(p.grad());
      norm = kernels::global_grad_norm(grads);
    }
    if (!std::isfinite(norm)) return skip(r);
  }
  if (options_.clip_norm > 0 && sync) {  // clip_grad_norm's rule, on the global norm
    r.grad_norm = norm >= 0 ? norm : sync->grad_norm();
    const double factor = options_.clip_norm / (r.grad_norm + 1e-6);
    if (factor < 1.0) sync->scale_grads(factor);
  } else if (options_.clip_norm > 0) {
    r.grad_norm = clip_grad_norm(optimizer_.params(), options_.clip_norm);
  }
  optimizer_.set_lr(r.lr);
  optimizer_.step();
  if (sync) sync->after_step();
  optimizer_.zero_grad();
  r.stepped = true;
}

}  // namespace reel::optim
