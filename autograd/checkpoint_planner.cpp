// The checkpoint planner (autograd/checkpoint_planner.h): the peak model, the dynamic program over
// (units done, bytes held) and the least feasible peak.
#include "autograd/checkpoint_planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>

#include "core/allocator.h"
#include "core/error.h"

namespace reel::autograd {

namespace {

using Run = CheckpointPolicy::Run;

// Units [i, j) run one way: held(r) and work(r) (the table in the header), the recompute time, and
// the compute an offloaded neighbour's copies hide behind: its forward, and its backward (its
// replay included).
struct RunCost {
  int64_t held = 0, work = 0;
  double time = 0;
  double forward = 0, backward = 0;
};

RunCost run_cost(const ChainCost& cost, int64_t i, int64_t j, bool checkpointed, bool selective) {
  int64_t saved = 0, kept = 0, largest = 0;
  double forward = 0, recompute = 0, backward = 0;
  for (int64_t u = i; u < j; ++u) {
    const UnitCost& c = cost.units[static_cast<size_t>(u)];
    saved += c.saved_bytes;
    kept += c.selective_bytes;
    largest = std::max(largest, c.saved_bytes);
    forward += c.forward_ns;
    recompute += c.selective_ns;
    backward += c.backward_ns > 0 ? c.backward_ns : 2 * c.forward_ns;
  }
  const int64_t boundary = cost.units[static_cast<size_t>(i)].input_bytes;
  RunCost rc;
  if (!checkpointed && !selective) rc = {saved, saved, 0, 0, 0};
  else if (checkpointed && !selective) rc = {boundary, boundary + saved, forward, 0, 0};
  else if (!checkpointed) rc = {boundary + kept, boundary + kept + largest, recompute, 0, 0};
  else rc = {boundary, boundary + kept + largest, forward + recompute, 0, 0};
  rc.forward = forward;
  rc.backward = backward + rc.time;
  return rc;
}

// The time an offloaded run's `bytes` do not hide: the copy out behind the next run's forward, the
// copy back behind its backward (0 and 0 after the last run: the head is not timed).
double unhidden_copy(const ChainCost& cost, int64_t bytes, double next_forward, double next_backward) {
  if (bytes == 0) return 0;
  const double copy = static_cast<double>(bytes) * 1e9 / cost.host_bytes_per_s;
  return std::max(0.0, copy - next_forward) + std::max(0.0, copy - next_backward);
}

// The eight ways to run a stretch of units: bit 0 checkpointed, bit 1 selective, bit 2 offloaded.
constexpr int kModes = 8;
Run make_run(int64_t begin, int64_t end, int mode) {
  return {begin, end, (mode & 1) != 0, (mode & 2) != 0, (mode & 4) != 0};
}
// Whether `offload` lets a run of `mode` be planned (`host` says whether there is a link at all).
bool allowed(OffloadMode offload, bool host, int mode) {
  const bool checkpointed = (mode & 1) != 0, offloaded = (mode & 4) != 0;
  switch (offload) {
    case OffloadMode::None: return !offloaded;
    case OffloadMode::Auto: return !offloaded || host;
    case OffloadMode::Boundaries: return offloaded == checkpointed;
    case OffloadMode::All: return offloaded;
  }
  return false;
}

std::string run_name(const Run& r) {
  std::string name = r.checkpointed && r.selective ? "segment around selective"
                     : r.checkpointed              ? "segment"
                     : r.selective                 ? "selective"
                                                   : "plain";
  return r.offloaded ? name + "+offload" : name;
}

std::string ms(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", ns * 1e-6);
  return buf;
}

// One state of the DP for a prefix of the chain, with the run that reached it.
struct State {
  int64_t held;     // device bytes the prefix's runs hold
  double time;      // their recompute and unhidden copy, but for the last run's copy
  int64_t pending;  // what the last run offloaded (0 if it did not): its prefetch and copy come next
  int64_t from_units;  // the prefix it extends
  int from_state;      // index in that prefix's frontier
  int mode;            // the last run's mode (make_run)
};

// Keeps the states no other state beats (or equals) on held bytes, time and pending bytes: the
// rest can only lead to plans as slow and as large. Thinned to at most `limit` (by dropping states,
// never by changing one, so every kept state is still a real plan; the planner is exact while no
// prefix has more). Sorted by held + pending at the end, the order the DP's early exit needs.
void prune(std::vector<State>& states, size_t limit) {
  std::sort(states.begin(), states.end(), [](const State& a, const State& b) {
    if (a.pending != b.pending) return a.pending < b.pending;
    return a.held != b.held ? a.held < b.held : a.time < b.time;
  });
  // Visited by pending, then held: every state that could dominate one comes before it. The
  // staircase holds the kept states' least time per held bytes (time falling as held rises).
  std::map<int64_t, double> staircase;
  std::vector<State> front;
  for (const State& s : states) {
    auto it = staircase.upper_bound(s.held);
    if (it != staircase.begin() && std::prev(it)->second <= s.time) continue;  // beaten
    front.push_back(s);
    for (it = staircase.lower_bound(s.held); it != staircase.end() && it->second >= s.time;) it = staircase.erase(it);
    staircase[s.held] = s.time;
  }
  std::sort(front.begin(), front.end(), [](const State& a, const State& b) {
    const int64_t x = a.held + a.pending, y = b.held + b.pending;
    return x != y ? x < y : a.time < b.time;
  });
  if (front.size() > limit) {
    std::vector<State> thin;
    const size_t step = (front.size() + limit - 1) / limit;
    for (size_t k = 0; k < front.size(); k += step) thin.push_back(front[k]);
    const auto fastest = std::min_element(front.begin(), front.end(),
                                          [](const State& a, const State& b) { return a.time < b.time; });
    if ((fastest - front.begin()) % static_cast<std::ptrdiff_t>(step) != 0) thin.push_back(*fastest);  // it stays
    std::sort(thin.begin(), thin.end(), [](const State& a, const State& b) {
      return a.held + a.pending < b.held + b.pending;
    });
    front = std::move(thin);
  }
  states = std::move(front);
}

// Neighbouring plain runs are one run, where that changes nothing the model sees: not after an
// offloaded run (whose prefetch and copy depend on the run after it alone).
std::vector<Run> merge_plain(const std::vector<Run>& runs) {
  std::vector<Run> merged;
  auto plain = [](const Run& r) { return !r.checkpointed && !r.selective && !r.offloaded; };
  for (const Run& r : runs) {
    const bool after_offloaded = merged.size() >= 2 && merged[merged.size() - 2].offloaded;
    if (!merged.empty() && plain(r) && plain(merged.back()) && !after_offloaded) merged.back().end = r.end;
    else merged.push_back(r);
  }
  return merged;
}

// The fastest runs `offload` allows with predicted peak <= budget, or none.
std::optional<std::vector<Run>> solve(const ChainCost& cost, int64_t budget, OffloadMode offload) {
  const int64_t n = static_cast<int64_t>(cost.units.size());
  const int64_t cap = budget - cost.before_bytes;  // what the chain (and the head) may use
  if (cap < 0) return std::nullopt;
  const bool host = cost.host_bytes_per_s > 0;
  std::vector<std::vector<State>> frontier(static_cast<size_t>(n + 1));
  frontier[0].push_back({0, 0, 0, -1, -1, 0});
  for (int64_t j = 1; j <= n; ++j) {
    std::vector<State>& here = frontier[static_cast<size_t>(j)];
    for (int64_t i = 0; i < j; ++i) {
      const std::vector<State>& prefix = frontier[static_cast<size_t>(i)];
      if (prefix.empty()) continue;
      for (int m = 0; m < kModes; ++m) {
        if (!allowed(offload, host, m)) continue;
        const bool offloaded = (m & 4) != 0;
        const RunCost rc = run_cost(cost, i, j, (m & 1) != 0, (m & 2) != 0);
        for (size_t k = 0; k < prefix.size(); ++k) {
          const State& s = prefix[k];
          if (s.held + s.pending + rc.work > cap) break;  // sorted by held + pending: the rest fail too
          const double time = s.time + rc.time + unhidden_copy(cost, s.pending, rc.forward, rc.backward);
          here.push_back({s.held + (offloaded ? 0 : rc.held), time, offloaded ? rc.held : 0, i, static_cast<int>(k), m});
        }
      }
    }
    prune(here, 1 << 14);
  }
  const std::vector<State>& done = frontier[static_cast<size_t>(n)];
  int best = -1;
  double best_time = 0;
  for (size_t k = 0; k < done.size(); ++k) {
    const State& s = done[k];
    if (s.held + cost.after_bytes > cap) continue;
    const double time = s.time + unhidden_copy(cost, s.pending, 0, 0);
    if (best < 0 || time < best_time) {
      best = static_cast<int>(k);
      best_time = time;
    }
  }
  if (best < 0) return std::nullopt;
  std::vector<Run> runs;
  for (int64_t j = n; j > 0;) {
    const State& s = frontier[static_cast<size_t>(j)][static_cast<size_t>(best)];
    runs.push_back(make_run(s.from_units, j, s.mode));
    best = s.from_state;
    j = s.from_units;
  }
  std::reverse(runs.begin(), runs.end());
  return merge_plain(runs);
}

double chain_forward_ns(const ChainCost& cost) {
  double t = 0;
  for (const UnitCost& u : cost.units) t += u.forward_ns;
  return t;
}

// The one-run plan every mode allows: plain (offloaded under All), at the plain peak.
std::vector<Run> one_run(const ChainCost& cost, OffloadMode offload) {
  return {{0, static_cast<int64_t>(cost.units.size()), false, false, offload == OffloadMode::All}};
}

void check_offload(const ChainCost& cost, OffloadMode offload) {
  REEL_CHECK(cost.host_bytes_per_s > 0 || offload == OffloadMode::None || offload == OffloadMode::Auto,
             "checkpoint planner: offload ", offload_mode_name(offload),
             " needs the host link's bandwidth (ChainCost::host_bytes_per_s is 0: no host link, as on the cpu device)");
}

}  // namespace

std::vector<Run> fixed_runs(const CheckpointPolicy& policy, int64_t n, OffloadMode offload) {
  std::vector<Run> runs;
  for (Run r : policy.plan(n)) {
    r.offloaded = offload == OffloadMode::All || (offload == OffloadMode::Boundaries && r.checkpointed);
    if (!r.offloaded || r.checkpointed || r.selective) {  // a segment or selective scope needs its whole span
      runs.push_back(r);
      continue;
    }
    for (int64_t i = r.begin; i < r.end; ++i) runs.push_back({i, i + 1, false, false, true});
  }
  return runs;
}

Prediction predict(const ChainCost& cost, const std::vector<Run>& runs) {
  int64_t held = 0, peak = 0, pending = 0, host = 0;
  double time = 0, copy = 0;
  int64_t next = 0;
  for (const Run& r : runs) {
    REEL_CHECK(r.begin == next && r.end > r.begin && r.end <= static_cast<int64_t>(cost.units.size()),
               "checkpoint plan: run [", r.begin, ", ", r.end, ") does not continue the runs before it (next unit ",
               next, " of ", cost.units.size(), ")");
    REEL_CHECK(!r.offloaded || cost.host_bytes_per_s > 0, "checkpoint plan: run [", r.begin, ", ", r.end,
               ") is offloaded, but the chain has no host link (host_bytes_per_s is 0)");
    const RunCost rc = run_cost(cost, r.begin, r.end, r.checkpointed, r.selective);
    peak = std::max(peak, held + pending + rc.work);  // pending: the run before, prefetched now
    copy += unhidden_copy(cost, pending, rc.forward, rc.backward);
    held += r.offloaded ? 0 : rc.held;
    pending = r.offloaded ? rc.held : 0;
    host += pending;
    time += rc.time;
    next = r.end;
  }
  REEL_CHECK(next == static_cast<int64_t>(cost.units.size()), "checkpoint plan: the runs cover units [0, ", next,
             ") of ", cost.units.size());
  copy += unhidden_copy(cost, pending, 0, 0);
  return {cost.before_bytes + std::max(peak, held + cost.after_bytes), time, copy, host};
}

int64_t min_feasible_peak(const ChainCost& cost, OffloadMode offload) {
  check_offload(cost, offload);
  if (cost.units.empty()) return cost.before_bytes + cost.after_bytes;
  // Feasibility is monotone in the budget: bisect between 0 and the one-run plan's peak (the plain
  // peak, always feasible).
  int64_t lo = 0, hi = predict(cost, one_run(cost, offload)).peak_bytes;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (solve(cost, mid, offload)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

CheckpointPlan plan_checkpoint(const ChainCost& cost, int64_t budget_bytes, OffloadMode offload) {
  REEL_CHECK(!cost.units.empty(), "checkpoint planner: the chain has no units to plan");
  check_offload(cost, offload);
  const std::optional<std::vector<Run>> runs = solve(cost, budget_bytes, offload);
  if (!runs) {
    const int64_t least = min_feasible_peak(cost, offload);
    const bool host = offload != OffloadMode::None && cost.host_bytes_per_s > 0;
    REEL_FAIL("checkpoint planner: no plan fits a budget of ", format_bytes(budget_bytes),
              "; the least activation peak any plan reaches on this chain is ", format_bytes(least), " (", least,
              " bytes", host ? std::string(", offload ") + offload_mode_name(offload) : std::string(), ")");
  }
  CheckpointPlan plan;
  plan.runs = *runs;
  plan.budget_bytes = budget_bytes;
  plan.predicted = predict(cost, plan.runs);
  plan.plain_peak_bytes = predict(cost, {{0, static_cast<int64_t>(cost.units.size()), false, false}}).peak_bytes;
  plan.forward_ns = chain_forward_ns(cost);
  plan.least_peak_bytes = min_feasible_peak(cost, offload);
  plan.offload = cost.host_bytes_per_s > 0 ? offload : OffloadMode::None;
  plan.host_bytes_per_s = cost.host_bytes_per_s;
  return plan;
}

std::string CheckpointPlan::str() const {
  std::string s = "budget " + format_bytes(budget_bytes) + ":";
  for (size_t k = 0; k < runs.size(); ++k)
    s += (k ? ", [" : " [") + std::to_string(runs[k].begin) + "," + std::to_string(runs[k].end) + ") " +
         run_name(runs[k]);
  s += "; predicted peak " + format_bytes(predicted.peak_bytes) + " (plain " + format_bytes(plain_peak_bytes) +
       ", least " + format_bytes(least_peak_bytes) + "), ";
  if (predicted.host_bytes == 0) return s + "recompute " + ms(predicted.recompute_ns) + " (forward " + ms(forward_ns) + ")";
  char link[48];
  std::snprintf(link, sizeof link, "%.1f GB/s", host_bytes_per_s * 1e-9);
  return s + "time " + ms(predicted.time_ns()) + " = recompute " + ms(predicted.recompute_ns) + " + unhidden copy " +
         ms(predicted.copy_ns) + " (forward " + ms(forward_ns) + "), " + format_bytes(predicted.host_bytes) +
         " to host and back at " + link;
}

}  // namespace reel::autograd
