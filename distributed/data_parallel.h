// Data-parallel training: every rank holds the whole model, trains on its own shard of each
// window, and the ranks' gradients are summed so that every rank steps with the gradients of the
// whole global window.
//
//   distributed::DataParallel dp(model.parameters());            // broadcasts rank 0's parameters
//   optim::Accumulator acc(opt, {.clip_norm = 1, .sync = &dp});
//   acc.step(my_micro_batches, count, loss);              // as on one process
//
// What the window does on each rank (optim::Accumulator drives it through optim::WindowSync):
//   1. the window's count (samples or non-ignored tokens) is summed over ranks before any backward,
//      so each rank scales its sum-reduced loss by 1 / global count: the rank gradients then simply
//      add up to the global window's gradient, with uneven shards too;
//   2. the micro-batches before the last accumulate locally (no communication: PyTorch's no_sync);
//   3. during the last backward the parameters' gradients are summed over ranks in BUCKETS (about
//      Options::bucket_bytes each, parameters taken in reverse order, the order backward usually
//      finishes them). The tape reports each parameter whose gradient is final (a backward
//      observer's leaf_grad_ready, autograd/hooks.h); a bucket whose parameters are all final is
//      copied into its flat buffer and its MPI_Iallreduce started while backward goes on; MPI is
//      driven between backward rules. Buckets start strictly in order, so every rank issues the same collectives in the
//      same order. After backward the remaining buckets start, all are waited for and copied back;
//      exactly one all-reduce per bucket per window;
//   4. clipping uses the global norm (the gradients are the same on every rank).
//
// ZeRO-1 (Options::zero_stage = 1, with distributed::ZeroAdamW): step 3 reduce-scatters each bucket
// instead, so rank r receives only its chunk of the summed gradients; ZeroAdamW keeps the AdamW
// moments of that chunk alone (the optimizer state per rank is 1/world of plain AdamW's), steps it,
// and all-gathers the updated parameters. The global norm is the square root of the ranks' summed
// squared chunk norms (distributed/sharding.h). ZeRO-2 and ZeRO-3 (gradients and parameters sharded too,
// any optimizer) are distributed::FullyShardedDataParallel (distributed/fsdp.h).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/hooks.h"
#include "core/profile.h"
#include "distributed/process_group.h"
#include "optim/accumulator.h"
#include "optim/optimizer.h"

namespace reel::distributed {

class DataParallel final : public optim::WindowSync {
 public:
  struct Options {
    int64_t bucket_bytes = int64_t{1} << 20;  // gradient bytes per bucket (a parameter is never split)
    bool overlap = true;  // false: every bucket starts after backward (for comparison)
    int zero_stage = 0;   // 1: reduce-scatter the gradients for distributed::ZeroAdamW
  };
  // The parameters (each requires grad, contiguous) are overwritten with rank 0's values.
  DataParallel(std::vector<Tensor> params, Options options, ProcessGroup& group = ProcessGroup::world());
  explicit DataParallel(std::vector<Tensor> params) : DataParallel(std::move(params), Options{}) {}
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // optim::WindowSync
  int64_t global_count(int64_t local) override;
  void before_last_backward() override;
  void after_last_backward() override;
  double global_sum(double local) override;
  double grad_norm() override;
  void scale_grads(double factor) override;
  std::vector<Tensor> step_grads() override;  // ZeRO-1: the gradient shards; else empty (the .grad)

  ProcessGroup& group() const { return group_; }
  const std::vector<Tensor>& params() const { return params_; }
  const Options& options() const { return options_; }
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Bucket collectives (all-reduces, or reduce-scatters under ZeRO-1) started since construction,
  // and how many of them started before backward ended (overlapped with it).
  int64_t grad_syncs() const { return grad_syncs_; }
  int64_t overlapped_syncs() const { return overlapped_syncs_; }
  // Seconds spent after the windows' last backwards starting the remaining buckets and waiting for
  // all of them: the communication backward did not hide. With overlap off it is all of it, so
  // 1 - (this with overlap) / (this without) is the share of the all-reduce time hidden.
  double exposed_seconds() const { return exposed_seconds_; }

  // ZeRO-1: bucket b's parameters, flattened and padded to a multiple of the world size, are
  // `padded(b)` elements; this rank owns elements [rank * chunk(b), (rank + 1) * chunk(b)), and
  // shard(b) holds the summed gradient of that chunk after the window's last backward.
  struct Bucket {
    std::vector<size_t> params;   // indices into params(), in the order they are laid out
    std::vector<int64_t> offset;  // element offset of each in the flat buffer
    int64_t numel = 0, padded = 0;
    Tensor flat;   // (padded) on the parameters' device: the gradients, then (replicated) their sum
    Tensor shard;  // ZeRO-1: (padded / world), this rank's chunk of the summed gradients
    size_t ready = 0;  // parameters whose gradient is final in this backward
    Work work;
    profile::AsyncSpan in_flight;  // under a Profiler: from the launch to the moment it was seen done
  };
  const std::vector<Bucket>& bucket_list() const { return buckets_; }

 private:
  void grad_ready(const AutogradMeta& leaf);
  void launch(size_t b, bool during_backward);
  void disarm();

  std::vector<Tensor> params_;
  Options options_;
  ProcessGroup& group_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket
  std::unordered_map<const AutogradMeta*, size_t> index_of_;  // a parameter's autograd state -> index
  size_t next_ = 0;     // the next bucket to start (they start in order)
  bool armed_ = false;  // inside the window's last backward
  std::shared_ptr<autograd::BackwardObserver> trigger_;  // while armed with overlap: calls grad_ready
  int64_t grad_syncs_ = 0, overlapped_syncs_ = 0;
  double exposed_seconds_ = 0;
};

// AdamW with ZeRO stage 1: each rank keeps and steps the moments of its chunk of every bucket of a
// DataParallel made with zero_stage = 1, then all-gathers the parameters. Equal to optim::AdamW
// over the same gradients (the update is elementwise). Its state_dict() holds only "step" (the
// Optimizer base's, which knows no shards): checkpoints use full_state_dict().
class ZeroAdamW final : public optim::Optimizer {
 public:
  ZeroAdamW(DataParallel& dp, double lr,
            optim::Adam::Options options = optim::Adam::Options{0.9, 0.999, 1e-8, 0.01});

  // The state as optim::AdamW's state_dict() holds it ("step", "exp_avg.<i>", "exp_avg_sq.<i>" in
  // parameter i's shape), gathered from every rank's chunks. A collective: every rank calls it and
  // gets the whole dict (rank 0 saves it); the full moments exist on every rank meanwhile. Gathered
  // rather than saved per rank so that a checkpoint does not depend on the world size: it loads
  // into ZeroAdamW on any number of ranks, or into plain AdamW on one.
  optim::StateDict full_state_dict();
  // Loads such a dict (from full_state_dict() or AdamW::state_dict(); every rank passes the same
  // one): each rank keeps its chunk of the moments, without communicating. reel::Error for a
  // missing "step", an unexpected key, a wrong shape, or moments of some parameters only.
  void load_full_state_dict(const optim::StateDict& state);
  // A sharded checkpoint's part (examples/run_checkpoints.h, one file a rank): "step" and this
  // rank's chunk of each bucket's moments ("exp_avg.<bucket>", "exp_avg_sq.<bucket>"); no
  // collective, the tensors are the optimizer's own.
  optim::StateDict shard_checkpoint() const;
  // Puts back the parts some number of ranks wrote (every part, in rank order): each bucket's
  // moments joined from the parts' chunks (their padding dropped) and loaded as
  // load_full_state_dict does, so this rank keeps its own cut for this world size. No collective.
  void load_shard_checkpoint(const std::vector<optim::StateDict>& parts);

 private:
  void update(const std::vector<size_t>& with_grad) override;
  std::vector<std::string> state_slots() const override { return {}; }
  DataParallel& dp_;
  optim::Adam::Options options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // per bucket: (padded / world)
};

// The indices of one rank's share of a dataset of `size` samples for `epoch`: one permutation
// (seeded by seed and epoch, the same on every rank; identity when !shuffle), dealt round-robin
// (rank r takes positions r, r + world, ...), so the shares differ by at most one sample.
std::vector<int64_t> shard_indices(int64_t size, int rank, int world, uint64_t seed, int64_t epoch,
                                   bool shuffle = true);

}  // namespace reel::distributed
