// The checkpoint planner (autograd/checkpoint_planner.h) on its own: the peak model on hand-worked
// chains, the dynamic program against brute force over every plan of small chains (N <= 10), the
// least feasible peak, and the error for a budget below it. Planning a real chain from
// measurements, and the measured peak against the budget, are in test_module.cpp.
#include <functional>
#include <map>
#include <random>

#include "autograd/checkpoint_planner.h"
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

ChainCost random_chain(int n, std::mt19937& rng) {
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
    c.units.push_back(u);
  }
  c.before_bytes = bytes(rng);
  c.after_bytes = bytes(rng) * 2;
  return c;
}

// Every plan of n units: each composition of n into runs, each run in one of the four modes.
void for_each_plan(int n, const std::function<void(const std::vector<Run>&)>& fn) {
  std::vector<Run> runs;
  std::function<void(int64_t)> rec = [&](int64_t begin) {
    if (begin == n) {
      fn(runs);
      return;
    }
    for (int64_t end = begin + 1; end <= n; ++end)
      for (int m = 0; m < 4; ++m) {
        runs.push_back({begin, end, (m & 1) != 0, (m & 2) != 0});
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
