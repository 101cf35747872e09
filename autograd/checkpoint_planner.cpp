// The checkpoint planner (autograd/checkpoint_planner.h): the peak model, the dynamic program over
// (units done, bytes held) and the least feasible peak.
#include "autograd/checkpoint_planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/allocator.h"
#include "core/error.h"

namespace reel::autograd {

namespace {

using Run = CheckpointPolicy::Run;

// held(r), work(r) and the recompute time of units [i, j) run as `run` says (the table in the header).
struct RunCost {
  int64_t held = 0, work = 0;
  double time = 0;
};

RunCost run_cost(const ChainCost& cost, int64_t i, int64_t j, bool checkpointed, bool selective) {
  int64_t saved = 0, kept = 0, largest = 0;
  double forward = 0, recompute = 0;
  for (int64_t u = i; u < j; ++u) {
    const UnitCost& c = cost.units[static_cast<size_t>(u)];
    saved += c.saved_bytes;
    kept += c.selective_bytes;
    largest = std::max(largest, c.saved_bytes);
    forward += c.forward_ns;
    recompute += c.selective_ns;
  }
  const int64_t boundary = cost.units[static_cast<size_t>(i)].input_bytes;
  if (!checkpointed && !selective) return {saved, saved, 0};
  if (checkpointed && !selective) return {boundary, boundary + saved, forward};
  if (!checkpointed) return {boundary + kept, boundary + kept + largest, recompute};
  return {boundary, boundary + kept + largest, forward + recompute};
}

// The four ways to run a stretch of units.
constexpr bool kModes[4][2] = {{false, false}, {true, false}, {false, true}, {true, true}};

std::string run_name(const Run& r) {
  if (r.checkpointed && r.selective) return "segment around selective";
  if (r.checkpointed) return "segment";
  if (r.selective) return "selective";
  return "plain";
}

std::string ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", ns * 1e-6);
  return buf;
}

// One (held, time) pair of the DP for a prefix of the chain, with the run that reached it.
struct State {
  int64_t held;
  double time;
  int64_t from_units;  // the prefix it extends
  int from_state;      // index in that prefix's frontier
  int mode;            // kModes index of the last run
};

// Keeps the pairs no other pair beats on both held bytes and time; thinned to at most `limit` (by
// dropping pairs, never by changing one, so every kept pair is still a real plan).
void prune(std::vector<State>& states, size_t limit) {
  std::sort(states.begin(), states.end(), [](const State& a, const State& b) {
    return a.held != b.held ? a.held < b.held : a.time < b.time;
  });
  std::vector<State> front;
  for (const State& s : states)
    if (front.empty() || s.time < front.back().time) front.push_back(s);
  if (front.size() > limit) {
    std::vector<State> thin;
    const size_t step = (front.size() + limit - 1) / limit;
    for (size_t k = 0; k < front.size(); k += step) thin.push_back(front[k]);
    if (thin.back().held != front.back().held) thin.push_back(front.back());  // the fastest stays
    front = std::move(thin);
  }
  states = std::move(front);
}

// The fastest runs with predicted peak <= budget, or none.
std::optional<std::vector<Run>> solve(const ChainCost& cost, int64_t budget) {
  const int64_t n = static_cast<int64_t>(cost.units.size());
  const int64_t cap = budget - cost.before_bytes;  // what the chain (and the head) may use
  if (cap < 0) return std::nullopt;
  std::vector<std::vector<State>> frontier(static_cast<size_t>(n + 1));
  frontier[0].push_back({0, 0, -1, -1, 0});
  for (int64_t j = 1; j <= n; ++j) {
    std::vector<State>& here = frontier[static_cast<size_t>(j)];
    for (int64_t i = 0; i < j; ++i) {
      const std::vector<State>& prefix = frontier[static_cast<size_t>(i)];
      if (prefix.empty()) continue;
      for (int m = 0; m < 4; ++m) {
        const RunCost rc = run_cost(cost, i, j, kModes[m][0], kModes[m][1]);
        for (size_t k = 0; k < prefix.size(); ++k) {
          const State& s = prefix[k];
          if (s.held + rc.work > cap) break;  // the frontier is sorted by held: the rest fail too
          here.push_back({s.held + rc.held, s.time + rc.time, i, static_cast<int>(k), m});
        }
      }
    }
    prune(here, 4096);
  }
  const std::vector<State>& done = frontier[static_cast<size_t>(n)];
  int best = -1;
  for (size_t k = 0; k < done.size(); ++k)
    if (done[k].held + cost.after_bytes <= cap && (best < 0 || done[k].time < done[static_cast<size_t>(best)].time))
      best = static_cast<int>(k);
  if (best < 0) return std::nullopt;
  std::vector<Run> runs;
  for (int64_t j = n; j > 0;) {
    const State& s = frontier[static_cast<size_t>(j)][static_cast<size_t>(best)];
    runs.push_back({s.from_units, j, kModes[s.mode][0], kModes[s.mode][1]});
    best = s.from_state;
    j = s.from_units;
  }
  std::reverse(runs.begin(), runs.end());
  // Neighbouring plain runs are one run.
  std::vector<Run> merged;
  for (const Run& r : runs) {
    if (!merged.empty() && !r.checkpointed && !r.selective && !merged.back().checkpointed && !merged.back().selective)
      merged.back().end = r.end;
    else merged.push_back(r);
  }
  return merged;
}

double chain_forward_ns(const ChainCost& cost) {
  double t = 0;
  for (const UnitCost& u : cost.units) t += u.forward_ns;
  return t;
}

}  // namespace

Prediction predict(const ChainCost& cost, const std::vector<Run>& runs) {
  int64_t held = 0, peak = 0;
  double time = 0;
  int64_t next = 0;
  for (const Run& r : runs) {
    REEL_CHECK(r.begin == next && r.end > r.begin && r.end <= static_cast<int64_t>(cost.units.size()),
               "checkpoint plan: run [", r.begin, ", ", r.end, ") does not continue the runs before it (next unit ",
               next, " of ", cost.units.size(), ")");
    const RunCost rc = run_cost(cost, r.begin, r.end, r.checkpointed, r.selective);
    peak = std::max(peak, held + rc.work);
    held += rc.held;
    time += rc.time;
    next = r.end;
  }
  REEL_CHECK(next == static_cast<int64_t>(cost.units.size()), "checkpoint plan: the runs cover units [0, ", next,
             ") of ", cost.units.size());
  return {cost.before_bytes + std::max(peak, held + cost.after_bytes), time};
}

int64_t min_feasible_peak(const ChainCost& cost) {
  if (cost.units.empty()) return cost.before_bytes + cost.after_bytes;
  // Feasibility is monotone in the budget: bisect between 0 and the plain peak (always feasible).
  int64_t lo = 0, hi = predict(cost, {{0, static_cast<int64_t>(cost.units.size()), false, false}}).peak_bytes;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (solve(cost, mid)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

CheckpointPlan plan_checkpoint(const ChainCost& cost, int64_t budget_bytes) {
  REEL_CHECK(!cost.units.empty(), "checkpoint planner: the chain has no units to plan");
  const std::optional<std::vector<Run>> runs = solve(cost, budget_bytes);
  if (!runs) {
    const int64_t least = min_feasible_peak(cost);
    REEL_FAIL("checkpoint planner: no plan fits a budget of ", format_bytes(budget_bytes),
              "; the least activation peak any plan reaches on this chain is ", format_bytes(least), " (", least,
              " bytes)");
  }
  CheckpointPlan plan;
  plan.runs = *runs;
  plan.budget_bytes = budget_bytes;
  plan.predicted = predict(cost, plan.runs);
  plan.plain_peak_bytes = predict(cost, {{0, static_cast<int64_t>(cost.units.size()), false, false}}).peak_bytes;
  plan.forward_ns = chain_forward_ns(cost);
  plan.least_peak_bytes = min_feasible_peak(cost);
  return plan;
}

std::string CheckpointPlan::str() const {
  std::string s = "budget " + format_bytes(budget_bytes) + ":";
  for (size_t k = 0; k < runs.size(); ++k)
    s += (k ? ", [" : " [") + std::to_string(runs[k].begin) + "," + std::to_string(runs[k].end) + ") " +
         run_name(runs[k]);
  s += "; predicted peak " + format_bytes(predicted.peak_bytes) + " (plain " + format_bytes(plain_peak_bytes) +
       ", least " + format_bytes(least_peak_bytes) + "), recompute " + ms(predicted.recompute_ns) + " (forward " + ms(forward_ns) + ")";
  return s;
}

}  // namespace reel::autograd
