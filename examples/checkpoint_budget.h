// --checkpoint budget:SIZE in the examples: the plan made on one micro-batch before training, and
// after training the measured activation peak beside the budget and the plan's prediction.
#pragma once
#include <cstdio>
#include <functional>

#include "reel.h"

namespace examples {

// Plans `model` (an nn::Sequential or nn::GPT) when its policy is a budget and prints the plan;
// `forward_loss` is the forward of one micro-batch. Null for any other policy.
template <typename Chain>
const reel::autograd::CheckpointPlan* plan_checkpoint_budget(Chain& model,
                                                             const std::function<reel::Tensor()>& forward_loss) {
  if (model.checkpoint().kind != reel::autograd::CheckpointPolicy::Kind::Budget) return nullptr;
  const reel::autograd::CheckpointPlan& plan = model.plan_checkpoint(forward_loss);
  std::printf("checkpoint plan: %s\n", plan.str().c_str());
  std::fflush(stdout);
  return &plan;
}

// The activation peak since the last reset_peak_memory(device) against the plan.
inline void report_checkpoint_budget(const reel::autograd::CheckpointPlan* plan, reel::Device device) {
  if (!plan) return;
  const int64_t peak = reel::memory_stats(device)[reel::Category::Activation].peak_bytes;
  std::printf("checkpoint budget %s: measured activation peak %s (predicted %s)%s\n",
              reel::format_bytes(plan->budget_bytes).c_str(), reel::format_bytes(peak).c_str(),
              reel::format_bytes(plan->predicted.peak_bytes).c_str(),
              peak <= plan->budget_bytes ? "" : "  OVER BUDGET");
}

}  // namespace examples
