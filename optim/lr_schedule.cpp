// LR schedules (see lr_schedule.h).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace reel::optim {

WarmupCosineLr::WarmupCosineLr(double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps)
    : max_lr_(max_lr), min_lr_(min_lr), warmup_steps_(warmup_steps), total_steps_(total_steps) {
  REEL_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps, "WarmupCosineLr: need 0 <= warmup_steps (",
             warmup_steps, ") <= total_steps (", total_steps, ")");
  REEL_CHECK(min_lr <= max_lr, "WarmupCosineLr: min_lr ", min_lr, " > max_lr ", max_lr);
}

double WarmupCosineLr::lr(int64_t step) const {
  if (step < warmup_steps_) return max_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  if (step >= total_steps_) return min_lr_;
  const double progress =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(std::max<int64_t>(total_steps_ - warmup_steps_, 1));
  return min_lr_ + 0.5 * (max_lr_ - min_lr_) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace reel::optim
