// The checkpoint policy sweep that bench/bench_memory_plan and examples/memory_lab share: one
// chain (an nn::Sequential or nn::GPT) run under every policy reel has — none, selective, sqrt,
// every:K and the planner at a range of budgets — with the activation peak the allocator measured
// over one forward + backward and the median step time of each, printed as a table.
#pragma once
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "reel.h"

namespace examples {

struct PolicyRow {
  std::string policy;
  int64_t peak = 0;  // activation bytes, above what was in use before the step
  double ms = 0;     // median step time over the rounds
  std::shared_ptr<reel::autograd::CheckpointPlan> plan;  // for a budget
};

// The activation peak of one step (forward_loss + backward) above what was in use before it.
inline int64_t step_activation_peak(reel::Device device, const std::function<reel::Tensor()>& forward_loss) {
  const int64_t before = reel::memory_stats(device)[reel::Category::Activation].current_bytes;
  reel::reset_peak_memory(device);
  reel::autograd::backward(forward_loss());
  return reel::memory_stats(device)[reel::Category::Activation].peak_bytes - before;
}

// Sets `row`'s policy on `model` (its plan, for a budget).
template <typename Model>
void apply_policy(Model& model, const PolicyRow& row) {
  if (row.plan) model.use_checkpoint_plan(*row.plan);
  else model.set_checkpoint(reel::autograd::CheckpointPolicy::parse(row.policy));
}

// none, selective, sqrt, every:K for each K in every_k, then the planner at each fraction of the
// plain peak and at each fixed policy's own peak (where it should be no slower). Budgets below the
// least feasible peak are reported on stdout and skipped. First every policy's peak is measured
// (and budgets planned); then the times, in `rounds` rounds that each run every policy once
// after one untimed step (a shared machine drifts over a minute: measuring the policies one
// after the other would compare different minutes). The model is left with policy none.
template <typename Model>
std::vector<PolicyRow> sweep_policies(Model& model, reel::Device device, int rounds,
                                      const std::function<reel::Tensor()>& forward_loss,
                                      const std::vector<int>& every_k, const std::vector<double>& fractions) {
  using reel::autograd::CheckpointPolicy;
  std::vector<PolicyRow> rows;
  auto add = [&](const CheckpointPolicy& policy, const std::string& name) {
    PolicyRow r;
    r.policy = name;
    model.set_checkpoint(policy);
    if (policy.kind == CheckpointPolicy::Kind::Budget)
      r.plan = std::make_shared<reel::autograd::CheckpointPlan>(model.plan_checkpoint(forward_loss));
    r.peak = step_activation_peak(device, forward_loss);
    rows.push_back(r);
  };
  std::vector<std::string> fixed = {"none", "selective", "sqrt"};
  for (int k : every_k) fixed.push_back("every:" + std::to_string(k));
  for (const std::string& p : fixed) add(CheckpointPolicy::parse(p), p);
  std::vector<int64_t> budgets;
  for (double f : fractions) budgets.push_back(static_cast<int64_t>(f * static_cast<double>(rows[0].peak)));
  for (size_t i = 1; i < rows.size(); ++i) budgets.push_back(rows[i].peak);
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  for (int64_t b : budgets) {
    try {
      add(CheckpointPolicy::budget(b), "budget:" + reel::format_bytes(b));
    } catch (const reel::Error& e) {
      std::printf("  (skipped) %s\n", e.what());
    }
  }
  std::vector<std::vector<double>> ms(rows.size());
  const auto step = [&] { reel::autograd::backward(forward_loss()); };
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < rows.size(); ++i) {
      apply_policy(model, rows[i]);
      step();
      ms[i].push_back(reel::bench::timed_ms(device, step));
    }
  for (size_t i = 0; i < rows.size(); ++i) rows[i].ms = reel::bench::median(ms[i]);
  model.set_checkpoint(CheckpointPolicy::parse("none"));
  return rows;
}

// "[0,8)c [8,64)s ...": c a segment, s a selective scope, cs a segment around a selective scope.
inline std::string runs_str(const std::vector<reel::autograd::CheckpointPolicy::Run>& runs) {
  std::string s;
  for (const auto& r : runs)
    s += "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")" +
         (r.checkpointed && r.selective ? "cs" : r.checkpointed ? "c" : r.selective ? "s" : "") + " ";
  return s;
}

// The table: policy, peak, share of plain, step ms and ratio to plain; for budgets the prediction
// and the plan. rows[0] is the plain run.
inline void print_policy_table(const std::string& title, const std::vector<PolicyRow>& rows) {
  const PolicyRow& plain = rows.front();
  std::printf("\n%s\n", title.c_str());
  std::printf("%-22s %10s %8s %10s %8s  | %10s %12s  %s\n", "policy", "peak MiB", "% plain", "step ms", "x plain",
              "pred. MiB", "recompute ms", "plan (c segment, s selective)");
  for (const PolicyRow& r : rows) {
    std::printf("%-22s %10.2f %7.1f%% %10.2f %8.3f", r.policy.c_str(), static_cast<double>(r.peak) / (1 << 20),
                100.0 * static_cast<double>(r.peak) / static_cast<double>(plain.peak), r.ms, r.ms / plain.ms);
    if (r.plan)
      std::printf("  | %10.2f %12.2f  %s%s", static_cast<double>(r.plan->predicted.peak_bytes) / (1 << 20),
                  r.plan->predicted.recompute_ns * 1e-6, runs_str(r.plan->runs).c_str(),
                  r.peak > r.plan->budget_bytes ? " OVER BUDGET" : "");
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace examples
