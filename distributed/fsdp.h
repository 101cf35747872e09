// Sharded data parallel: ZeRO-2 (gradients and optimizer state split across ranks) and ZeRO-3 / FSDP
// (parameters too), over a model cut into units.
//
//   distributed::FullyShardedDataParallel fsdp(model, {blocks...}, {.stage = 3});  // rank 0's values everywhere
//   optim::AdamW opt(fsdp.shard_parameters(), 3e-4);    // any optimizer: it steps the shards
//   optim::Accumulator acc(opt, {.clip_norm = 1, .sync = &fsdp});
//   acc.step(my_micro_batches, count, loss);            // as on one process
//   // mixed precision: {.stage = 3, .param_dtype = DType::bf16}, forwards under Autocast(bf16)
//
// Units: the modules named (each GPT block, the embeddings, the head, or each leaf Linear / LayerNorm /
// Embedding; any descendant of the model), in forward order (the order reductions follow), plus a root unit (the model itself) holding every parameter no named unit owns. A
// parameter belongs to the first unit listed that has it (a tied weight to the first of its modules);
// a named unit left with no parameter of its own is refused. A unit's parameters are flattened into
// one flat buffer (its dtype and device, padded with zeros to a multiple of the world size,
// distributed/sharding.h): the parameter tensors become views of that buffer's storage (same tensors, same
// identity; under Options::param_dtype the buffer, and so the parameters, are 16-bit: see Mixed
// precision). Rank r owns chunk r of it as a leaf tensor, its shard (in the parameters' own dtype),
// with a persistent .grad: the optimizer is given shard_parameters() and steps only those.
//
// Stage 3 (parameters sharded). The flat storage of a unit exists only while the unit is gathered;
// otherwise it is released (core/storage.h: its bytes leave the allocator's statistics, the tensors
// and what the tape saved of them stay). Gathered (the shards all-gathered straight into that same
// storage, materialised again: no staging copy) and released:
//   forward   a pre-forward hook gathers the unit; its forward hook releases it again, except the
//             unit whose forward ends last (the root when it has parameters, else the last unit
//             listed: backward needs it first) and the units in Options::keep;
//   replay    module hooks do not run at replay (autograd/checkpoint.h): before each replayed op that
//             reads a released unit's parameters, the unit is gathered again, and after the op that
//             reads it last in the segment it is released again (except the units of the segment's
//             last op that reads any, when a rule reads them: backward starts there), so a replay
//             holds one unit at a time, not the whole segment's;
//   backward  before a node's backward rule that reads a released unit's values, the unit is gathered
//             again. A rule reads what its saves hold (a slot whose storage is the unit's: W, a view
//             of it such as w.t(), or the parameter a recast slot casts again); a node of a collapsed segment counts every unit it takes as
//             an input (directly or through a view) until its replay re-makes its saves. So a unit
//             only taken as an input is not gathered: an embedding's table (its rule reads the
//             indices), a first layer's weight (its input needs no gradient: no rule saves it);
//   prefetch  (Options::prefetch) when backward makes unit u available (or, with
//             Options::prefetch_after_grads, once u's gradients are final and reduced), the unit before
//             u in this forward's order is gathered ahead (all_gather_async) if a rule below still
//             reads it, and in a replay the next unit the segment reads once u is gathered (or, with
//             prefetch_after_grads, once the replay is done with u); one at a time, waited for only
//             when used, so the communication overlaps the compute in between. It costs one more
//             gathered unit in flight (the collective writes the unit's own storage, materialised when
//             it starts; counted as Parameter);
//   released  after the last rule that reads its values (the observer's after_node), or inside it,
//             when the rule releases that save (saved_released: Linear and matmul after dX, so the
//             gathered weight is gone before the weight gradient's flat buffer exists); a unit still
//             gathered from forward that no rule reads, when backward starts; at the latest once
//             every parameter of the unit has its final gradient (leaf_grad_ready: a reader that
//             never ran). Never a unit in Options::keep;
//   after the optimizer's step (WindowSync::after_step) every unit still gathered (the kept ones) is
//   gathered again: the shards changed.
// A re-gather in backward (a replay, a rule, a prefetch) writes back exactly the values forward read:
// the all-gather's Write::Restore (distributed/process_group.h; as Tensor::restore_, no version bump), so the
// tape's saved-tensor version checks hold; a forward, after-step or gather_all gather writes new
// values (Write::Update) and bumps the version.
//
// Stage 2 (parameters whole): no gathers in forward or backward; after the step every unit's updated
// shards are all-gathered into the whole parameters.
//
// Gradients (both stages). When a rule first writes one of a unit's gradients (the observer's
// before_leaf_grad), its parameters' .grad become views of one flat buffer (Unit::grad_flat), which
// the reduce-scatter then reads in place. ReduceMode::PerMicroBatch: when a unit's gradients are
// final in a backward, its full gradients are reduce-scattered (summed) straight into the shard's
// .grad (accumulating over the window's micro-batches: this rank first adds what its shard .grad
// holds into its own chunk of the full buffer, so no second chunk-sized buffer exists) and the full
// gradient buffers are dropped, so gradient memory per rank is the shards plus one unit's full
// gradients; one reduce-scatter per unit per micro-batch.
// ReduceMode::PerWindow: full gradients accumulate locally over the window (full gradient memory),
// and are reduce-scattered once, in the window's last backward: one reduce-scatter per unit per window.
// Units are reduced in one fixed order (reverse of the list, root last), a unit only once the ones
// before it are, so every rank issues the same collectives in the same order (a rank without
// micro-batches in a PerWindow window reduces its zeros in the same order after its empty backward).
//
// Mixed precision (Options::param_dtype bf16 or f16, over f32 parameters). The shards stay f32: they
// are the master weights the optimizer steps. The flat storage, and so every parameter the model
// reads, is 16-bit: each gather rounds this rank's shard to 16 bits into its own slot of the storage
// (to nearest even, the same bits every time, so a re-gather in backward is still a Restore) and
// all-gathers in place (MPI and NCCL move 16-bit words: half the bytes of an f32 gather, and
// under stage 2 whole parameters of half the size). Gradients are f32: the .grad of each 16-bit
// parameter is an f32 view of Unit::grad_flat (f32), into which the tape sums each rule's 16-bit
// gradient widened (autograd/tape.cpp allows an f32 .grad on a 16-bit parameter), and the
// reduce-scatter sums f32 into the f32 shard gradients; 16-bit values are never reduced. Run the
// forwards under autograd::Autocast(param_dtype): its F32 ops (softmax, losses) take the 16-bit
// parameters up to f32, its Lower ops (GEMMs, norms) read them as they are; an op without an
// autocast rule reads 16-bit parameters (an embedding's table, a bias added outside linear), which
// one process with autocast over f32 parameters would read in f32. f16 wants the loss scaler
// (optim::GradScaler in the Accumulator): it unscales and checks the f32 shard gradients, and every
// rank skips a window any rank found non-finite. full_state_dict() and save() hold the f32 masters;
// gather_all() makes the parameters f32 again (their own storage, the masters' values), so what is
// evaluated and saved after training is what the optimizer stepped.
//
// As DataParallel: the window's count is summed over ranks before any backward (the loss normalised
// by the global count, exact with uneven shards); clipping uses the global norm, sqrt of the ranks'
// summed squared shard-gradient norms, and the non-finite decision a flag summed over the ranks
// (optim/accumulator.h), so a shard that alone holds an inf skips the window on every rank.
//
// Counting all-gathers (all_gathers(phase)). Stage 3, prefetch off, Options::keep empty, a model of U
// units whose every unit is used by each micro-batch's loss, R of them read by replayed checkpoint
// segments (each by one segment), S of those read by a segment's last op that reads any, N read by no
// backward rule (see backward above; the last unit and the S units are read by one): each
// micro-batch gathers U units in forward, R under Phase::Replay, and under Phase::Backward the U - N
// units a rule reads less the last unit (still gathered) and the S units (kept from their replay);
// so per window of M micro-batches
//   all-gathers = M * (2U - 1 + R - S - N) = units x (forward + replays + backward) minus what stays
// gathered (the last unit after forward, the S units from their replay into backward) and what
// backward does not read.
// With K kept units (none replayed, none of the N): M * (2(U - K) - 1 - N) + K (the K after the step). With prefetch some
// are issued early, under Phase::Prefetch; the total is the same. Stage 2: U per step (AfterStep).
// Reduce-scatters: M * U per window (PerMicroBatch) or U (PerWindow).
//
// Requirements: every rank runs the same graph (the same units used in the same order), and, under
// stage 3 or PerMicroBatch, the same number of micro-batches per window (every gather or reduce is a
// collective). The FSDP object's backward observer is on the thread that constructed it: train there.
// After construction do not move the model (Module::to) or load into its parameters directly: use
// load_full_state_dict. Destroying it gathers nothing (a destructor may run on one rank alone): under
// stage 3 the released units stay released, so take full_state_dict() first to keep the values.
// Works on cpu tensors (MPI) and cuda tensors (NCCL, or staged), as
// DataParallel; a world of one works too (every collective local).
//
// Trace: under a Profiler each all-gather and reduce-scatter is a span on the lanes of work in flight
// (profile::AsyncSpan: the communication track, beside DataParallel's buckets), named by its unit
// and phase; a prefetch's span runs from its start to the wait that used it.
//
// Checkpoints: full_state_dict() gathers the whole model (parameters and buffers, under the model's
// dotted names, as Module::state_dict()) on every rank; save() writes it from rank 0 as one
// safetensors file that nn::load reads into an unsharded model bit for bit; load() reads such a file
// (from a sharded or an unsharded run, any world size) into the shards. A run's checkpoint
// (examples/run_checkpoints.h) gathers nothing: shard_checkpoint() is this rank's part (its shards,
// their optimizer state, the buffers), load_shard_checkpoint() cuts every rank's parts anew for
// this rank and world size.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/profile.h"
#include "distributed/process_group.h"
#include "distributed/sharding.h"
#include "nn/module.h"
#include "optim/accumulator.h"

namespace reel {
class Storage;
}
namespace reel::autograd {
class BackwardObserver;  // autograd/hooks.h
struct RecordedInput;    // autograd/inspect.h
}

namespace reel::distributed {

class FullyShardedDataParallel final : public optim::WindowSync {
 public:
  enum class ReduceMode { PerMicroBatch, PerWindow };
  struct Options {
    int stage = 3;  // 2: gradients and optimizer state sharded; 3: parameters too
    ReduceMode reduce = ReduceMode::PerMicroBatch;
    bool prefetch = true;           // stage 3: gather the next unit of backward ahead
    std::vector<nn::Module*> keep;  // stage 3: units (named in `units`, or the model for the root) never released
    // Mixed precision (see above): bf16 or f16 gathers the f32 parameters in that dtype (the
    // model's parameters become 16-bit views; the f32 shards are the masters). Unset, or the
    // parameters' own dtype: gathered as they are.
    std::optional<DType> param_dtype;
    // Stage 3 prefetch in backward: false starts gathering the unit before u as soon as u is
    // gathered (it overlaps u's rules and the ones between; PyTorch's BACKWARD_PRE); true starts it
    // once u's gradients are final and, under PerMicroBatch, reduce-scattered (it overlaps only the
    // rules between the two units, but no unit is in flight beside another's values or whole
    // gradients; BACKWARD_POST).
    bool prefetch_after_grads = false;
  };
  // Where an all-gather was issued (all_gathers()).
  enum class Phase { Forward, Replay, Backward, Prefetch, AfterStep, Checkpoint /* full_state_dict, gather_all */ };
  static constexpr int kNumPhases = 6;
  static const char* phase_name(Phase p);

  // `units`: descendants of `model` (see above). The parameters (contiguous leaves that require grad)
  // are overwritten with rank 0's values and rebound to each unit's flat storage.
  FullyShardedDataParallel(nn::Module& model, const std::vector<nn::Module*>& units, Options options,
                           ProcessGroup& group = ProcessGroup::world());
  ~FullyShardedDataParallel() override;
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  // What the optimizer steps: one shard per unit, (chunk) each, this rank's.
  std::vector<Tensor> shard_parameters() const;

  // optim::WindowSync
  int64_t global_count(int64_t local) override;
  void before_last_backward() override;
  void after_last_backward() override;
  double global_sum(double local) override;
  double grad_norm() override;
  void scale_grads(double factor) override;
  void after_step() override;

  struct Unit {
    std::string name;  // the module's dotted name in the model ("" for the model)
    nn::Module* module = nullptr;
    std::vector<size_t> params;   // indices into the model's named_parameters(), in flat order
    std::vector<int64_t> offset;  // element offset of each in the flat buffer
    FlatShard layout;             // numel, padded, chunk, this rank's begin
    // (padded): the whole parameters' storage (released when not gathered), in Options::param_dtype
    Tensor flat;
    Tensor shard;  // (chunk): this rank's part in the parameters' dtype (the master), a leaf with a persistent .grad
    bool gathered = true;
    bool kept = false;  // stage 3: never released
    // (padded, in the shard's dtype): the unit's whole gradients while backward makes them (installed at the unit's first
    // rule, dropped by its reduce-scatter); the parameters' .grad are views of it, so the
    // reduce-scatter reads it in place instead of copying the gradients into a flat buffer first.
    Tensor grad_flat;
  };
  const std::vector<Unit>& units() const { return units_; }
  ProcessGroup& group() const { return group_; }
  const Options& options() const { return options_; }

  int64_t all_gathers(Phase phase) const { return gathers_[static_cast<int>(phase)]; }
  int64_t all_gathers() const;  // every phase
  int64_t reduce_scatters() const { return reduce_scatters_; }

  // Gathers every released unit and keeps every unit gathered from now on: the model holds whole
  // parameters again (evaluation, sampling or nn::save after training, on any one rank, with no
  // collectives), while the optimizer still steps the shards (after_step gathers the kept units).
  // Under param_dtype the parameters become the masters' dtype (f32) again, in storage of their own.
  // A collective; counted under Phase::Checkpoint.
  void gather_all();
  // The whole model's parameters and buffers by dotted name, gathered (a collective: every rank calls
  // it and gets the whole dict).
  nn::TensorDict full_state_dict();
  // Loads a whole-model dict (every rank passes the same one): each rank keeps its chunks, and
  // gathered units get the whole values. reel::Error listing missing, unexpected or misshapen keys;
  // nothing is changed unless all match.
  void load_full_state_dict(const nn::TensorDict& state);
  // full_state_dict() written by rank 0 as one safetensors file (every rank returns once it is
  // written), and read back on every rank.
  void save(const std::string& path, const nn::Metadata& metadata = {});
  void load(const std::string& path);

  // A sharded checkpoint's part (examples/run_checkpoints.h writes one file a rank): this rank's
  // shards ("shard.<unit>", the masters), the optimizer's state over them ("optimizer.<key>", its
  // state_dict over shard_parameters()) and the model's buffers ("buffer.<name>", replicated).
  // No collective: the tensors are the run's own.
  nn::TensorDict shard_checkpoint(const optim::Optimizer& optimizer) const;
  // Puts back the parts that some number of ranks wrote (every part, in rank order): each unit's
  // whole flat rebuilt from the parts' shards (their padding dropped) and cut anew for this rank and
  // world size, the optimizer's slots the same way, the buffers from part 0, the gathered units made
  // whole. No collective (every rank reads every part). reel::Error naming what does not match this
  // model's units.
  void load_shard_checkpoint(const std::vector<nn::TensorDict>& parts, optim::Optimizer& optimizer);

 private:
  class Observer;
  friend class Observer;
  void gather(size_t u, Phase phase);  // makes unit u gathered (waiting for its prefetch if in flight)
  Tensor gather_input(const Unit& k) const;  // the shard in the flat's dtype (itself, or rounded into its slot)
  void bind(const Unit& k);                  // the unit's parameters become views of k.flat (its dtype)
  void release(size_t u);
  void prefetch_before(size_t u, int64_t index);  // the unit before u in this forward's order, ahead, if a rule below index reads it
  void prefetch_after(size_t u);     // in a replay: the unit the segment reads after u, ahead
  void prefetch(size_t v);           // unit v ahead (stage 3, Options::prefetch, one at a time)
  void drop_prefetch();              // waits for a prefetch in flight and forgets it
  void install_grads(size_t u);      // the parameters' .grad become views of units_[u].grad_flat
  void reduce(size_t u);             // full gradients -> shard .grad, full gradients dropped
  void reduce_ready();               // reduces, in order, the units whose gradients are final
  void observe();                    // creates observer_ and adds it to this thread's backward observers
  void start_backward(size_t root);  // begin_backward: what each tape position up to root reads
  void end_backward();
  // The units that input `in` of the op at tape position i is or views (a parameter, or a view
  // whose producer reads one), added to `units`.
  void add_input_units(size_t i, const autograd::RecordedInput& in, std::vector<size_t>& units) const;
  std::vector<size_t> units_saved_by(size_t i) const;  // whose values the saves of position i hold
  size_t unit_of_storage(const Storage* storage) const;  // the unit whose flat storage it is, or SIZE_MAX
  size_t unit_holding(const Tensor& t) const;  // the unit whose flat storage t views, or SIZE_MAX
  bool read_below(size_t u, int64_t index) const;  // does a rule of a node below `index` read u's values?
  void release_unread(size_t u, int64_t index);   // stage 3: released if gathered, not kept, not read below index
  void before_node(int64_t index, Phase phase);
  void after_rule(int64_t index);
  void saved_released(int64_t index, const Tensor& value);
  void before_leaf_grad(const AutogradMeta& leaf);
  void before_replay(size_t begin, size_t last);
  void after_replay_node(int64_t index);
  void leaf_ready(const AutogradMeta& leaf);
  void pre_forward(size_t u);
  void post_forward(size_t u);

  nn::Module& model_;
  Options options_;
  ProcessGroup& group_;
  std::vector<std::pair<std::string, Tensor>> params_;  // the model's named_parameters()
  std::vector<Unit> units_;
  std::vector<size_t> unit_of_;                               // parameter index -> unit
  std::unordered_map<const AutogradMeta*, size_t> param_of_;  // a parameter's autograd state -> index
  size_t last_unit_ = 0;              // the unit whose forward ends last: not released after forward
  std::vector<size_t> reduce_order_;  // reverse of the list, root last
  std::vector<nn::HookHandle> hooks_;
  std::shared_ptr<autograd::BackwardObserver> observer_;  // an Observer (fsdp_backward.cpp)

  // This forward: the units in the order their forwards began.
  std::vector<size_t> forward_order_;
  // This backward (begin_backward to end_backward): the units each tape position reads, and per unit the distinct
  // parameters the tape uses and how many of them have their final gradient.
  bool in_backward_ = false;
  std::vector<std::vector<size_t>> reads_;
  // ...and the units whose values its rule reads (its saves hold them; a node of a collapsed segment:
  // every unit it reads, until its replay re-makes the saves); a rule's entry is emptied once it ran.
  std::vector<std::vector<size_t>> value_reads_;
  std::vector<int64_t> expected_, ready_;
  std::vector<bool> done_;     // this backward: gradients final
  // The segment being replayed: its units in the order the replay reads them, each unit's last
  // reader there (-1: none), and the units of its last op (kept gathered for backward).
  std::vector<size_t> replay_order_;
  std::vector<int64_t> replay_last_read_;
  std::vector<size_t> replay_keep_;
  size_t replay_last_ = 0;
  size_t next_reduce_ = 0;     // position in reduce_order_
  std::vector<bool> reduced_;  // this window (PerWindow) / this backward (PerMicroBatch)
  bool armed_ = false;         // inside the window's last backward
  int64_t rule_index_ = 0;     // this backward: the tape position of the rule run last

  // The prefetch in flight: its unit (whose storage the collective writes) and its collective.
  struct InFlight {
    size_t unit = 0;
    Work work;
    profile::AsyncSpan span;  // under a Profiler: from the start to the wait
  };
  std::unique_ptr<InFlight> in_flight_;

  std::array<int64_t, kNumPhases> gathers_{};
  int64_t reduce_scatters_ = 0;
};

}  // namespace reel::distributed
