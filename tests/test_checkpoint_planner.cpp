// The checkpoint planner (autograd/checkpoint_planner.h) on its own: the peak model on hand-worked
// chains (with offloaded runs too), the dynamic program against brute force over every plan of
// small chains (N <= 10 without offload, N <= 7 with it, under each offload mode), the least
// feasible peak, the error for a budget below it, and the plan's text; the in-flight bound on the
// copies out (prices unchanged at a large bound, the model's waits against a simulation of the copy
// stream, the planner choosing recompute over a stalling offload, the DP against brute force under a
// bound); nn::Sequential's offload
// switch (which runs it offloads, the refusal on cpu); the registry of run levers (the built-in
// entries, refused registrations, a lever registered at run time planned only when inexact levers
// are allowed); the bf16 saves lever (autograd/bf16_saves.h) on a real chain, last. Planning a real
// chain from measurements, and the measured peak against the budget, are in test_module.cpp.
#include <algorithm>
#include <functional>
#include <map>
#include <random>

#include "autograd/bf16_saves.h"
#include "autograd/checkpoint_planner.h"
#include "reel.h"
#include "testing.h"

using namespace reel;
using autograd::ChainCost;
using autograd::CheckpointPolicy;
using autograd::UnitCost;
using Run = CheckpointPolicy::Run;

namespace {

// N identical Linear+GELU-like units of one "tensor" T: plain saves 2T, selective keeps T, input T.
ChainCost uniform_chain(int n, int64_t T = 100) {
  ChainCost c;
  for (int i = 0; i < n; ++i) c.units.push_back({2 * T, T, T, 10.0, 1.0});
  return c;
}

// Bytes are multiples of 4 and the host link 4 GB/s, so copy times are whole nanoseconds like the
// rest: every sum is exact and the brute force and the DP agree to the bit.
ChainCost random_chain(int n, std::mt19937& rng, double host_bytes_per_s = 0) {
  std::uniform_int_distribution<int64_t> bytes(1, 40);
  std::uniform_int_distribution<int> ns(1, 50);
  ChainCost c;
  for (int i = 0; i < n; ++i) {
    UnitCost u;
    u.saved_bytes = bytes(rng) * 8;
    u.selective_bytes = std::min<int64_t>(u.saved_bytes, bytes(rng) * 4);
    u.input_bytes = bytes(rng) * 4;
    u.forward_ns = ns(rng);
    u.selective_ns = std::min<double>(u.forward_ns, ns(rng) / 4);  // whole numbers: sums are exact
    if (host_bytes_per_s > 0 && i % 2 == 1) u.backward_ns = ns(rng);  // measured for some, 2 t for the rest
    c.units.push_back(u);
  }
  c.before_bytes = bytes(rng);
  c.after_bytes = bytes(rng) * 2;
  c.host_bytes_per_s = host_bytes_per_s;
  return c;
}

// The run modes an offload mode allows (what the planner may choose from).
bool allowed(autograd::OffloadMode mode, const Run& r) {
  switch (mode) {
    case autograd::OffloadMode::None: return !r.offloaded;
    case autograd::OffloadMode::Auto: return true;
    case autograd::OffloadMode::Boundaries: return r.offloaded == r.checkpointed;
    case autograd::OffloadMode::All: return r.offloaded;
  }
  return false;
}

// Every plan of n units: each composition of n into runs, each run in one of the four modes, or
// of the eight (each offloaded or not) when `offload`.
void for_each_plan(int n, const std::function<void(const std::vector<Run>&)>& fn, bool offload = false) {
  std::vector<Run> runs;
  std::function<void(int64_t)> rec = [&](int64_t begin) {
    if (begin == n) {
      fn(runs);
      return;
    }
    for (int64_t end = begin + 1; end <= n; ++end)
      for (int m = 0; m < (offload ? 8 : 4); ++m) {
        runs.push_back({begin, end, (m & 1) != 0, (m & 2) != 0, (m & 4) != 0});
        rec(end);
        runs.pop_back();
      }
  };
  rec(0);
}

}  // namespace

TEST_CASE("the peak model on a hand-worked chain of 4 units") {
  ChainCost c = uniform_chain(4);  // T = 100
  c.before_bytes = 7;
  c.after_bytes = 50;
  // Plain: everything held at the end of forward, plus the head: 8T + 50, before it 7.
  auto plain = autograd::predict(c, {{0, 4, false, false}});
  CHECK(plain.peak_bytes == 7 + 800 + 50);
  CHECK(plain.recompute_ns == 0);
  // Two segments of 2: held 1T each; backward of the second: T + (T + 4T) = 6T.
  auto segs = autograd::predict(c, {{0, 2, true, false}, {2, 4, true, false}});
  CHECK(segs.peak_bytes == 7 + 600);
  CHECK(segs.recompute_ns == 40);
  // Selective over all: held T + 4T = 5T (+ the head: 5T + 50); backward: 5T + max a = 7T.
  auto sel = autograd::predict(c, {{0, 4, false, true}});
  CHECK(sel.peak_bytes == 7 + 700);
  CHECK(sel.recompute_ns == 4);
  // A segment around a selective scope: held T; backward T + 4T + 2T.
  auto both = autograd::predict(c, {{0, 4, true, true}});
  CHECK(both.peak_bytes == 7 + 700);
  CHECK(both.recompute_ns == 44);
  CHECK_REEL_ERROR(autograd::predict(c, {{0, 2, false, false}, {3, 4, false, false}}), "does not continue");
  CHECK_REEL_ERROR(autograd::predict(c, {{0, 3, false, false}}), "the runs cover units [0, 3) of 4");
}

TEST_CASE("the planner finds the fastest plan under the budget: dynamic program against brute force") {
  std::mt19937 rng(12345);
  for (int n = 1; n <= 10; ++n) {
    for (int trial = 0; trial < (n <= 7 ? 4 : 1); ++trial) {  // n = 10: 7.8 million plans
      CAPTURE(n);
      CAPTURE(trial);
      const ChainCost c = random_chain(n, rng);
      // Brute force: the least time for each budget, and the least peak of all.
      std::map<int64_t, double> fastest;  // peak -> the least time of the plans with that peak
      for_each_plan(n, [&](const std::vector<Run>& runs) {
        const autograd::Prediction p = autograd::predict(c, runs);
        auto [it, fresh] = fastest.emplace(p.peak_bytes, p.recompute_ns);
        if (!fresh) it->second = std::min(it->second, p.recompute_ns);
      });
      const int64_t least = fastest.begin()->first;
      CHECK(autograd::min_feasible_peak(c) == least);
      const int64_t plain = autograd::predict(c, {{0, n, false, false}}).peak_bytes;
      for (int64_t budget = least; budget <= plain + 1; budget += std::max<int64_t>(1, (plain - least) / 9)) {
        CAPTURE(budget);
        double best = std::numeric_limits<double>::infinity();
        for (auto it = fastest.begin(); it != fastest.end() && it->first <= budget; ++it)
          best = std::min(best, it->second);
        const autograd::CheckpointPlan plan = autograd::plan_checkpoint(c, budget);
        CHECK(plan.predicted.peak_bytes <= budget);
        CHECK(plan.predicted.recompute_ns == best);
        CHECK(plan.runs.front().begin == 0);
        CHECK(plan.runs.back().end == n);
      }
      const std::string expected = "the least activation peak any plan reaches on this chain is " + format_bytes(least);
      CHECK_REEL_ERROR(autograd::plan_checkpoint(c, least - 1), expected.c_str());
    }
  }
}

TEST_CASE("the planner on a long uniform chain: between plain and sqrt(N), never slower than every-K") {
  const int n = 64;
  const ChainCost c = uniform_chain(n);
  const int64_t plain = autograd::predict(c, {{0, n, false, false}}).peak_bytes;
  // A generous budget needs no recompute at all; half of it is met by selective runs alone.
  CHECK(autograd::plan_checkpoint(c, plain).predicted.recompute_ns == 0);
  const autograd::CheckpointPlan half = autograd::plan_checkpoint(c, plain * 55 / 100);
  CHECK(half.predicted.recompute_ns <= n * 1.0);  // at most the selective recompute of every unit
  // every:K for each K: the planner at every-K's own peak is at least as fast.
  for (int k : {2, 4, 8, 16}) {
    CAPTURE(k);
    CheckpointPolicy every;
    every.kind = CheckpointPolicy::Kind::Every;
    every.every = k;
    const autograd::Prediction p = autograd::predict(c, every.plan(n));
    const autograd::CheckpointPlan plan = autograd::plan_checkpoint(c, p.peak_bytes);
    CHECK(plan.predicted.recompute_ns <= p.recompute_ns);
    CHECK(plan.predicted.peak_bytes <= p.peak_bytes);
  }
  CHECK(half.str().find("budget ") == 0);
  CHECK(half.str().find("selective") != std::string::npos);
  CHECK_REEL_ERROR(autograd::plan_checkpoint(ChainCost{}, 100), "the chain has no units to plan");
}

TEST_CASE("the peak and time model with offloaded runs, on a hand-worked chain of 4 units") {
  ChainCost c = uniform_chain(4);  // T = 100: a = 200, s = 100, b = 100, t = 10, t_sel = 1, t_bwd = 2t
  c.before_bytes = 7;
  c.after_bytes = 50;
  c.host_bytes_per_s = 1e9;  // a byte a nanosecond
  // [0,2) a segment whose boundary goes to host: it holds nothing on the device; while backward is
  // in [2,4) it comes back (100 + 400); the copy of 100 ns hides 20 ns behind [2,4)'s forward and
  // 40 behind its backward: 80 + 60 unhidden. The end of forward: 400 + the head 50.
  auto seg = autograd::predict(c, {{0, 2, true, false, true}, {2, 4, false, false}});
  CHECK(seg.peak_bytes == 7 + 500);
  CHECK(seg.recompute_ns == 20);
  CHECK(seg.copy_ns == 80 + 60);
  CHECK(seg.host_bytes == 100);
  CHECK(seg.time_ns() == 160);
  // Kept on the device the boundary is there at the end of forward too: 100 + 400 + 50.
  CHECK(autograd::predict(c, {{0, 2, true, false}, {2, 4, false, false}}).peak_bytes == 7 + 550);
  // A plain run offloaded: 400 bytes to host; its prefetch during [2,4)'s backward is the peak.
  auto plain = autograd::predict(c, {{0, 2, false, false, true}, {2, 4, false, false}});
  CHECK(plain.peak_bytes == 7 + 800);
  CHECK(plain.copy_ns == (400 - 20) + (400 - 40));
  // The segment's backward hides the copy of the run before it: replay 20 + backward 40 >= 60.
  c.host_bytes_per_s = 100e9 / 60;  // 100 bytes in 60 ns
  auto hidden = autograd::predict(c, {{0, 2, true, false, true}, {2, 4, true, false}});
  CHECK(hidden.copy_ns == doctest::Approx(60 - 20));  // out behind a 20 ns forward, back behind 60
  c.host_bytes_per_s = 1e9;
  // The last run offloaded is off the device while the head saves (800 + 50 kept, 800 offloaded:
  // the peak is its own backward, 800), and its copy hides behind nothing.
  auto last = autograd::predict(c, {{0, 4, false, false, true}});
  CHECK(autograd::predict(c, {{0, 4, false, false}}).peak_bytes == 7 + 850);
  CHECK(last.peak_bytes == 7 + 800);
  CHECK(last.copy_ns == 2 * 800);
  // A measured backward replaces 2t.
  for (UnitCost& u : c.units) u.backward_ns = 5;
  CHECK(autograd::predict(c, {{0, 2, true, false, true}, {2, 4, false, false}}).copy_ns == 80 + 90);
  c.host_bytes_per_s = 0;
  CHECK_REEL_ERROR(autograd::predict(c, {{0, 2, true, false, true}, {2, 4, false, false}}),
                   "run [0, 2) is offloaded, but the chain has no host link");
}

TEST_CASE("the planner with offload: dynamic program against brute force under each offload mode") {
  using autograd::OffloadMode;
  std::mt19937 rng(2468);
  int offloading_plans = 0;  // how many of the DP's plans offload something (the option is exercised)
  for (int n = 1; n <= 7; ++n) {
    for (int trial = 0; trial < (n <= 5 ? 4 : n == 6 ? 2 : 1); ++trial) {  // n = 7: 4.25 million plans
      CAPTURE(n);
      CAPTURE(trial);
      const ChainCost c = random_chain(n, rng, 4e9);
      // Brute force: per offload mode, the least time for each peak.
      const OffloadMode modes[] = {OffloadMode::None, OffloadMode::Boundaries, OffloadMode::All, OffloadMode::Auto};
      std::map<int64_t, double> fastest[4];
      for_each_plan(
          n,
          [&](const std::vector<Run>& runs) {
            const autograd::Prediction p = autograd::predict(c, runs);
            for (int k = 0; k < 4; ++k) {
              if (!std::all_of(runs.begin(), runs.end(), [&](const Run& r) { return allowed(modes[k], r); }))
                continue;
              auto [it, fresh] = fastest[k].emplace(p.peak_bytes, p.time_ns());
              if (!fresh) it->second = std::min(it->second, p.time_ns());
            }
          },
          true);
      for (int k = 0; k < 4; ++k) {
        CAPTURE(autograd::offload_mode_name(modes[k]));
        const int64_t least = fastest[k].begin()->first;
        CHECK(autograd::min_feasible_peak(c, modes[k]) == least);
        const int64_t plain = autograd::predict(c, {{0, n, false, false}}).peak_bytes;
        for (int64_t budget = least; budget <= plain + 1; budget += std::max<int64_t>(1, (plain - least) / 9)) {
          CAPTURE(budget);
          double best = std::numeric_limits<double>::infinity();
          for (auto it = fastest[k].begin(); it != fastest[k].end() && it->first <= budget; ++it)
            best = std::min(best, it->second);
          const autograd::CheckpointPlan plan = autograd::plan_checkpoint(c, budget, modes[k]);
          CHECK(plan.predicted.peak_bytes <= budget);
          CHECK(plan.predicted.time_ns() == best);
          for (const Run& r : plan.runs) CHECK(allowed(modes[k], r));
          if (modes[k] == OffloadMode::Auto)
            offloading_plans += std::any_of(plan.runs.begin(), plan.runs.end(), [](const Run& r) { return r.offloaded; });
        }
        const std::string expected =
            "the least activation peak any plan reaches on this chain is " + format_bytes(least);
        CHECK_REEL_ERROR(autograd::plan_checkpoint(c, least - 1, modes[k]), expected.c_str());
      }
      // Offload can only lower the least peak.
      CHECK(fastest[3].begin()->first <= fastest[0].begin()->first);
    }
  }
  CHECK(offloading_plans > 10);
}

TEST_CASE("offload is never chosen without a host link, and forced modes need one") {
  using autograd::OffloadMode;
  std::mt19937 rng(777);
  for (int trial = 0; trial < 8; ++trial) {
    const ChainCost c = random_chain(8, rng);  // host_bytes_per_s = 0: the cpu device
    const int64_t least = autograd::min_feasible_peak(c, OffloadMode::Auto);
    CHECK(least == autograd::min_feasible_peak(c, OffloadMode::None));
    const int64_t plain = autograd::predict(c, {{0, 8, false, false}}).peak_bytes;
    for (int64_t budget = least; budget <= plain; budget += std::max<int64_t>(1, (plain - least) / 5)) {
      const autograd::CheckpointPlan plan = autograd::plan_checkpoint(c, budget, OffloadMode::Auto);
      for (const Run& r : plan.runs) CHECK_FALSE(r.offloaded);
      CHECK(plan.offload == OffloadMode::None);
      CHECK(plan.predicted.time_ns() == autograd::plan_checkpoint(c, budget, OffloadMode::None).predicted.time_ns());
      CHECK(plan.str().find("offload") == std::string::npos);
    }
    CHECK_REEL_ERROR(autograd::plan_checkpoint(c, plain, OffloadMode::All), "offload all needs the host link's bandwidth");
    CHECK_REEL_ERROR(autograd::min_feasible_peak(c, OffloadMode::Boundaries),
                     "offload boundaries needs the host link's bandwidth");
  }
}

namespace {

// An independent simulation of a step's copy stream for `runs`, every one offloaded (one unit each),
// as autograd::Offload and nn::Sequential execute it: each run's forward makes `saves` equal saves
// evenly over its forward time; each save's copy out goes on the copy stream (in order, B bytes a
// ns) and past `bound` bytes waiting the compute waits for the oldest; backward walks the runs back,
// each run's first rule bringing it and the run before it back (OffloadPrefetch::Scope) behind
// whatever the copy stream still holds, and waiting for its own. Returns the compute's waiting (ns).
double simulate_copy_waits(const ChainCost& c, int64_t bound, int saves) {
  const double B = c.host_bytes_per_s * 1e-9;
  const size_t n = c.units.size();
  double now = 0, copy_end = 0, waited = 0;
  std::vector<std::pair<double, int64_t>> waiting;  // copies out not seen done: (end, bytes), oldest first
  for (const UnitCost& u : c.units) {
    const int64_t each = u.saved_bytes / saves;
    for (int k = 0; k < saves; ++k) {
      now += u.forward_ns / saves;
      copy_end = std::max(copy_end, now) + static_cast<double>(each) / B;
      waiting.emplace_back(copy_end, each);
      int64_t total = 0;
      for (auto it = waiting.begin(); it != waiting.end();)
        if (it->first <= now) it = waiting.erase(it);
        else total += (it++)->second;
      while (total > bound) {
        waited += std::max(0.0, waiting.front().first - now);
        now = std::max(now, waiting.front().first);
        total -= waiting.front().second;
        waiting.erase(waiting.begin());
      }
    }
  }
  std::vector<double> back(n);  // when each run's copy back lands
  const auto fetch = [&](size_t r) {
    copy_end = std::max(copy_end, now) + static_cast<double>(c.units[r].saved_bytes) / B;
    back[r] = copy_end;
  };
  for (size_t r = n; r-- > 0;) {
    if (r == n - 1) fetch(r);
    if (r > 0) fetch(r - 1);
    waited += std::max(0.0, back[r] - now);
    now = std::max(now, back[r]);
    const UnitCost& u = c.units[r];
    now += u.backward_ns > 0 ? u.backward_ns : 2 * u.forward_ns;
  }
  return waited;
}

// Runs that save much in a short forward between runs that save little in a long one: 12 MiB in
// 0.1 ms, 1 MiB in 2 ms, over a 10 GB/s link (12 MiB take 1.26 ms).
ChainCost bursty_chain(int pairs) {
  ChainCost c;
  for (int i = 0; i < pairs; ++i) {
    c.units.push_back({12 << 20, 12 << 20, 1 << 20, 100e3, 0});
    c.units.push_back({1 << 20, 1 << 20, 1 << 20, 2e6, 0});
  }
  c.host_bytes_per_s = 10e9;
  return c;
}

std::vector<Run> all_offloaded(int64_t n) {
  std::vector<Run> runs;
  for (int64_t i = 0; i < n; ++i) runs.push_back({i, i + 1, false, false, true});
  return runs;
}

}  // namespace

TEST_CASE("the in-flight bound: at or above every run's held bytes the prices are those with no bound, never below") {
  std::mt19937 rng(97531);
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    const int n = 1 + trial % 6;
    ChainCost c = random_chain(n, rng, 4e9);
    ChainCost bounded = c;
    int64_t largest = 0;  // the most a run of this chain can hold: all of its saves and inputs
    for (const UnitCost& u : c.units) largest += u.saved_bytes + u.input_bytes;
    bounded.offload_inflight_bytes = trial % 2 ? largest : autograd::kNoOffloadInflightBound;
    if (n <= 3)  // every plan of the small chains
      for_each_plan(
          n,
          [&](const std::vector<Run>& runs) {
            const autograd::Prediction a = autograd::predict(c, runs), b = autograd::predict(bounded, runs);
            CHECK(a.peak_bytes == b.peak_bytes);
            CHECK(a.copy_ns == b.copy_ns);
            CHECK(a.copy_out_ns == b.copy_out_ns);
          },
          true);
    const int64_t budget = autograd::min_feasible_peak(c);
    CHECK(autograd::min_feasible_peak(bounded) == budget);
    const autograd::CheckpointPlan p = autograd::plan_checkpoint(c, budget),
                                   q = autograd::plan_checkpoint(bounded, budget);
    CHECK(p.str() == q.str());
    CHECK(p.predicted.time_ns() == q.predicted.time_ns());
  }
  // Any bound: never priced below no bound (a bound only adds waiting), the peak unchanged.
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    const ChainCost c = random_chain(3, rng, 4e9);
    ChainCost bounded = c;
    bounded.offload_inflight_bytes = 4 * (1 + trial);
    for_each_plan(
        3,
        [&](const std::vector<Run>& runs) {
          const autograd::Prediction a = autograd::predict(c, runs), b = autograd::predict(bounded, runs);
          CHECK(a.peak_bytes == b.peak_bytes);
          CHECK(b.copy_out_ns >= a.copy_out_ns);
          CHECK(b.copy_ns - b.copy_out_ns == a.copy_ns - a.copy_out_ns);  // the copies back are as before
        },
        true);
  }
  ChainCost c = uniform_chain(2);
  c.offload_inflight_bytes = -1;
  CHECK_REEL_ERROR(autograd::predict(c, {{0, 2, false, false}}), "offload_inflight_bytes must be >= 0");
}

TEST_CASE("the in-flight bound: the model's copy waits agree with a simulation of the copy stream") {
  // Three pairs, every run offloaded, at a bound of 2 MiB: each 12 MiB run's 10 MiB past the bound
  // go out during its own 0.1 ms forward (about 0.95 ms of stall each), which the model without the
  // bound hides behind the next run's 2 ms forward. The simulation makes 64 saves a run.
  ChainCost c = bursty_chain(3);
  const int64_t n = static_cast<int64_t>(c.units.size());
  c.offload_inflight_bytes = 2 << 20;
  const double simulated = simulate_copy_waits(c, c.offload_inflight_bytes, 64);
  const autograd::Prediction p = autograd::predict(c, all_offloaded(n));
  CAPTURE(simulated);
  CAPTURE(p.copy_ns);
  MESSAGE("bound 2 MiB: simulated waits " << simulated * 1e-6 << " ms, the model's " << p.copy_ns * 1e-6 << " ms");
  CHECK(std::abs(p.copy_ns - simulated) <= 0.1 * simulated);  // within 10%
  CHECK(p.copy_ns >= simulated);           // pessimistic: what a run leaves waiting is taken as the bound's worth
  CHECK(p.copy_out_ns > 0.8 * p.copy_ns);  // mostly the stalls
  // Without the bound the model hides those copies (and so does the simulation, within 10%).
  c.offload_inflight_bytes = 0;
  const double free = simulate_copy_waits(c, autograd::kNoOffloadInflightBound, 64);
  const autograd::Prediction q = autograd::predict(c, all_offloaded(n));
  CAPTURE(free);
  CAPTURE(q.copy_ns);
  MESSAGE("no bound: simulated waits " << free * 1e-6 << " ms, the model's " << q.copy_ns * 1e-6 << " ms");
  CHECK(q.copy_ns < 0.15 * p.copy_ns);
  CHECK(free < 0.15 * simulated);
}

TEST_CASE("the in-flight bound: the planner weighs the stall against recompute") {
  // Unit 0 saves 12 MiB in 0.3 ms; unit 1 saves 1 MiB in 5 ms; unit 2 saves 12 MiB. A budget of
  // 14 MiB needs unit 0 offloaded (its copy hides behind unit 1's forward and backward: free) or
  // recomputed (a segment: 0.3 ms). At a bound of 1 MiB, 11 MiB must go out during unit 0's own
  // forward: about 0.85 ms of stall, so the segment is faster.
  ChainCost c;
  c.units.push_back({12 << 20, 12 << 20, 1 << 20, 0.3e6, 0});
  c.units.push_back({1 << 20, 1 << 20, 1 << 20, 5e6, 0});
  c.units.push_back({12 << 20, 12 << 20, 1 << 20, 0.3e6, 0});
  c.host_bytes_per_s = 10e9;
  const int64_t budget = 14 << 20;
  const autograd::CheckpointPlan free = autograd::plan_checkpoint(c, budget);
  CAPTURE(free.str());
  REQUIRE(!free.runs.empty());
  CHECK(free.runs[0].offloaded);
  CHECK(!free.runs[0].checkpointed);
  CHECK(free.predicted.time_ns() == 0);
  c.offload_inflight_bytes = 1 << 20;
  const autograd::CheckpointPlan bound = autograd::plan_checkpoint(c, budget);
  CAPTURE(bound.str());
  REQUIRE(!bound.runs.empty());
  CHECK(bound.runs[0].checkpointed);  // (its 1 MiB boundary may go to the host: that copy hides)
  CHECK(bound.predicted.host_bytes < (12 << 20));
  CHECK(bound.predicted.time_ns() == doctest::Approx(0.3e6));
  // The offloaded plan at that bound: the stall the planner weighed.
  const double stall = autograd::predict(c, free.runs).copy_out_ns;
  CHECK(stall == doctest::Approx((11 << 20) / 10.0 - 0.3e6));
}

TEST_CASE("the in-flight bound: dynamic program against brute force") {
  std::mt19937 rng(8642);
  for (int n = 1; n <= 5; ++n)
    for (int trial = 0; trial < 3; ++trial) {
      CAPTURE(n);
      CAPTURE(trial);
      ChainCost c = random_chain(n, rng, 4e9);
      c.offload_inflight_bytes = 4 * (20 + trial * 16);  // below many runs' held bytes (a multiple of 4)
      std::map<int64_t, double> fastest;
      for_each_plan(
          n,
          [&](const std::vector<Run>& runs) {
            const autograd::Prediction p = autograd::predict(c, runs);
            auto [it, fresh] = fastest.emplace(p.peak_bytes, p.time_ns());
            if (!fresh) it->second = std::min(it->second, p.time_ns());
          },
          true);
      const int64_t least = fastest.begin()->first;
      CHECK(autograd::min_feasible_peak(c) == least);
      const int64_t plain = autograd::predict(c, {{0, n, false, false}}).peak_bytes;
      for (int64_t budget = least; budget <= plain + 1; budget += std::max<int64_t>(1, (plain - least) / 7)) {
        CAPTURE(budget);
        double best = std::numeric_limits<double>::infinity();
        for (auto it = fastest.begin(); it != fastest.end() && it->first <= budget; ++it)
          best = std::min(best, it->second);
        CHECK(autograd::plan_checkpoint(c, budget).predicted.time_ns() == best);
      }
    }
}

TEST_CASE("the planner with offload on a long uniform chain: a lower least peak, never slower") {
  const int n = 24;
  ChainCost c = uniform_chain(n);
  c.host_bytes_per_s = 10e9;  // 100 bytes in 10 ns: a boundary's copy hides behind one unit
  ChainCost no_host = c;
  no_host.host_bytes_per_s = 0;
  const int64_t least = autograd::min_feasible_peak(c);
  CHECK(least < autograd::min_feasible_peak(no_host));
  const autograd::CheckpointPlan low = autograd::plan_checkpoint(c, least);
  CHECK(low.predicted.peak_bytes <= least);
  CHECK(low.str().find("+offload") != std::string::npos);
  const int64_t plain = autograd::predict(c, {{0, n, false, false}}).peak_bytes;
  for (int64_t budget = autograd::min_feasible_peak(no_host); budget <= plain; budget += plain / 8) {
    CAPTURE(budget);
    CHECK(autograd::plan_checkpoint(c, budget).predicted.time_ns() <=
          autograd::plan_checkpoint(no_host, budget).predicted.time_ns());
  }
}

TEST_CASE("a plan's text names offloaded runs and the copy time; the offload modes parse and print") {
  autograd::CheckpointPlan plan;
  plan.runs = {{0, 4, true, false, true}, {4, 6, false, true, true}, {6, 8, false, false}};
  plan.budget_bytes = int64_t{48} << 20;
  plan.predicted = {int64_t{46} << 20, 3.1e6, 0.4e6, int64_t{12} << 20};
  plan.plain_peak_bytes = int64_t{120} << 20;
  plan.least_peak_bytes = int64_t{20} << 20;
  plan.forward_ns = 40e6;
  plan.host_bytes_per_s = 64e9;
  CHECK(plan.str() ==
        "budget " + format_bytes(plan.budget_bytes) + ": [0,4) segment+offload, [4,6) selective+offload, [6,8) plain; "
        "predicted peak " + format_bytes(plan.predicted.peak_bytes) + " (plain " + format_bytes(plan.plain_peak_bytes) +
        ", least " + format_bytes(plan.least_peak_bytes) + "), time 3.50 ms = recompute 3.10 ms + unhidden copy 0.40 ms "
        "(forward 40.00 ms), " + format_bytes(plan.predicted.host_bytes) + " to host and back at 64.0 GB/s");
  // Without offloaded runs, the text it always had.
  plan.runs = {{0, 8, true, false}};
  plan.predicted = {int64_t{46} << 20, 3.1e6, 0, 0};
  CHECK(plan.str() == "budget " + format_bytes(plan.budget_bytes) + ": [0,8) segment; predicted peak " +
                          format_bytes(plan.predicted.peak_bytes) + " (plain " + format_bytes(plan.plain_peak_bytes) +
                          ", least " + format_bytes(plan.least_peak_bytes) + "), recompute 3.10 ms (forward 40.00 ms)");
  for (const char* text : {"none", "boundaries", "all", "auto"})
    CHECK(std::string(autograd::offload_mode_name(autograd::parse_offload_mode(text))) == text);
  CHECK_REEL_ERROR(autograd::parse_offload_mode("host"), "offload mode 'host': expected none, boundaries, all or auto");
}

TEST_CASE("the policy text still round-trips; a policy's own runs are never offloaded") {
  for (const char* text : {"none", "every:3", "sqrt", "list:0,2", "selective", "budget:48MiB", "budget:1536KiB"}) {
    CAPTURE(text);
    const CheckpointPolicy p = CheckpointPolicy::parse(text);
    CHECK(CheckpointPolicy::parse(p.str()) == p);
    if (p.kind != CheckpointPolicy::Kind::Budget)
      for (const Run& r : p.plan(7)) CHECK_FALSE(r.offloaded);
  }
}

namespace {
// N blocks of Sequential(Linear(D, D), GELU): each block one child, as the planner counts.
std::shared_ptr<nn::Sequential> block_chain(int n, int64_t d) {
  auto chain = std::make_shared<nn::Sequential>();
  for (int i = 0; i < n; ++i)
    chain->push_back(std::make_shared<nn::Sequential>(
        std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(d, d), std::make_shared<nn::GELU>()}));
  return chain;
}
}  // namespace

TEST_CASE("Sequential's offload switch: refused on cpu, the runs it offloads, gradients as without") {
  using autograd::OffloadMode;
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(3);
    auto chain = block_chain(9, 8);
    chain->to(device);
    const Tensor x = randn({4, 8}, DType::f32, device), target = randn({4, 8}, DType::f32, device);
    auto forward_loss = [&] { return sum(mul(tanh((*chain)(x)), target)); };
    auto grads = [&] {
      for (const Tensor& p : chain->parameters()) p.set_grad(Tensor());
      autograd::backward(forward_loss());
      std::vector<double> g;
      for (const Tensor& p : chain->parameters()) {
        const std::vector<double> v = reel::testing::values(p.grad());
        g.insert(g.end(), v.begin(), v.end());
      }
      return g;
    };
    const std::vector<double> plain = grads();
    // sqrt over 9: [0,3) [3,6) checkpointed, [6,9) plain. Boundaries offloads the first two only;
    // all offloads every run, selective's one run included; boundaries leaves selective's run alone.
    struct Case {
      const char* policy;
      OffloadMode mode;
      const char* first_offloaded;  // null: none
    };
    for (const Case& k : {Case{"sqrt", OffloadMode::Boundaries, "run [0, 3)"}, Case{"sqrt", OffloadMode::All, "run [0, 3)"},
                          Case{"selective", OffloadMode::All, "run [0, 9)"}, Case{"selective", OffloadMode::Boundaries, nullptr},
                          Case{"sqrt", OffloadMode::Auto, nullptr}, Case{"none", OffloadMode::All, "run [0, 9)"}}) {
      CAPTURE(std::string(k.policy));
      CAPTURE(std::string(autograd::offload_mode_name(k.mode)));
      chain->set_checkpoint(nn::CheckpointPolicy::parse(k.policy));
      if (device.is_cpu() && (k.mode == OffloadMode::Boundaries || k.mode == OffloadMode::All)) {
        // Refused at the call, naming the model's device, not at the first forward.
        const OffloadMode before = chain->offload();
        CHECK_REEL_ERROR(chain->set_offload(k.mode), "the model is on cpu, and offload moves saved activations");
        CHECK(chain->offload() == before);  // unchanged
        continue;
      }
      chain->set_offload(k.mode);
      CHECK(chain->offload() == k.mode);
      if (!k.first_offloaded || device.is_cpu()) {
        CHECK(grads() == plain);
      } else {
        CHECK(grads() == plain);
      }
      autograd::Tape::current().clear();
    }
    // A budget: on cpu auto plans without offload and the forced modes are refused.
    chain->set_checkpoint(nn::CheckpointPolicy::budget(int64_t{1} << 30));
    chain->set_offload(OffloadMode::Auto);
    const autograd::CheckpointPlan& plan = chain->plan_checkpoint(forward_loss);
    CHECK(grads() == plain);
    if (device.is_cpu()) {
      CHECK(plan.offload == OffloadMode::None);
      for (const Run& r : plan.runs) CHECK_FALSE(r.offloaded);
      CHECK_REEL_ERROR(chain->set_offload(OffloadMode::Boundaries), "Sequential.set_offload(boundaries): the model is on cpu");
      chain->set_offload(OffloadMode::Auto);
      CHECK(chain->checkpoint_plan() == nullptr);  // set_offload drops the plan
    }
    chain->set_offload(OffloadMode::None);
  }
}

TEST_CASE("the run levers: the four built in come first, runs name them by their flags, bad entries are refused") {
  const std::vector<autograd::RunLever>& levers = autograd::run_levers();
  REQUIRE(levers.size() >= 4);
  const char* names[] = {"plain", "segment", "selective", "segment around selective"};
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    const autograd::RunLever& l = levers[static_cast<size_t>(k)];
    CHECK(l.name == names[k]);
    CHECK(l.checkpointed == ((k & 1) != 0));
    CHECK(l.selective == ((k & 2) != 0));
    CHECK(l.exact);
    CHECK(l.offloadable);
    const Run r = autograd::make_lever_run(l, 2, 5);
    CHECK(r.lever.empty());  // a built-in is named by its flags
    CHECK(&autograd::run_lever(r) == &l);
  }
  CHECK(levers[0].open == nullptr);  // a plain run opens no scope
  for (size_t k = 4; k < levers.size(); ++k) {  // the library's others: named by Run::lever
    const Run r = autograd::make_lever_run(levers[k], 0, 1);
    CHECK(r.lever == levers[k].name);
    CHECK(&autograd::run_lever(r) == &levers[k]);
  }
  Run unknown{0, 1, false, false, false, "zstd saves"};
  CHECK_REEL_ERROR(autograd::run_lever(unknown), "run [0, 1) names lever \"zstd saves\", which is not registered");
  ChainCost c = uniform_chain(2);
  CHECK_REEL_ERROR(autograd::predict(c, {unknown, {1, 2}}), "which is not registered");

  autograd::RunLever bad;
  bad.cost = [](const ChainCost&, int64_t, int64_t) { return autograd::LeverCost{}; };
  CHECK_REEL_ERROR(autograd::register_run_lever(bad), "register_run_lever: a lever needs a name");
  bad.name = "segment";
  CHECK_REEL_ERROR(autograd::register_run_lever(bad), "a lever named \"segment\" is registered already");
  bad.name = "mine";
  bad.checkpointed = true;
  CHECK_REEL_ERROR(autograd::register_run_lever(bad), "sets checkpointed or selective, which name the four built-in");
  bad.checkpointed = false;
  bad.cost = nullptr;
  CHECK_REEL_ERROR(autograd::register_run_lever(bad), "lever \"mine\" has no cost function");
  CHECK(autograd::run_levers().size() == levers.size());  // none of them was added
}

TEST_CASE("a lever registered at run time: the planner and predict read its entry; inexact only when allowed") {
  // A lever that keeps a quarter of a plain run's bytes (as a lossy compression might) for a
  // quarter of its forward time, not exact and not offloadable.
  const std::string name = "quarter saves (test)";
  {
    autograd::RunLever quarter;
    quarter.name = name;
    quarter.code = "q";
    quarter.exact = false;
    quarter.offloadable = false;
    quarter.cost = [](const ChainCost& c, int64_t i, int64_t j) {
      autograd::LeverCost lc;
      int64_t widest = 0;
      for (int64_t u = i; u < j; ++u) {
        lc.held += c.units[static_cast<size_t>(u)].saved_bytes / 4;
        lc.time += c.units[static_cast<size_t>(u)].forward_ns / 4;
        widest = std::max(widest, c.units[static_cast<size_t>(u)].saved_bytes);
      }
      lc.work = lc.held + widest;
      return lc;
    };
    autograd::register_run_lever(quarter);
  }
  const autograd::RunLever& quarter = autograd::run_levers().back();
  REQUIRE(quarter.name == name);
  // Hand-worked: 4 units of a = 200, t = 10 (uniform_chain), one quarter run: held 200, work 400,
  // time 10; after it the head's 0 bytes.
  ChainCost c = uniform_chain(4);
  const autograd::Prediction p = autograd::predict(c, {autograd::make_lever_run(quarter, 0, 4)});
  CHECK(p.peak_bytes == 400);
  CHECK(p.recompute_ns == 10);
  // Exact levers only: the least peak is what they reach; the quarter lever is never chosen.
  const int64_t exact_least = autograd::min_feasible_peak(c);
  CHECK(exact_least > 400);
  for (int64_t budget = exact_least; budget <= 800; budget += 50)
    for (const Run& r : autograd::plan_checkpoint(c, budget).runs) CHECK(r.lever.empty());
  // Allowed: a lower least peak, and below the exact one the plan uses it (never offloaded).
  const int64_t inexact_least = autograd::min_feasible_peak(c, autograd::OffloadMode::Auto, true);
  CHECK(inexact_least < exact_least);
  const autograd::CheckpointPlan plan = autograd::plan_checkpoint(c, exact_least - 1, autograd::OffloadMode::Auto, true);
  CHECK(plan.inexact);
  CHECK(plan.predicted.peak_bytes <= exact_least - 1);
  bool uses = false;
  for (const Run& r : plan.runs) uses |= r.lever == name;
  CHECK(uses);
  CHECK(plan.str().find(name) != std::string::npos);
  c.host_bytes_per_s = 4e9;
  const int64_t all_least = autograd::min_feasible_peak(c, autograd::OffloadMode::All, true);
  for (const Run& r : autograd::plan_checkpoint(c, all_least, autograd::OffloadMode::All, true).runs)
    CHECK((r.lever.empty() && r.offloaded));  // all: every run offloaded, so never the quarter lever
  Run offloaded = autograd::make_lever_run(quarter, 0, 4, true);
  CHECK_REEL_ERROR(autograd::predict(c, {offloaded}), "its lever \"quarter saves (test)\" may not be offloaded");
  // Unregistered again: it is no real lever, and the registry is the process's.
  autograd::unregister_run_lever(name);
  CHECK_REEL_ERROR(autograd::run_lever(offloaded), "which is not registered");
  CHECK_REEL_ERROR(autograd::unregister_run_lever(name), "no lever named \"quarter saves (test)\" is registered");
  CHECK_REEL_ERROR(autograd::unregister_run_lever("segment"), "\"segment\" is one of the library's levers");
}

TEST_CASE("bf16 saves: half the held bytes, gradients within bf16's rounding, the measured peak within the prediction") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(17);
    const int n = 8;
    auto chain = block_chain(n, 32);
    chain->to(device);
    const Tensor x = randn({16, 32}, DType::f32, device), target = randn({16, 32}, DType::f32, device);
    auto forward_loss = [&] { return sum(mul(tanh((*chain)(x)), target)); };
    struct Step {
      std::vector<double> grads;
      int64_t peak = 0;  // the step's activation peak
    };
    auto step = [&] {
      for (const Tensor& p : chain->parameters()) p.set_grad(Tensor());
      const int64_t before = memory_stats(device)[Category::Activation].current_bytes;
      reset_peak_memory(device);
      autograd::backward(forward_loss());
      Step s;
      s.peak = memory_stats(device)[Category::Activation].peak_bytes - before;
      for (const Tensor& p : chain->parameters()) {
        const std::vector<double> v = reel::testing::values(p.grad());
        s.grads.insert(s.grads.end(), v.begin(), v.end());
      }
      return s;
    };
    // Within bf16's rounding of each saved value (2^-9 relative): the gradients' error relative
    // to their norm, and not bit-identical (the saves were compressed).
    auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
      REQUIRE(got.size() == want.size());
      double err = 0, norm = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        err += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
      }
      return std::sqrt(err) <= 1e-2 * std::sqrt(norm);
    };
    chain->set_checkpoint(nn::CheckpointPolicy::parse("none"));
    const Step plain = step();

    // The scope alone: every f32 activation of the forward kept at half its bytes.
    {
      const int64_t before = memory_stats(device)[Category::Activation].current_bytes;
      Tensor loss = forward_loss();
      const int64_t full = memory_stats(device)[Category::Activation].current_bytes - before;
      loss = Tensor();
      autograd::Tape::current().clear();
      autograd::Bf16Saves half;
      loss = forward_loss();
      const int64_t compressed = memory_stats(device)[Category::Activation].current_bytes - before;
      CAPTURE(full);
      CAPTURE(compressed);
      CHECK(compressed * 10 <= full * 6);  // half, and the caller's x and the loss at full size
      CHECK(compressed * 10 >= full * 4);
      loss = Tensor();
      autograd::Tape::current().clear();
    }

    // The planner: the lever is not exact, so it is planned only when allowed.
    chain->set_checkpoint(nn::CheckpointPolicy::budget(plain.peak));
    const int64_t exact_least = chain->plan_checkpoint(forward_loss).least_peak_bytes;
    const autograd::ChainCost cost = *chain->chain_cost();
    const autograd::RunLever* bf16 = nullptr;
    for (const autograd::RunLever& l : autograd::run_levers())
      if (l.name == "bf16 saves") bf16 = &l;
    REQUIRE(bf16 != nullptr);
    CHECK_FALSE(bf16->exact);
    // The whole chain as one bf16 run: the model's peak against the measured one.
    {
      autograd::CheckpointPlan one;
      one.runs = {autograd::make_lever_run(*bf16, 0, n)};
      one.predicted = autograd::predict(cost, one.runs);
      one.budget_bytes = one.predicted.peak_bytes;
      chain->use_checkpoint_plan(one);
      const Step s = step();
      CAPTURE(s.peak);
      CAPTURE(one.predicted.peak_bytes);
      MESSAGE(device.str() << ": one bf16 run over the chain, peak " << s.peak << " bytes (predicted "
                           << one.predicted.peak_bytes << "), plain " << plain.peak);
      CHECK(s.peak <= one.predicted.peak_bytes);
      CHECK(s.peak * 10 <= plain.peak * 7);  // the saves at half size
      CHECK(close(s.grads, plain.grads));
      CHECK(s.grads != plain.grads);
    }
    // A budget between the least peak and the plain one: the exact levers recompute to meet it.
    // Allowed, the planner may take bf16 runs where their casts cost less than a recompute (on a
    // chain this small, the measured times decide); never slower on the same measurements.
    const int64_t budget = plain.peak * 6 / 10;
    REQUIRE(budget > exact_least);
    chain->set_checkpoint(nn::CheckpointPolicy::budget(budget));
    chain->set_inexact_levers(true);
    const autograd::CheckpointPlan& plan = chain->plan_checkpoint(forward_loss);
    MESSAGE(device.str() << ", inexact levers allowed: " << plan.str());
    CHECK(plan.inexact);
    autograd::ChainCost measured = *chain->chain_cost();
    CHECK(measured.device_bytes_per_s > 0);  // the casts were priced
    const autograd::CheckpointPlan exact = autograd::plan_checkpoint(measured, budget, autograd::OffloadMode::None);
    CHECK(plan.predicted.time_ns() <= exact.predicted.time_ns());
    CHECK(plan.least_peak_bytes <= exact.least_peak_bytes);
    {
      const Step planned = step();
      CHECK(planned.peak <= plan.predicted.peak_bytes);
      CHECK(planned.peak <= budget);
      CHECK(close(planned.grads, plain.grads));
    }
    // Where the casts cost next to nothing (a wide chain, whose GEMMs dwarf them), bf16 runs win
    // at that budget: the plan runs them, its peak within the prediction.
    measured.device_bytes_per_s = 1e18;
    const autograd::CheckpointPlan cheap = autograd::plan_checkpoint(measured, budget, autograd::OffloadMode::None, true);
    CAPTURE(cheap.str());
    bool uses = false;
    for (const Run& r : cheap.runs) uses |= r.lever == "bf16 saves";
    CHECK(uses);
    CHECK(cheap.str().find("bf16 saves") != std::string::npos);
    CHECK(cheap.predicted.time_ns() < exact.predicted.time_ns());
    chain->use_checkpoint_plan(cheap);
    {
      const Step planned = step();
      CHECK(planned.peak <= cheap.predicted.peak_bytes);
      CHECK(planned.peak <= budget);
      CHECK(close(planned.grads, plain.grads));
      CHECK(planned.grads != plain.grads);
    }
    chain->set_inexact_levers(false);
    CHECK(chain->checkpoint_plan() == nullptr);  // the switch drops the plan
    CHECK(autograd::Tape::current().empty());
  }
}
