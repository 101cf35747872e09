// --checkpoint budget:SIZE (and --offload) in the examples: the plan made on one micro-batch before
// training, its prediction against one measured step, and after training the activation peak
// beside the budget.
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "core/stream.h"
#include "reel.h"

namespace examples {

// Plans `model` (an nn::Sequential or nn::GPT) when its policy is a budget: prints the plan with
// its predicted peak and time (recompute, and with offloaded runs the copy time the model expects
// not to hide and the bytes sent to the host), then runs one step of it (`forward_loss` is the
// forward of one micro-batch) and prints the measured ones: the activation peak, the time of the
// kernels that ran in replays, and the step's wall time (its copies' own time is the profiler's
// copy track's to show). That step's gradients are dropped and the default generator put back, so
// training runs as it would have. Null for any other policy.
template <typename Chain>
const reel::autograd::CheckpointPlan* plan_checkpoint_budget(Chain& model,
                                                             const std::function<reel::Tensor()>& forward_loss) {
  using namespace reel;
  if (model.checkpoint().kind != autograd::CheckpointPolicy::Kind::Budget) return nullptr;
  const autograd::CheckpointPlan& plan = model.plan_checkpoint(forward_loss);
  std::printf("checkpoint plan: %s\n", plan.str().c_str());
  const std::vector<Tensor> params = model.parameters();
  const Device device = params.empty() ? Device::cpu() : params.front().device();
  const uint64_t offset = default_generator().offset();
  const int64_t before = memory_stats(device)[Category::Activation].current_bytes;
  reset_peak_memory(device);
  Profiler prof;
  const auto start = std::chrono::steady_clock::now();
  autograd::backward(forward_loss());
  Stream::compute(device).synchronize();
  Stream::copy(device).synchronize();
  const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  prof.stop();
  double replay_ns = 0;
  for (const profile::KernelRecord& k : prof.kernels())
    if (k.phase == profile::Phase::Replay) replay_ns += static_cast<double>(k.dur_ns);
  // On meta nothing runs: its replays' host time is not a recompute time (the plan's is the
  // --predict GPU's).
  std::printf("checkpoint plan, one step measured: activation peak %s (predicted %s), recompute ",
              format_bytes(memory_stats(device)[Category::Activation].peak_bytes - before).c_str(),
              format_bytes(plan.predicted.peak_bytes).c_str());
  if (device.is_meta()) std::printf("not run on meta");
  else std::printf("%.2f ms", replay_ns * 1e-6);
  std::printf(" (predicted %.2f ms%s)", plan.predicted.recompute_ns * 1e-6,
              plan.priced_on.empty() ? "" : (" on " + plan.priced_on).c_str());
  if (plan.predicted.host_bytes > 0)
    std::printf(", %s offloaded (predicted unhidden copy %.2f ms, time %.2f ms over keep-all)",
                format_bytes(plan.predicted.host_bytes).c_str(), plan.predicted.copy_ns * 1e-6,
                plan.predicted.time_ns() * 1e-6);
  std::printf(", step %.2f ms wall\n", step_ms);
  for (const Tensor& p : params) p.set_grad(Tensor());
  default_generator().set_offset(offset);
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
