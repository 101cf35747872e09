// The checkpoint policy sweep that bench/bench_memory_plan and examples/memory_lab share: one
// chain (an nn::Sequential or nn::GPT) run under every policy reel has — none, selective, sqrt,
// every:K and the planner at a range of budgets — with the activation peak the allocator measured
// over one forward + backward and the median step time of each, printed as a table. And the
// offload comparison (measure_plans): named plans (a fixed policy or a budget, each with an
// offload mode) side by side, predicted and measured peak, host bytes and step time, and whether
// each plan's gradients are bit-identical to the first plan's.
#pragma once
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
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

// "[0,8)co [8,64)s ...": each run's lever by its code (autograd::RunLever::code: c a segment, s a
// selective scope, cs a segment around a selective scope, nothing for plain, and the added levers'
// own); o offloaded (a segment's boundary, or a plain or selective run's saves, in host memory).
inline std::string runs_str(const std::vector<reel::autograd::CheckpointPolicy::Run>& runs) {
  std::string s;
  for (const auto& r : runs)
    s += "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")" + reel::autograd::run_lever(r).code +
         (r.offloaded ? "o" : "") + " ";
  return s;
}

// The table: policy, peak, share of plain, step ms and ratio to plain; for budgets the prediction
// and the plan. rows[0] is the plain run.
inline void print_policy_table(const std::string& title, const std::vector<PolicyRow>& rows) {
  const PolicyRow& plain = rows.front();
  std::printf("\n%s\n", title.c_str());
  std::printf("%-22s %10s %8s %10s %8s  | %10s %12s  %s\n", "policy", "peak MiB", "% plain", "step ms", "x plain",
              "pred. MiB", "recompute ms", "plan (c segment, s selective, o offloaded)");
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

// ---- the offload comparison ------------------------------------------------------------------

// One plan of measure_plans: what it runs, then what was predicted and measured.
struct PlanRow {
  PlanRow(std::string name, reel::autograd::CheckpointPolicy policy, reel::autograd::OffloadMode offload)
      : name(std::move(name)), policy(std::move(policy)), offload(offload) {}
  std::string name;
  reel::autograd::CheckpointPolicy policy;  // a fixed policy, or budget(bytes): planned by measure_plans
  reel::autograd::OffloadMode offload = reel::autograd::OffloadMode::None;
  // Filled by measure_plans:
  std::shared_ptr<reel::autograd::CheckpointPlan> plan;  // for a budget
  std::vector<reel::autograd::CheckpointPolicy::Run> runs;
  reel::autograd::Prediction predicted;  // autograd::predict of the runs on the measured chain
  int64_t peak = 0;       // device activation bytes, above what was in use before the step
  int64_t host_peak = 0;  // pinned host bytes of category Offloaded, above those before the step
  double ms = 0;          // median step time
  bool identical = false; // gradients bit-identical to rows[0]'s
  bool budgeted() const { return policy.kind == reel::autograd::CheckpointPolicy::Kind::Budget; }
  int64_t budget() const { return policy.budget_bytes; }
};

// Sets `row`'s offload mode and policy (its plan, for a budget) on `model`.
template <typename Model>
void apply_plan(Model& model, const PlanRow& row) {
  model.set_offload(row.offload);
  if (row.plan) model.use_checkpoint_plan(*row.plan);
  else model.set_checkpoint(row.policy);
}

// Each gradient's bytes, in parameter order (an empty gradient counts as no bytes).
inline std::vector<uint8_t> gradient_bytes(const std::vector<reel::Tensor>& params) {
  std::vector<uint8_t> out;
  for (const reel::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    const std::vector<float> v = p.grad().to(reel::Device::cpu()).contiguous().to_vector<float>();
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), b, b + v.size() * sizeof(float));
  }
  return out;
}

// Plans the budget rows (each under its offload mode), predicts every row from the chain's
// measured costs (the first budget row's measurements, with the host link of `device`; a model with
// no budget row is planned once at its plain peak to measure them), then per row: one step from
// zero gradients (the device activation peak, the pinned Offloaded peak, the gradients against
// rows[0]'s), and the median step time over `rounds` rounds that each run every row once after an
// untimed step. A budget row no plan fits is reported on stdout and dropped. The model is left with
// policy none and offload none.
template <typename Model>
void measure_plans(Model& model, reel::Device device, int rounds, const std::function<reel::Tensor()>& forward_loss,
                   std::vector<PlanRow>& rows) {
  using namespace reel;
  using autograd::CheckpointPolicy;
  const autograd::ChainCost* measured = nullptr;
  for (size_t i = 0; i < rows.size();) {
    PlanRow& r = rows[i];
    if (r.budgeted()) {
      model.set_offload(r.offload);
      model.set_checkpoint(r.policy);
      try {
        r.plan = std::make_shared<autograd::CheckpointPlan>(model.plan_checkpoint(forward_loss));
      } catch (const Error& e) {
        std::printf("  (skipped %s) %s\n", r.name.c_str(), e.what());
        rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      measured = model.chain_cost();
    }
    ++i;
  }
  if (!measured) {  // no budget row: measure the chain under a budget every plan meets
    model.set_offload(autograd::OffloadMode::None);
    model.set_checkpoint(CheckpointPolicy::budget(int64_t{1} << 60));
    model.plan_checkpoint(forward_loss);
    measured = model.chain_cost();
  }
  autograd::ChainCost cost = *measured;
  if (!device.is_cpu()) cost.host_bytes_per_s = autograd::host_link_bytes_per_s(device);
  const int64_t n = static_cast<int64_t>(cost.units.size());
  std::vector<uint8_t> reference;
  for (size_t i = 0; i < rows.size(); ++i) {
    PlanRow& r = rows[i];
    if (r.plan) {
      r.runs = r.plan->runs;
    } else {
      r.runs = autograd::fixed_runs(r.policy, n, r.offload);  // as nn::Sequential runs a fixed policy
    }
    r.predicted = autograd::predict(cost, r.runs);
    apply_plan(model, r);
    for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
    pinned_allocator().reset_peak();
    const int64_t host_before = pinned_memory_stats()[Category::Offloaded].current_bytes;
    r.peak = step_activation_peak(device, forward_loss);
    r.host_peak = pinned_memory_stats()[Category::Offloaded].peak_bytes - host_before;
    const std::vector<uint8_t> g = gradient_bytes(model.parameters());
    if (i == 0) reference = g;
    r.identical = g == reference;
  }
  std::vector<std::vector<double>> ms(rows.size());
  const auto step = [&] { autograd::backward(forward_loss()); };
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < rows.size(); ++i) {
      apply_plan(model, rows[i]);
      step();
      ms[i].push_back(bench::timed_ms(device, step));
    }
  for (size_t i = 0; i < rows.size(); ++i) rows[i].ms = bench::median(ms[i]);
  model.set_offload(autograd::OffloadMode::None);
  model.set_checkpoint(CheckpointPolicy::parse("none"));
}

// The table of measure_plans' rows: budget, plan, predicted and measured device peak (and the
// error of the prediction), host bytes, predicted and measured step time, gradients identical.
// The predicted step time is rows[0]'s measured time plus the row's predicted extra (recompute
// and unhidden copy) less rows[0]'s: the model predicts what a plan adds, not the step itself.
inline void print_plan_table(const std::string& title, const std::vector<PlanRow>& rows) {
  const PlanRow& base = rows.front();
  std::printf("\n%s\n", title.c_str());
  std::printf("%-22s %10s %10s %10s %7s %8s %9s %10s %10s %6s  %s\n", "plan", "budget KiB", "pred. KiB", "meas. KiB",
              "error", "<= bud.", "host KiB", "pred. ms", "meas. ms", "grads", "runs (c segment, s selective, o offloaded)");
  for (const PlanRow& r : rows) {
    const double kib = 1 << 10;
    const double err = r.peak > 0 ? 100.0 * static_cast<double>(r.predicted.peak_bytes - r.peak) / static_cast<double>(r.peak) : 0;
    const double pred_ms = base.ms + (r.predicted.time_ns() - base.predicted.time_ns()) * 1e-6;
    char budget[32] = "-";
    if (r.budgeted()) std::snprintf(budget, sizeof budget, "%.1f", static_cast<double>(r.budget()) / kib);
    std::printf("%-22s %10s %10.1f %10.1f %6.1f%% %8s %9.1f %10.2f %10.2f %6s  %s\n", r.name.c_str(), budget,
                static_cast<double>(r.predicted.peak_bytes) / kib, static_cast<double>(r.peak) / kib, err,
                r.budgeted() ? (r.peak <= r.budget() ? "yes" : "NO") : "-", static_cast<double>(r.host_peak) / kib,
                pred_ms, r.ms, r.identical ? "same" : "DIFF", runs_str(r.runs).c_str());
  }
  std::fflush(stdout);
}

}  // namespace examples
