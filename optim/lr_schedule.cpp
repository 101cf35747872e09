// LR schedules (see lr_schedule.h): their checks; the formulas are kernels/lr_rule.h's.
#include "optim/lr_schedule.h"

#include "core/error.h"

namespace reel::optim {

WarmupCosineLr::WarmupCosineLr(double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps)
    : rule_{kernels::LrRule::kWarmupCosine, max_lr, min_lr, warmup_steps, total_steps} {
  REEL_CHECK(warmup_steps >= 0 && total_steps >= warmup_steps, "WarmupCosineLr: need 0 <= warmup_steps (",
             warmup_steps, ") <= total_steps (", total_steps, ")");
  REEL_CHECK(min_lr <= max_lr, "WarmupCosineLr: min_lr ", min_lr, " > max_lr ", max_lr);
}

}  // namespace reel::optim
