// The end of an accumulation window (see accumulator.h).
#include "optim/accumulator.h"

namespace reel::optim {

void Accumulator::finish(WindowResult& r) {
  const profile::PhaseScope profiled(profile::Phase::Optimizer);  // clipping and zeroing too
  if (options_.clip_norm > 0) r.grad_norm = clip_grad_norm(optimizer_.params(), options_.clip_norm);
  optimizer_.set_lr(r.lr);
  optimizer_.step();
  optimizer_.zero_grad();
  r.stepped = true;
}

}  // namespace reel::optim
