// The end of an accumulation window (see accumulator.h).
#include "optim/accumulator.h"

#include <cmath>

#include "kernels/optimizer.h"

namespace reel::optim {

void Accumulator::finish(WindowResult& r) {
  const profile::PhaseScope profiled(profile::Phase::Optimizer);  // clipping and zeroing too
  if (options_.skip_nonfinite) {
    std::vector<Tensor> grads;
    for (const Tensor& p : optimizer_.params())
      if (p.grad().defined()) grads.push_back(p.grad());
    if (!std::isfinite(kernels::global_grad_norm(grads))) {
      optimizer_.zero_grad();
      r.skipped_nonfinite = true;
      ++skipped_;
      return;
    }
  }
  if (options_.clip_norm > 0) r.grad_norm = clip_grad_norm(optimizer_.params(), options_.clip_norm);
  optimizer_.set_lr(r.lr);
  optimizer_.step();
  optimizer_.zero_grad();
  r.stepped = true;
}

}  // namespace reel::optim
