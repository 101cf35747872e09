// Learning-rate schedules: the rate for optimizer step `step` (0-based). The accumulation window
// advances the schedule once per optimizer step, never once per micro-batch.
#pragma once
#include <cstdint>

namespace reel::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr(int64_t step) const = 0;
};

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr(int64_t) const override { return lr_; }

 private:
  double lr_;
};

// Linear warm-up from 0 to max_lr over `warmup_steps`, then cosine decay to min_lr at
// `total_steps` (and min_lr after it), as in GPT-2/3 training recipes.
class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps);
  double lr(int64_t step) const override;

 private:
  double max_lr_, min_lr_;
  int64_t warmup_steps_, total_steps_;
};

}  // namespace reel::optim
