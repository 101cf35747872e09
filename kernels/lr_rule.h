// kernels/lr_rule.h: a learning-rate schedule as a by-value description (LrRule) and the one
// host/device function that evaluates it (scheduled_lr). optim/lr_schedule.h's schedules compute
// their lr(step) with it on the host, and the update kernels (kernels/optimizer.h:
// StepControl::schedule) with it on the device, from the step count they read there: the rate of
// a window that decides on the device needs no copy from the host, and no kernel takes a value by
// value that changes from step to step (docs/design.md, "Replay-safe steps"; a replayed CUDA graph
// gets each step's own rate).
//
// The same function on both sides, in double, so the emulated build's kernels (host code, the same
// libm) give the host's rate bit for bit. On a real GPU CUDA's cos() may differ from glibc's in
// the last place: the device's rate can then be an ulp from WindowResult::lr (the host's).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"  // REEL_HOST_DEVICE
#include "kernels/mul_rounded.h"

namespace reel::kernels {

struct LrRule {
  enum Kind : int64_t {
    kNone = 0,          // no device form: the rate comes from elsewhere (StepControl::lr, or by value)
    kConstant = 1,      // max_lr at every step (optim::ConstantLr)
    kWarmupCosine = 2,  // optim::WarmupCosineLr's warm-up and cosine decay (scheduled_lr below)
  };
  int64_t kind = kNone;
  double max_lr = 0, min_lr = 0;
  int64_t warmup = 0, total = 0;  // steps
};
// 8-byte members only, so no padding: equal rules are equal bytes for a launch (its doubles are
// whatever the schedule holds, the same every step; has_unique_object_representations is false
// for any floating member, so the size is what is checked).
static_assert(sizeof(LrRule) == 5 * 8, "LrRule must have no padding: its bytes are a kernel's argument");

// The rate for optimizer step `step` (0-based: the count of steps taken before it). kWarmupCosine:
// a linear warm-up from 0 to max_lr over `warmup` steps, then a cosine decay to min_lr at `total`
// (and min_lr after it). kNone and kConstant: max_lr.
REEL_HOST_DEVICE inline double scheduled_lr(const LrRule& r, int64_t step) {
  using std::cos;
  if (r.kind != LrRule::kWarmupCosine) return r.max_lr;
  if (step < r.warmup) return r.max_lr * static_cast<double>(step + 1) / static_cast<double>(r.warmup);
  if (step >= r.total) return r.min_lr;
  const int64_t span = r.total - r.warmup > 1 ? r.total - r.warmup : 1;
  const double progress = static_cast<double>(step - r.warmup) / static_cast<double>(span);
  constexpr double kPi = 3.14159265358979323846;  // M_PI
  // The last product rounded on its own (kernels/mul_rounded.h): no FMA with the add on either side.
  return r.min_lr + mul_rounded(0.5 * (r.max_lr - r.min_lr), 1.0 + cos(kPi * progress));
}

}  // namespace reel::kernels
