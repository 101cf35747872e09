// Data parallel and ZeRO-1 (see data_parallel.h): buckets, the tape hook that starts them, the
// window's synchronisation, the sharded AdamW and the dataset sharding.
#include "distributed/data_parallel.h"

#include <chrono>
#include <functional>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "autograd/hooks.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "distributed/sharding.h"
#include "kernels/optimizer.h"

namespace reel::distributed {

namespace {
Tensor flat_view(const Tensor& t) { return untracked::reshape(t, {t.numel()}); }
}  // namespace

DataParallel::DataParallel(std::vector<Tensor> params, Options options, ProcessGroup& group)
    : params_(std::move(params)), options_(options), group_(group) {
  REEL_CHECK(options_.bucket_bytes > 0, "DataParallel: bucket_bytes must be > 0, got ", options_.bucket_bytes);
  REEL_CHECK(options_.zero_stage == 0 || options_.zero_stage == 1, "DataParallel: zero_stage ",
             options_.zero_stage, " is not supported (0: replicated optimizer, 1: sharded AdamW state)");
  bucket_of_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    REEL_CHECK(p.defined() && p.requires_grad() && p.is_leaf() && p.is_contiguous(), "DataParallel: parameter ", i,
               " must be a contiguous leaf that requires grad");
    REEL_CHECK(index_of_.emplace(p.autograd_meta().get(), i).second, "DataParallel: parameter ", i, " (shape ",
               p.shape(), ") is listed twice");
  }
  // Rank 0's parameters everywhere, before anything trains.
  {
    autograd::NoGrad no_grad;
    for (const Tensor& p : params_) group_.broadcast(p, 0);
  }
  // Buckets in reverse parameter order: backward usually finishes the last layers' gradients first.
  const int world = group_.size();
  for (size_t r = params_.size(); r-- > 0;) {
    const Tensor& p = params_[r];
    const bool fits = !buckets_.empty() && [&] {
      const Tensor& first = params_[buckets_.back().params.front()];
      const int64_t bytes = (buckets_.back().numel + p.numel()) * static_cast<int64_t>(dtype_size(p.dtype()));
      return first.dtype() == p.dtype() && first.device() == p.device() && bytes <= options_.bucket_bytes;
    }();
    if (!fits) buckets_.emplace_back();
    Bucket& k = buckets_.back();
    k.params.push_back(r);
    k.offset.push_back(k.numel);
    k.numel += p.numel();
    bucket_of_[r] = buckets_.size() - 1;
  }
  MemoryCategory category(Category::Gradient);  // the buckets are gradient memory
  for (Bucket& k : buckets_) {
    const Tensor& first = params_[k.params.front()];
    k.padded = options_.zero_stage == 1 ? flat_shard(k.numel, group_.rank(), world).padded : k.numel;
    k.flat = zeros({k.padded}, first.dtype(), first.device());  // the padding stays zero
    if (options_.zero_stage == 1) k.shard = zeros({k.padded / world}, first.dtype(), first.device());
  }
}

DataParallel::~DataParallel() { disarm(); }

namespace {
// The backward observer (autograd/hooks.h) that tells DataParallel each parameter whose gradient
// is final, so that full buckets start their all-reduce while backward goes on.
class BucketTrigger final : public autograd::BackwardObserver {
 public:
  explicit BucketTrigger(std::function<void(const AutogradMeta&)> ready) : ready_(std::move(ready)) {}
  void leaf_grad_ready(const AutogradMeta& leaf) override { ready_(leaf); }
  bool wants_leaf_grad_ready() const override { return true; }

 private:
  std::function<void(const AutogradMeta&)> ready_;
};
}  // namespace

void DataParallel::disarm() {
  if (trigger_) autograd::remove_backward_observer(trigger_.get());
  trigger_.reset();
  armed_ = false;
}

int64_t DataParallel::global_count(int64_t local) { return group_.all_reduce(local); }

double DataParallel::global_sum(double local) { return group_.all_reduce(local, ReduceOp::Sum); }

void DataParallel::before_last_backward() {
  REEL_CHECK(!armed_, "DataParallel: before_last_backward twice without after_last_backward");
  for (Bucket& k : buckets_) k.ready = 0;
  next_ = 0;
  armed_ = true;
  if (options_.overlap) {
    trigger_ = std::make_shared<BucketTrigger>([this](const AutogradMeta& leaf) { grad_ready(leaf); });
    autograd::add_backward_observer(trigger_);
  }
}

void DataParallel::grad_ready(const AutogradMeta& leaf) {
  if (!armed_) return;
  const auto it = index_of_.find(&leaf);
  if (it == index_of_.end()) return;  // an input that requires grad, not one of ours
  ++buckets_[bucket_of_[it->second]].ready;
  while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].params.size()) launch(next_++, true);
  group_.progress();  // Open MPI advances the buckets in flight only inside MPI calls
  // Under a Profiler, a bucket's in-flight span ends when a backward rule's end first finds it done.
  if (profile::enabled())
    for (size_t b = 0; b < next_; ++b)
      if (buckets_[b].in_flight.open() && buckets_[b].work.test()) buckets_[b].in_flight.end();
}

void DataParallel::launch(size_t b, bool during_backward) {
  // A span in the profiler's trace where the bucket starts (inside backward when overlapped).
  std::optional<profile::Scope> span;
  if (profile::enabled()) span.emplace("dist: start bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()));
  Bucket& k = buckets_[b];
  for (size_t j = 0; j < k.params.size(); ++j) {
    const Tensor& p = params_[k.params[j]];
    const Tensor dst = untracked::slice(k.flat, 0, k.offset[j], k.offset[j] + p.numel());
    const Tensor g = p.grad();
    if (g.defined()) dst.copy_(flat_view(g));
    else dst.fill_(0.0);  // no gradient on this rank (the parameter was not used): it adds nothing
  }
  k.work = options_.zero_stage == 1 ? group_.reduce_scatter_async(k.shard, k.flat) : group_.all_reduce_async(k.flat);
  if (profile::enabled())  // the collective in flight, as a span of its own in the trace
    k.in_flight = profile::AsyncSpan::begin(std::string(options_.zero_stage == 1 ? "reduce_scatter" : "all_reduce") +
                                            " bucket " + std::to_string(b) + " (" + std::to_string(k.numel) +
                                            " elements)");
  ++grad_syncs_;
  if (during_backward) ++overlapped_syncs_;
}

void DataParallel::after_last_backward() {
  REEL_CHECK(armed_, "DataParallel: after_last_backward without before_last_backward");
  disarm();
  const auto start = std::chrono::steady_clock::now();
  while (next_ < buckets_.size()) launch(next_++, false);
  {
    // The communication backward did not hide, as a span of the trace.
    std::optional<profile::Scope> span;
    if (profile::enabled()) span.emplace("dist: wait for the gradient buckets");
    for (Bucket& k : buckets_) {
      k.work.wait();
      k.in_flight.end();
    }
  }
  exposed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (Bucket& k : buckets_)
    for (size_t j = 0; j < k.params.size(); ++j) {
      const Tensor& p = params_[k.params[j]];
      if (!p.grad().defined()) {  // every rank steps every parameter, used here or not
        MemoryCategory category(Category::Gradient);
        p.set_grad(zeros(p.shape(), p.dtype(), p.device()));
      }
      // Replicated: the summed gradients back into .grad. ZeRO-1 keeps them in the shards.
      if (options_.zero_stage == 0)
        p.grad().copy_(untracked::reshape(untracked::slice(k.flat, 0, k.offset[j], k.offset[j] + p.numel()), p.shape()));
    }
  for (Bucket& k : buckets_) k.work = Work();
}

double DataParallel::grad_norm() {
  std::vector<Tensor> grads;
  if (options_.zero_stage == 1) {
    for (const Bucket& k : buckets_) grads.push_back(k.shard);
    return sharded_norm(grads, group_);
  }
  for (const Tensor& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads.empty() ? 0.0 : kernels::global_grad_norm(grads);  // the same on every rank
}

void DataParallel::scale_grads(double factor) {
  std::vector<Tensor> grads;
  if (options_.zero_stage == 1) {
    for (const Bucket& k : buckets_) grads.push_back(k.shard);
  } else {
    for (const Tensor& p : params_)
      if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (!grads.empty()) kernels::scale_(grads, factor);
}

std::vector<Tensor> DataParallel::step_grads() {
  std::vector<Tensor> shards;
  if (options_.zero_stage == 1)
    for (const Bucket& k : buckets_) shards.push_back(k.shard);
  return shards;
}

// ---- ZeRO-1 ----------------------------------------------------------------------------------

ZeroAdamW::ZeroAdamW(DataParallel& dp, double lr, optim::Adam::Options options)
    : Optimizer(dp.params(), lr), dp_(dp), options_(options) {
  check_lr("ZeroAdamW", lr);
  REEL_CHECK(dp.options().zero_stage == 1, "ZeroAdamW: the DataParallel must be made with zero_stage = 1");
  MemoryCategory category(Category::OptimizerState);  // 1/world of plain AdamW's, plus padding
  for (const DataParallel::Bucket& k : dp.bucket_list()) {
    exp_avg_.push_back(zeros_like(k.shard));
    exp_avg_sq_.push_back(zeros_like(k.shard));
  }
}

void ZeroAdamW::update(const std::vector<size_t>&) {
  // Every rank steps every bucket (DataParallel gave each parameter a gradient), so the all-gathers
  // match.
  ProcessGroup& group = dp_.group();
  const std::vector<DataParallel::Bucket>& buckets = dp_.bucket_list();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const DataParallel::Bucket& k = buckets[b];
    const int64_t chunk = k.shard.numel(), begin = group.rank() * chunk;
    const Tensor flat = zeros({k.padded}, k.shard.dtype(), k.shard.device());  // (padded): the parameters
    for (size_t j = 0; j < k.params.size(); ++j) {
      const Tensor& p = params_[k.params[j]];
      untracked::slice(flat, 0, k.offset[j], k.offset[j] + p.numel()).copy_(flat_view(p));
    }
    const Tensor mine = untracked::slice(flat, 0, begin, begin + chunk).clone();  // (chunk)
    kernels::adamw_update({mine}, {k.shard}, {exp_avg_[b]}, {exp_avg_sq_[b]}, lr_, options_.beta1, options_.beta2,
                          options_.eps, options_.weight_decay, steps_, true);
    group.all_gather(flat, mine);
    for (size_t j = 0; j < k.params.size(); ++j) {
      const Tensor& p = params_[k.params[j]];
      flat_view(p).copy_(untracked::slice(flat, 0, k.offset[j], k.offset[j] + p.numel()));
    }
  }
}

optim::StateDict ZeroAdamW::full_state_dict() {
  ProcessGroup& group = dp_.group();
  optim::StateDict out;
  out["step"] = from_vector<int64_t>({steps_}, {});
  const std::vector<DataParallel::Bucket>& buckets = dp_.bucket_list();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const DataParallel::Bucket& k = buckets[b];
    for (const auto& [slot, chunks] : {std::make_pair("exp_avg", &exp_avg_), std::make_pair("exp_avg_sq", &exp_avg_sq_)}) {
      const Tensor full = empty({k.padded}, k.shard.dtype(), k.shard.device());  // (padded): every rank's chunk
      group.all_gather(full, (*chunks)[b]);
      for (size_t j = 0; j < k.params.size(); ++j) {
        const Tensor& p = params_[k.params[j]];
        out[std::string(slot) + "." + std::to_string(k.params[j])] =
            untracked::reshape(untracked::slice(full, 0, k.offset[j], k.offset[j] + p.numel()), p.shape()).clone();
      }
    }
  }
  return out;
}

optim::StateDict ZeroAdamW::shard_checkpoint() const {
  optim::StateDict out;
  out["step"] = from_vector<int64_t>({steps_}, {});
  for (size_t b = 0; b < exp_avg_.size(); ++b) {
    out["exp_avg." + std::to_string(b)] = exp_avg_[b];
    out["exp_avg_sq." + std::to_string(b)] = exp_avg_sq_[b];
  }
  return out;
}

void ZeroAdamW::load_shard_checkpoint(const std::vector<optim::StateDict>& parts) {
  REEL_CHECK(!parts.empty() && parts[0].count("step"), "ZeroAdamW load_shard_checkpoint: no parts, or no 'step'");
  optim::StateDict full;
  full["step"] = parts[0].at("step");
  const std::vector<DataParallel::Bucket>& buckets = dp_.bucket_list();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const DataParallel::Bucket& k = buckets[b];
    for (const char* slot : {"exp_avg", "exp_avg_sq"}) {
      const std::string key = std::string(slot) + "." + std::to_string(b);
      std::vector<Tensor> chunks;
      int64_t total = 0;
      for (size_t r = 0; r < parts.size(); ++r) {
        const auto it = parts[r].find(key);
        if (it == parts[r].end()) break;
        chunks.push_back(it->second);
        total += it->second.numel();
      }
      if (chunks.empty()) continue;  // no moments yet (saved before the first step)
      REEL_CHECK(chunks.size() == parts.size(), "ZeroAdamW load_shard_checkpoint: '", key, "' is in ", chunks.size(),
                 " of the ", parts.size(), " parts");
      const Tensor whole = empty({total}, chunks[0].dtype());
      int64_t at = 0;
      for (const Tensor& c : chunks) {
        untracked::slice(whole, 0, at, at + c.numel()).copy_(c.reshape({c.numel()}));
        at += c.numel();
      }
      for (size_t j = 0; j < k.params.size(); ++j) {
        const Tensor& p = params_[k.params[j]];
        REEL_CHECK(k.offset[j] + p.numel() <= total, "ZeroAdamW load_shard_checkpoint: '", key, "' holds ", total,
                   " elements, bucket ", b, " of this run needs ", k.offset[j] + p.numel(), ": another model");
        full[std::string(slot) + "." + std::to_string(k.params[j])] =
            untracked::reshape(untracked::slice(whole, 0, k.offset[j], k.offset[j] + p.numel()), p.shape());
      }
    }
  }
  load_full_state_dict(full);
}

void ZeroAdamW::load_full_state_dict(const optim::StateDict& state) {
  REEL_CHECK(state.count("step") && state.at("step").numel() == 1, "ZeroAdamW load_full_state_dict: missing key 'step'");
  // Every key is the step or a moment of a parameter, in its shape.
  size_t moments = 0;
  for (const auto& [key, t] : state) {
    if (key == "step") continue;
    const size_t dot = key.rfind('.');
    const std::string slot = dot == std::string::npos ? key : key.substr(0, dot);
    size_t i = params_.size();
    if (dot != std::string::npos && (slot == "exp_avg" || slot == "exp_avg_sq")) {
      try {
        i = std::stoul(key.substr(dot + 1));
      } catch (const std::exception&) {
      }
    }
    REEL_CHECK(i < params_.size() && key == slot + "." + std::to_string(i),
               "ZeroAdamW load_full_state_dict: unexpected key '", key, "'");
    REEL_CHECK(t.shape() == params_[i].shape(), "ZeroAdamW load_full_state_dict: '", key, "' has shape ", t.shape(),
               " but parameter ", i, " has shape ", params_[i].shape());
    ++moments;
  }
  // AdamW before its first step has no moments: they are zero.
  REEL_CHECK(moments == 0 || moments == 2 * params_.size(), "ZeroAdamW load_full_state_dict: ", moments,
             " moment tensors for ", params_.size(), " parameters (need both moments of every parameter, or none)");
  const int rank = dp_.group().rank();
  const std::vector<DataParallel::Bucket>& buckets = dp_.bucket_list();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const DataParallel::Bucket& k = buckets[b];
    const int64_t chunk = k.shard.numel(), begin = rank * chunk;
    for (const auto& [slot, chunks] : {std::make_pair("exp_avg", &exp_avg_), std::make_pair("exp_avg_sq", &exp_avg_sq_)}) {
      const Tensor full = zeros({k.padded}, k.shard.dtype(), k.shard.device());  // the padding stays zero
      if (moments != 0)
        for (size_t j = 0; j < k.params.size(); ++j) {
          const Tensor& p = params_[k.params[j]];
          const Tensor& t = state.at(std::string(slot) + "." + std::to_string(k.params[j]));
          untracked::slice(full, 0, k.offset[j], k.offset[j] + p.numel())
              .copy_(flat_view(t.to(p.device()).to(p.dtype()).contiguous()));
        }
      (*chunks)[b].copy_(untracked::slice(full, 0, begin, begin + chunk));
    }
  }
  steps_ = static_cast<int64_t>(state.at("step").item());
}

// ---- dataset sharding ------------------------------------------------------------------------

std::vector<int64_t> shard_indices(int64_t size, int rank, int world, uint64_t seed, int64_t epoch, bool shuffle) {
  REEL_CHECK(size >= 0 && world > 0 && rank >= 0 && rank < world, "shard_indices: size ", size, ", rank ", rank,
             ", world ", world, " (need size >= 0 and 0 <= rank < world)");
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {  // Fisher-Yates with a fixed engine: the same permutation on every rank and platform
    std::mt19937_64 engine(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1)));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[engine() % i]);
  }
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank); i < order.size(); i += static_cast<size_t>(world)) mine.push_back(order[i]);
  return mine;
}

}  // namespace reel::distributed
