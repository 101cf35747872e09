// Learning-rate schedules: the rate for optimizer step `step` (0-based). The accumulation window
// advances the schedule once per optimizer step, never once per micro-batch.
//
// A schedule may also have a device form (device_rule(): a kernels::LrRule, kernels/lr_rule.h)
// that the update kernels evaluate from the step count they read on the device, with the same
// function lr() uses: a window that decides on the device then copies no rate from the host
// (optim/accumulator.h, "Device decisions"). ConstantLr and WarmupCosineLr have one; a schedule
// without one (a user's subclass: the default) has its rate copied to the device each step it
// changes (Optimizer::device_lr).
#pragma once
#include <cstdint>

#include "kernels/lr_rule.h"

namespace reel::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(int64_t step) const = 0;
  // The device form, whose kernels::scheduled_lr(rule, step) is lr(step) bit for bit (on a real GPU
  // up to the last place of its cos: kernels/lr_rule.h); kind kNone (the default): none.
  virtual kernels::LrRule device_rule() const { return {}; }
};

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr(int64_t) const override { return lr_; }
  kernels::LrRule device_rule() const override { return {kernels::LrRule::kConstant, lr_, lr_, 0, 0}; }

 private:
  double lr_;
};

// Linear warm-up from 0 to max_lr over `warmup_steps`, then cosine decay to min_lr at
// `total_steps` (and min_lr after it), as in GPT-2/3 training recipes: kernels::scheduled_lr.
class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps);
  double lr(int64_t step) const override { return kernels::scheduled_lr(rule_, step); }
  kernels::LrRule device_rule() const override { return rule_; }

 private:
  kernels::LrRule rule_;
};

}  // namespace reel::optim
