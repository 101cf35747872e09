// The checkpoint planner (autograd/checkpoint_planner.h): the registry of run levers (the four
// built in, and the list of the library's other levers), the peak model, the dynamic program over
// (units done, bytes held) and the least feasible peak.
#include "autograd/checkpoint_planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>

#include "autograd/bf16_saves.h"
#include "core/allocator.h"
#include "core/error.h"

namespace reel::autograd {

namespace {

using Run = CheckpointPolicy::Run;

// Units [i, j) run through one lever: held(r) and work(r) (the table in the header), the time it
// adds, and the compute an offloaded neighbour's copies hide behind: its forward, and its backward
// (its replay and the lever's time included).
struct RunCost {
  int64_t held = 0, work = 0;
  double time = 0;
  double forward = 0, backward = 0;
};

RunCost run_cost(const ChainCost& cost, int64_t i, int64_t j, const RunLever& lever) {
  double forward = 0, backward = 0;
  for (int64_t u = i; u < j; ++u) {
    const UnitCost& c = cost.units[static_cast<size_t>(u)];
    forward += c.forward_ns;
    backward += c.backward_ns > 0 ? c.backward_ns : 2 * c.forward_ns;
  }
  const LeverCost lc = lever.cost(cost, i, j);
  RunCost rc;
  rc.held = lc.held;
  rc.work = lc.work;
  rc.time = lc.time;
  rc.forward = forward;
  rc.backward = backward + rc.time;
  return rc;
}

// Of an offloaded run's `held` bytes, those still waiting for their copy out when its forward ends:
// all of them with no bound (or one at least as large), else the bound's worth (the header's model).
int64_t left_waiting(const ChainCost& cost, int64_t held) {
  const int64_t bound = cost.offload_inflight_bytes;
  return bound > 0 ? std::min(held, bound) : held;
}

// The copy time a run does not hide (the header's out and back): `pending`, what the run before it
// offloaded, comes back behind this run's backward, and its bytes left waiting (left_waiting) go out
// behind this run's forward, as the bytes of this run's own `offloaded` beyond what may be left
// waiting do (they queue behind them, FIFO); never less than with no bound (all of `pending` out
// behind this forward). After the last run (forward and backward 0): the head is not timed.
// `copy_out`, if not null, is added the part of it the compute waits for copies out.
double unhidden_copy(const ChainCost& cost, int64_t pending, int64_t offloaded, double forward, double backward,
                     double* copy_out = nullptr) {
  if (pending == 0 && offloaded == 0) return 0;
  const auto ns = [&](int64_t bytes) { return static_cast<double>(bytes) * 1e9 / cost.host_bytes_per_s; };
  const int64_t bounded = left_waiting(cost, pending) + offloaded - left_waiting(cost, offloaded);
  const double out = std::max(0.0, ns(std::max(bounded, pending)) - forward);
  if (copy_out) *copy_out += out;
  return out + (pending > 0 ? std::max(0.0, ns(pending) - backward) : 0.0);
}

// The sums over units [i, j) the built-in levers read.
struct Sums {
  int64_t saved = 0, kept = 0, largest = 0, boundary = 0;
  double forward = 0, recompute = 0;
};
Sums sums(const ChainCost& cost, int64_t i, int64_t j) {
  Sums s;
  for (int64_t u = i; u < j; ++u) {
    const UnitCost& c = cost.units[static_cast<size_t>(u)];
    s.saved += c.saved_bytes;
    s.kept += c.selective_bytes;
    s.largest = std::max(s.largest, c.saved_bytes);
    s.forward += c.forward_ns;
    s.recompute += c.selective_ns;
  }
  s.boundary = cost.units[static_cast<size_t>(i)].input_bytes;
  return s;
}

// The scopes of the built-in levers: a segment, with a selective scope nested inside when both.
struct CheckpointScopes : RunScope {
  std::optional<Checkpoint> segment, selective;
  ~CheckpointScopes() override { selective.reset(); }  // innermost first
};
std::function<std::unique_ptr<RunScope>(const CheckpointPolicy&)> checkpoint_scopes(bool checkpointed, bool selective) {
  return [checkpointed, selective](const CheckpointPolicy& policy) {
    auto scopes = std::make_unique<CheckpointScopes>();
    if (checkpointed) scopes->segment.emplace();
    if (selective) scopes->selective.emplace(policy.keep_rule());
    return std::unique_ptr<RunScope>(std::move(scopes));
  };
}

std::vector<RunLever> builtin_levers() {
  std::vector<RunLever> levers(4);
  levers[0].name = "plain";
  levers[0].cost = [](const ChainCost& c, int64_t i, int64_t j) {
    const Sums s = sums(c, i, j);
    return LeverCost{s.saved, s.saved, 0};
  };
  levers[1].name = "segment";
  levers[1].code = "c";
  levers[1].checkpointed = true;
  levers[1].cost = [](const ChainCost& c, int64_t i, int64_t j) {
    const Sums s = sums(c, i, j);
    return LeverCost{s.boundary, s.boundary + s.saved, s.forward};
  };
  levers[2].name = "selective";
  levers[2].code = "s";
  levers[2].selective = true;
  levers[2].cost = [](const ChainCost& c, int64_t i, int64_t j) {
    const Sums s = sums(c, i, j);
    return LeverCost{s.boundary + s.kept, s.boundary + s.kept + s.largest, s.recompute};
  };
  levers[3].name = "segment around selective";
  levers[3].code = "cs";
  levers[3].checkpointed = levers[3].selective = true;
  levers[3].cost = [](const ChainCost& c, int64_t i, int64_t j) {
    const Sums s = sums(c, i, j);
    return LeverCost{s.boundary, s.boundary + s.kept + s.largest, s.forward + s.recompute};
  };
  for (RunLever& l : levers) l.open = checkpoint_scopes(l.checkpointed, l.selective);
  levers[0].open = nullptr;  // a plain run opens nothing
  return levers;
}

void check_lever(const RunLever& lever, const std::vector<RunLever>& levers) {
  REEL_CHECK(!lever.name.empty(), "register_run_lever: a lever needs a name");
  REEL_CHECK(lever.cost, "register_run_lever: lever \"", lever.name, "\" has no cost function");
  REEL_CHECK(!lever.checkpointed && !lever.selective, "register_run_lever: lever \"", lever.name,
             "\" sets checkpointed or selective, which name the four built-in levers; a lever added later is named "
             "by Run::lever (its scopes open a segment or selective scope themselves if it needs one)");
  for (const RunLever& l : levers)
    REEL_CHECK(l.name != lever.name, "register_run_lever: a lever named \"", lever.name, "\" is registered already");
}

// The library's levers beyond the four built in, one line each, defined in their own files: a new
// lever adds its line here (naming it also makes the linker keep its file from the static library).
std::vector<RunLever> library_levers() {
  return {
      bf16_saves_lever(),  // autograd/bf16_saves.h
  };
}

// The registry: the built-in levers, the library's others, then those registered at run time.
std::vector<RunLever>& registry() {
  static std::vector<RunLever> levers = [] {
    std::vector<RunLever> all = builtin_levers();
    for (RunLever& l : library_levers()) {
      check_lever(l, all);
      all.push_back(std::move(l));
    }
    return all;
  }();
  return levers;
}

// Whether `offload` and `inexact` let a run through `lever`, offloaded or not, be planned (`host`
// says whether there is a link at all).
bool allowed(OffloadMode offload, bool inexact, bool host, const RunLever& lever, bool offloaded) {
  if (!lever.exact && !inexact) return false;
  if (offloaded && !lever.offloadable) return false;
  switch (offload) {
    case OffloadMode::None: return !offloaded;
    case OffloadMode::Auto: return !offloaded || host;
    case OffloadMode::Boundaries: return offloaded == lever.checkpointed;
    case OffloadMode::All: return offloaded;
  }
  return false;
}

std::string run_name(const Run& r) {
  const std::string name = run_lever(r).name;
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
  double time;      // their recompute and unhidden copy, but for the last run's copy back and what it left waiting
  int64_t pending;  // what the last run offloaded (0 if it did not): its prefetch and copy come next
  int64_t from_units;  // the prefix it extends
  int from_state;      // index in that prefix's frontier
  int lever;           // the last run's lever (its index in run_levers())
  bool offloaded;      // ...and whether it is offloaded
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
  auto plain = [](const Run& r) { return !r.checkpointed && !r.selective && !r.offloaded && r.lever.empty(); };
  for (const Run& r : runs) {
    const bool after_offloaded = merged.size() >= 2 && merged[merged.size() - 2].offloaded;
    if (!merged.empty() && plain(r) && plain(merged.back()) && !after_offloaded) merged.back().end = r.end;
    else merged.push_back(r);
  }
  return merged;
}

// The fastest runs `offload` and `inexact` allow with predicted peak <= budget, or none.
std::optional<std::vector<Run>> solve(const ChainCost& cost, int64_t budget, OffloadMode offload, bool inexact) {
  const int64_t n = static_cast<int64_t>(cost.units.size());
  const int64_t cap = budget - cost.before_bytes;  // what the chain (and the head) may use
  if (cap < 0) return std::nullopt;
  const bool host = cost.host_bytes_per_s > 0;
  std::vector<std::vector<State>> frontier(static_cast<size_t>(n + 1));
  const std::vector<RunLever>& levers = run_levers();
  frontier[0].push_back({0, 0, 0, -1, -1, 0, false});
  for (int64_t j = 1; j <= n; ++j) {
    std::vector<State>& here = frontier[static_cast<size_t>(j)];
    for (int64_t i = 0; i < j; ++i) {
      const std::vector<State>& prefix = frontier[static_cast<size_t>(i)];
      if (prefix.empty()) continue;
      for (const bool offloaded : {false, true})
        for (size_t l = 0; l < levers.size(); ++l) {
          if (!allowed(offload, inexact, host, levers[l], offloaded)) continue;
          const RunCost rc = run_cost(cost, i, j, levers[l]);
          for (size_t k = 0; k < prefix.size(); ++k) {
            const State& s = prefix[k];
            if (s.held + s.pending + rc.work > cap) break;  // sorted by held + pending: the rest fail too
            const double time =
                s.time + rc.time + unhidden_copy(cost, s.pending, offloaded ? rc.held : 0, rc.forward, rc.backward);
            here.push_back({s.held + (offloaded ? 0 : rc.held), time, offloaded ? rc.held : 0, i, static_cast<int>(k),
                            static_cast<int>(l), offloaded});
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
    const double time = s.time + unhidden_copy(cost, s.pending, 0, 0, 0);
    if (best < 0 || time < best_time) {
      best = static_cast<int>(k);
      best_time = time;
    }
  }
  if (best < 0) return std::nullopt;
  std::vector<Run> runs;
  for (int64_t j = n; j > 0;) {
    const State& s = frontier[static_cast<size_t>(j)][static_cast<size_t>(best)];
    runs.push_back(make_lever_run(levers[static_cast<size_t>(s.lever)], s.from_units, j, s.offloaded));
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

void check_bound(const ChainCost& cost) {
  REEL_CHECK(cost.offload_inflight_bytes >= 0,
             "checkpoint planner: ChainCost::offload_inflight_bytes must be >= 0 "
             "(0 or kNoOffloadInflightBound: no bound), got ",
             cost.offload_inflight_bytes);
}

}  // namespace

const std::vector<RunLever>& run_levers() { return registry(); }

void register_run_lever(RunLever lever) {
  check_lever(lever, registry());
  registry().push_back(std::move(lever));
}

void unregister_run_lever(const std::string& name) {
  std::vector<RunLever>& levers = registry();
  const size_t fixed = 4 + library_levers().size();  // the built-in and the library's
  for (size_t k = 0; k < levers.size(); ++k) {
    if (levers[k].name != name) continue;
    REEL_CHECK(k >= fixed, "unregister_run_lever: \"", name,
               "\" is one of the library's levers, not one registered at run time");
    levers.erase(levers.begin() + static_cast<std::ptrdiff_t>(k));
    return;
  }
  REEL_FAIL("unregister_run_lever: no lever named \"", name, "\" is registered");
}

const RunLever& run_lever(const Run& run) {
  const std::vector<RunLever>& levers = registry();
  if (run.lever.empty()) return levers[(run.checkpointed ? 1u : 0u) + (run.selective ? 2u : 0u)];  // the built-ins' order
  for (const RunLever& l : levers)
    if (l.name == run.lever) return l;
  std::string names;
  for (const RunLever& l : levers) names += (names.empty() ? "\"" : ", \"") + l.name + "\"";
  REEL_FAIL("checkpoint plan: run [", run.begin, ", ", run.end, ") names lever \"", run.lever,
            "\", which is not registered (the levers: ", names, ")");
}

Run make_lever_run(const RunLever& lever, int64_t begin, int64_t end, bool offloaded) {
  Run r{begin, end, lever.checkpointed, lever.selective, offloaded};
  if (!lever.checkpointed && !lever.selective && lever.name != "plain") r.lever = lever.name;
  return r;
}

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
  check_bound(cost);
  int64_t held = 0, peak = 0, pending = 0, host = 0;
  double time = 0, copy = 0, copy_out = 0;
  int64_t next = 0;
  for (const Run& r : runs) {
    REEL_CHECK(r.begin == next && r.end > r.begin && r.end <= static_cast<int64_t>(cost.units.size()),
               "checkpoint plan: run [", r.begin, ", ", r.end, ") does not continue the runs before it (next unit ",
               next, " of ", cost.units.size(), ")");
    REEL_CHECK(!r.offloaded || cost.host_bytes_per_s > 0, "checkpoint plan: run [", r.begin, ", ", r.end,
               ") is offloaded, but the chain has no host link (host_bytes_per_s is 0)");
    const RunLever& lever = run_lever(r);
    REEL_CHECK(!r.offloaded || lever.offloadable, "checkpoint plan: run [", r.begin, ", ", r.end,
               ") is offloaded, but its lever \"", lever.name, "\" may not be offloaded");
    const RunCost rc = run_cost(cost, r.begin, r.end, lever);
    peak = std::max(peak, held + pending + rc.work);  // pending: the run before, prefetched now
    copy += unhidden_copy(cost, pending, r.offloaded ? rc.held : 0, rc.forward, rc.backward, &copy_out);
    held += r.offloaded ? 0 : rc.held;
    pending = r.offloaded ? rc.held : 0;
    host += pending;
    time += rc.time;
    next = r.end;
  }
  REEL_CHECK(next == static_cast<int64_t>(cost.units.size()), "checkpoint plan: the runs cover units [0, ", next,
             ") of ", cost.units.size());
  copy += unhidden_copy(cost, pending, 0, 0, 0, &copy_out);
  return {cost.before_bytes + std::max(peak, held + cost.after_bytes), time, copy, host, copy_out};
}

int64_t min_feasible_peak(const ChainCost& cost, OffloadMode offload, bool inexact) {
  check_offload(cost, offload);
  check_bound(cost);
  if (cost.units.empty()) return cost.before_bytes + cost.after_bytes;
  // Feasibility is monotone in the budget: bisect between 0 and the one-run plan's peak (the plain
  // peak, always feasible).
  int64_t lo = 0, hi = predict(cost, one_run(cost, offload)).peak_bytes;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (solve(cost, mid, offload, inexact)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

CheckpointPlan plan_checkpoint(const ChainCost& cost, int64_t budget_bytes, OffloadMode offload, bool inexact) {
  REEL_CHECK(!cost.units.empty(), "checkpoint planner: the chain has no units to plan");
  check_offload(cost, offload);
  check_bound(cost);
  const std::optional<std::vector<Run>> runs = solve(cost, budget_bytes, offload, inexact);
  if (!runs) {
    const int64_t least = min_feasible_peak(cost, offload, inexact);
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
  plan.least_peak_bytes = min_feasible_peak(cost, offload, inexact);
  plan.inexact = inexact;
  plan.offload = cost.host_bytes_per_s > 0 ? offload : OffloadMode::None;
  plan.host_bytes_per_s = cost.host_bytes_per_s;
  plan.priced_on = cost.priced_on;
  return plan;
}

std::string CheckpointPlan::str() const {
  std::string s = "budget " + format_bytes(budget_bytes) + ":";
  for (size_t k = 0; k < runs.size(); ++k)
    s += (k ? ", [" : " [") + std::to_string(runs[k].begin) + "," + std::to_string(runs[k].end) + ") " +
         run_name(runs[k]);
  s += "; predicted peak " + format_bytes(predicted.peak_bytes) + " (plain " + format_bytes(plain_peak_bytes) +
       ", least " + format_bytes(least_peak_bytes) + "), ";
  const std::string source = priced_on.empty() ? "" : "; times predicted on " + priced_on;
  if (predicted.host_bytes == 0)
    return s + "recompute " + ms(predicted.recompute_ns) + " (forward " + ms(forward_ns) + ")" + source;
  char link[48];
  std::snprintf(link, sizeof link, "%.1f GB/s", host_bytes_per_s * 1e-9);
  return s + "time " + ms(predicted.time_ns()) + " = recompute " + ms(predicted.recompute_ns) + " + unhidden copy " +
         ms(predicted.copy_ns) + " (forward " + ms(forward_ns) + "), " + format_bytes(predicted.host_bytes) +
         " to host and back at " + link + source;
}

}  // namespace reel::autograd
