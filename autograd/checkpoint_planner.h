// The checkpoint planner: given what each unit of a chain (the children of an nn::Sequential, the
// blocks of a GPT) saves and costs, the runs that cost the least time while the step's activation
// peak on the device stays within a memory budget. A run executes through one lever, an entry of a
// registry (run_levers() below): plain, segment (checkpointed), selective (matmul outputs kept, the
// rest recomputed), a segment around a selective scope, and the levers added since (the list in
// autograd/checkpoint_planner.cpp, or register_run_lever). Each lever says what its run holds, what is live during its backward,
// the time it adds, whether its gradients are exact, and opens its scopes around the run's forward;
// the planner's dynamic program, predict() and nn::Sequential all read those entries. Offload stays
// a modifier orthogonal to the levers, not an entry: any lever whose entry allows it may also be
// offloaded (autograd/offload.h): a plain or selective run's saves, or a segment's boundary, go to
// host memory during forward and come back before backward needs them (it wraps the lever's scopes
// from outside, and its copies and prefetch are a term of the model below, not of one run).
//
// The model of the peak, for runs r_1 .. r_m walked back by backward:
//   held(r)  what r keeps once its forward is done      work(r)  what is live while backward is in r
//   plain       sum a                                      sum a
//   segment     b_first                                    b_first + sum a
//   selective   b_first + sum s                            held + max a
//   seg + sel   b_first                                    b_first + sum s + max a
//   (a lever)   its cost()                                 its cost()
//   offloaded   0 on the device (held(r) is on the host)   work unchanged (its bytes are back)
// (a: a unit's saved bytes run plain, s: run selective, b: its input, the boundary a segment
// holds). An offloaded run comes back whole when backward first needs it, and is prefetched one
// run ahead: its bytes come back while backward is in the run after it, so that run's term also
// counts pre(r_{k-1}) = held(r_{k-1}) when r_{k-1} is offloaded (0 otherwise). This is what
// autograd::Offload does with OffloadPrefetch::Scope, one scope per run (nn::Sequential). Backward
// reaches r_k with the runs before it still held, so
//   peak = before + max(sum_k dev(r_k) + after,
//                       max_k (sum_{q<k} dev(r_q) + pre(r_{k-1}) + work(r_k)))
// with dev(r) = held(r), or 0 when r is offloaded; `before` is what the step saved before the chain
// and `after` what it saves after it (the head and the loss, freed before the chain's backward
// starts; nothing is prefetched during the head's backward, so the last run comes back at its own
// first rule, and its copy back hides behind nothing). A run's copy to the host, still in flight
// while the next run's forward saves, is within that next run's backward term, so forward adds no
// term of its own (the model assumes each copy lands within the next run's forward, the head's for
// the last run; what does not is charged as time below). autograd::Offload makes the assumption
// hold whatever the timing: the device bytes waiting for their copy out never exceed its
// max_inflight_bytes (the compute stream waits past it), so with a bound no larger than the
// smallest offloaded run's held bytes the forward stays within the terms above, and the waiting it
// costs is the unhidden copy-out time charged below.
//
// Time: each unit's t and t_sel are its kernels' times in one measured forward, host-measured or,
// given a GPU (ChainCost::priced_on), that GPU's predicted times for the same kernel records
// (nn::Sequential::set_cost_device; core/kernel_price.h's roofline, the one report/predict.h uses).
// A segment re-runs its forward (sum t), a selective scope its recomputed ops (sum t_sel),
// both when nested; another lever says its own (a lever that casts its saves: the casts). An
// offloaded run copies held(r) bytes each way at the host link's bandwidth B (host_bytes_per_s).
// The copy stream, in order: each run's saves are made over its forward and wait for their copy
// out; with no bound (ChainCost::offload_inflight_bytes 0) the model takes them as all waiting when
// the forward ends (none credited to the run's own forward), to go out behind the next run's
// forward. With a bound L the compute stream waits whenever more than L bytes wait, so at most
// w(r) = min(held(r), L) of them are left when r's forward ends, and the rest, held(r) - w(r), go
// out during r's own forward, behind the run before's w (they queue behind it). The compute
// waits, at the end of each run's forward, for both (a fluid model of the copy stream at the
// granularity of runs: the bytes waiting grow through a forward that saves faster than B moves
// them, so the bound binds at its end, and shrink through one that does not), and never less than
// with no bound (a bound only adds waiting; where the model without one is pessimistic, crediting
// no run's own forward, it stays so):
//   out(r_k)  = max(0, max(w(r_{k-1}) + h(r_k) - w(r_k), h(r_{k-1})) / B - forward(r_k))
//   back(r_k) = max(0, h(r_{k-1}) / B - backward(r_k))
// with h(r) = held(r) and w(r) as above when r is offloaded (0 and 0 when not), forward the sum of
// its units' t and backward its replay plus sum t_bwd (t_bwd = 2 t unless measured); after the
// last run the head counts as a run with no compute and nothing offloaded. With no bound, or one
// at least every offloaded run's held bytes, w = h and out(r_k) = max(0, held(r_{k-1}) / B -
// forward(r_k)): the copy out hides behind the next run's forward alone. A bound below a run's held
// bytes moves part of its copy out into its own forward: a run that saves much in a short forward
// then stalls however long the next run's forward is, and recompute may beat that
// (Prediction::copy_out_ns). report/predict.h simulates the copy stream kernel by kernel instead.
// The predicted step time is the recompute plus that unhidden copy.
//
// plan_checkpoint minimises the time subject to peak <= budget by dynamic programming over
// (units done, bytes held, bytes the last run has offloaded): for each prefix it keeps the triples
// no other triple beats on all three (the third decides the next run's prefetch term and how much
// of its copy hides, its w included, so the DP stays exact under a bound too). Each run it tries
// is one lever of run_levers(), offloaded or not; a lever that is not exact only when the caller
// allows inexact levers. Chen et al. (2016) give the sqrt(N) rule this generalises; the chain DP is
// in the spirit of Beaumont et al.'s rotor, with selective and offloaded runs as further choices
// per run.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/offload.h"  // OffloadMode

namespace reel::autograd {

struct UnitCost {
  int64_t saved_bytes = 0;      // a: activations the unit keeps when it runs plain
  int64_t selective_bytes = 0;  // s: what it keeps inside a selective scope
  int64_t input_bytes = 0;      // b: its input, held by a segment or selective scope starting here
  double forward_ns = 0;        // t: its forward, re-run when it is in a segment
  double selective_ns = 0;      // t_sel: its ops a selective scope recomputes (all but the kept)
  double backward_ns = 0;       // t_bwd: its backward; 0: taken as 2 t (not measured)
};

struct ChainCost {
  std::vector<UnitCost> units;
  int64_t before_bytes = 0;  // activations the step saved before the chain starts
  int64_t after_bytes = 0;   // activations it saves after the chain (head, loss)
  double host_bytes_per_s = 0;  // the device<->host link, each way; 0: no run may be offloaded (cpu)
  // The device memory's bandwidth for a memory-bound pass (bytes read plus written per second), for
  // levers that price passes over the saves (casts); 0: not measured, such passes are free.
  double device_bytes_per_s = 0;
  // The bound on the device bytes waiting for their copy out that offloaded runs execute under
  // (autograd::Offload's max_inflight_bytes); 0 or kNoOffloadInflightBound: no bound (the model above).
  int64_t offload_inflight_bytes = 0;
  // Where the units' times came from: empty, measured on the host that ran them (host clocks: an
  // emulated CUDA kernel's is the emulator's); else the name of the profile::DeviceSpec whose
  // predicted times (core/kernel_price.h) priced the measuring forward's kernel records
  // (nn::Sequential::set_cost_device; on the meta device always, its host times being nothing).
  std::string priced_on;
};

// ---- the levers: the ways a run of units may be executed --------------------------------------
// What a run of units [begin, end) costs under a lever (the table above): the device bytes it
// holds once its forward is done, what is live while backward is in it, and the time it adds.
struct LeverCost {
  int64_t held = 0, work = 0;
  double time = 0;
};
// The scopes a lever opens around its run's forward; destroying it closes them (innermost first).
struct RunScope {
  virtual ~RunScope() = default;
};
struct RunLever {
  std::string name;  // a run's name in a plan's text ("segment", "segment around selective"); unique
  std::string code;  // a short code for tables ("c" segment, "s" selective, "cs" both, "" plain)
  // The flags of CheckpointPolicy::Run its runs carry: the four built-in levers are named by them
  // (Run::lever empty); a lever added later is named by Run::lever and carries neither.
  bool checkpointed = false, selective = false;
  bool exact = true;        // gradients bit-identical to the plain run's; if not, planned only when allowed
  bool offloadable = true;  // may be offloaded (checkpointed: its boundary; else its saves)
  std::function<LeverCost(const ChainCost& cost, int64_t begin, int64_t end)> cost;
  // Opens the lever's scopes for one run's forward (`policy` gives the selective keep rule); null:
  // it opens none (a plain run). An offloaded run's Offload scope is opened outside it.
  std::function<std::unique_ptr<RunScope>(const CheckpointPolicy& policy)> open;
};
// Every lever, the four built-in first (plain, segment, selective, segment around selective), then
// those of the list in autograd/checkpoint_planner.cpp, then those registered since, in order.
const std::vector<RunLever>& run_levers();
// Adds a lever (for a lever defined outside the library; the library's own are in that list), at
// start-up: not while another thread plans or runs a plan.
// reel::Error for an empty or taken name, a missing cost, or the flags set (they name the built-ins).
void register_run_lever(RunLever lever);
// Removes a lever registered at run time (as register_run_lever, not while another thread plans).
// reel::Error for a lever of the library, or a name no lever has.
void unregister_run_lever(const std::string& name);
// The lever `run` executes through: Run::lever by name, else the built-in its flags name.
// reel::Error for a name no lever has.
const RunLever& run_lever(const CheckpointPolicy::Run& run);
// A run of units [begin, end) through `lever`, offloaded or not.
CheckpointPolicy::Run make_lever_run(const RunLever& lever, int64_t begin, int64_t end, bool offloaded = false);

// The runs a fixed policy (not a budget) makes of n units under `offload`, as nn::Sequential runs
// them: boundaries offloads the checkpointed runs; all offloads every run, a plain run split into
// one run per unit (each its own offload scope, brought back one unit ahead: one run over the whole
// chain would come back at once, at the plain peak); none and auto offload nothing.
std::vector<CheckpointPolicy::Run> fixed_runs(const CheckpointPolicy& policy, int64_t n, OffloadMode offload);

struct Prediction {
  int64_t peak_bytes = 0;
  double recompute_ns = 0;  // the levers' added time: segments' and selective scopes' recompute, casts
  double copy_ns = 0;      // the offloaded runs' copy time not hidden behind compute
  int64_t host_bytes = 0;  // what the offloaded runs move to the host (and back) per step
  // Of copy_ns, the compute waiting for copies out (in forward: the stalls the in-flight bound
  // causes, and the run before's copy landing within a run's forward); the rest waits for copies back.
  double copy_out_ns = 0;
  double time_ns() const { return recompute_ns + copy_ns; }  // what the planner minimises
};
// The model above for `runs`, which must cover the chain's units in order. reel::Error for an
// offloaded run when cost.host_bytes_per_s is 0, or one whose lever may not be offloaded.
Prediction predict(const ChainCost& cost, const std::vector<CheckpointPolicy::Run>& runs);

struct CheckpointPlan {
  std::vector<CheckpointPolicy::Run> runs;
  int64_t budget_bytes = 0;
  Prediction predicted;
  int64_t plain_peak_bytes = 0;  // the model's peak with no checkpointing, for scale
  int64_t least_peak_bytes = 0;  // the least peak any plan reaches (min_feasible_peak)
  double forward_ns = 0;         // the chain's forward, for scale
  OffloadMode offload = OffloadMode::None;  // what the planner was allowed (None when no host link)
  bool inexact = false;                     // whether it was allowed levers that are not exact
  double host_bytes_per_s = 0;
  std::string priced_on;  // ChainCost::priced_on: empty, host-measured times; else the GPU predicted
  // "budget 48.00 MiB: [0,8) segment, [8,64) selective; predicted peak 46.2 MiB (plain 120 MiB,
  // least 20 MiB), recompute 3.1 ms (forward 40.0 ms)"; with offload the runs read
  // "[0,4) segment+offload" and the time "time 3.50 ms = recompute 3.10 ms + unhidden copy 0.40 ms
  // (forward 40.00 ms), 12.00 MiB to host and back at 64.0 GB/s"; times priced on a GPU end in
  // "; times predicted on h100".
  std::string str() const;
};

// The plan with the least predicted time (recompute plus unhidden copy) whose predicted peak is at
// most budget_bytes. `offload` says which runs may (auto) or must (boundaries: every checkpointed
// run, all: every run) be offloaded; auto with cost.host_bytes_per_s == 0 offloads nothing, and
// boundaries or all need it > 0 (reel::Error). `inexact` lets it choose levers whose gradients are
// not bit-identical to the plain run's (RunLever::exact false: saves kept in lower precision). reel::Error naming the
// least peak any plan reaches when the budget is below it.
CheckpointPlan plan_checkpoint(const ChainCost& cost, int64_t budget_bytes, OffloadMode offload = OffloadMode::Auto,
                               bool inexact = false);
// The least predicted peak of any plan `offload` (and `inexact`) allows.
int64_t min_feasible_peak(const ChainCost& cost, OffloadMode offload = OffloadMode::Auto, bool inexact = false);

}  // namespace reel::autograd
