// The checkpoint planner: given what each unit of a chain (the children of an nn::Sequential, the
// blocks of a GPT) saves and costs, the runs that recompute the least while the step's activation
// peak stays within a memory budget. A run is plain, checkpointed (one segment), selective (matmul
// outputs kept, the rest recomputed), or a segment around a selective scope.
//
// The model of the peak, for runs r_1 .. r_m walked back by backward:
//   held(r)  what r keeps once its forward is done      work(r)  what is live while backward is in r
//   plain       sum a                                      sum a
//   segment     b_first                                    b_first + sum a
//   selective   b_first + sum s                            held + max a
//   seg + sel   b_first                                    b_first + sum s + max a
// (a: a unit's saved bytes run plain, s: run selective, b: its input, the boundary a segment
// holds). Backward reaches r with the runs before it still held, so
//   peak = before + max(sum_k held(r_k) + after, max_k (sum_{q<k} held(r_q) + work(r_k)))
// where `before` is what the step saved before the chain and `after` what it saves after it (the
// head and the loss, freed before the chain's backward starts). Recompute time: a segment re-runs
// its forward (sum t), a selective scope its recomputed ops (sum t_sel), both when nested.
//
// plan_checkpoint minimises the time subject to peak <= budget by dynamic programming over
// (units done, bytes held): for each prefix it keeps the (held, time) pairs no other pair beats on
// both. Chen et al. (2016) give the sqrt(N) rule this generalises; the chain DP is in the spirit of
// Beaumont et al.'s rotor, with selective runs as a third choice per run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"

namespace reel::autograd {

struct UnitCost {
  int64_t saved_bytes = 0;      // a: activations the unit keeps when it runs plain
  int64_t selective_bytes = 0;  // s: what it keeps inside a selective scope
  int64_t input_bytes = 0;      // b: its input, held by a segment or selective scope starting here
  double forward_ns = 0;        // t: its forward, re-run when it is in a segment
  double selective_ns = 0;      // t_sel: its ops a selective scope recomputes (all but the kept)
};

struct ChainCost {
  std::vector<UnitCost> units;
  int64_t before_bytes = 0;  // activations the step saved before the chain starts
  int64_t after_bytes = 0;   // activations it saves after the chain (head, loss)
};

struct Prediction {
  int64_t peak_bytes = 0;
  double recompute_ns = 0;
};
// The model above for `runs`, which must cover the chain's units in order.
Prediction predict(const ChainCost& cost, const std::vector<CheckpointPolicy::Run>& runs);

struct CheckpointPlan {
  std::vector<CheckpointPolicy::Run> runs;
  int64_t budget_bytes = 0;
  Prediction predicted;
  int64_t plain_peak_bytes = 0;  // the model's peak with no checkpointing, for scale
  int64_t least_peak_bytes = 0;  // the least peak any plan reaches (min_feasible_peak)
  double forward_ns = 0;         // the chain's forward, for scale
  // "budget 48.00 MiB: [0,8) segment, [8,64) selective; predicted peak 46.2 MiB (plain 120 MiB,
  // least 20 MiB), recompute 3.1 ms (forward 40.0 ms)"
  std::string str() const;
};

// The plan with the least predicted recompute time whose predicted peak is at most budget_bytes.
// reel::Error naming the least peak any plan reaches when the budget is below it.
CheckpointPlan plan_checkpoint(const ChainCost& cost, int64_t budget_bytes);
// The least predicted peak of any plan.
int64_t min_feasible_peak(const ChainCost& cost);

}  // namespace reel::autograd
