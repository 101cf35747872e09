// FullyShardedDataParallel (fsdp.h): each unit's whole gradients in one flat buffer while backward
// makes them, their reduce-scatter into the shards' .grad in a fixed order, and the accumulation
// window's synchronisation (optim::WindowSync: counts, norms, scaling, the gather after the step).
#include <optional>
#include <utility>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/autograd_meta.h"
#include "distributed/fsdp.h"
#include "distributed/fsdp_internal.h"
#include "kernels/elementwise.h"
#include "kernels/optimizer.h"

namespace reel::distributed {

using fsdp_detail::piece;
using fsdp_detail::comm_span;
using fsdp_detail::open_span;

void FullyShardedDataParallel::install_grads(size_t u) {
  Unit& k = units_[u];
  if (k.grad_flat.defined()) return;
  autograd::NoGrad no_grad;
  {
    MemoryCategory category(Category::Gradient);
    k.grad_flat = zeros({k.layout.padded}, k.shard.dtype(), k.shard.device());  // the padding stays zero
  }
  for (size_t j = 0; j < k.params.size(); ++j) {
    const Tensor& p = params_[k.params[j]].second;
    AutogradMeta& meta = *p.autograd_meta();
    const Tensor view = piece(k.grad_flat, k.offset[j], p);
    const bool had = meta.grad.defined() && !meta.grad_is_zero;  // a gradient from before this unit's turn
    if (had) view.copy_(meta.grad);
    p.set_grad(view);
    meta.grad_is_zero = !had;  // the first gradient is written into the view, not added (exact bits)
  }
}


void FullyShardedDataParallel::reduce_ready() {
  // In the fixed order; a unit this backward does not use (expected 0) is passed over: it has nothing
  // new (after_last_backward reduces what it may still hold).
  while (next_reduce_ < reduce_order_.size()) {
    const size_t u = reduce_order_[next_reduce_];
    if (expected_[u] > 0 && !done_[u]) return;
    if (expected_[u] > 0 && !reduced_[u]) reduce(u);
    ++next_reduce_;
  }
}

void FullyShardedDataParallel::reduce(size_t u) {
  Unit& k = units_[u];
  std::optional<profile::Scope> s;
  open_span(s, [&] { return "reduce_scatter unit '" + k.name + "'"; });
  autograd::NoGrad no_grad;
  install_grads(u);  // (a unit no rule touched: zeros)
  const Tensor full = std::move(k.grad_flat);  // (padded): every parameter's gradient, in place
  for (size_t j = 0; j < k.params.size(); ++j) {
    const Tensor& p = params_[k.params[j]].second;
    if (p.autograd_meta()->grad_is_zero) piece(full, k.offset[j], p).fill_(0);  // zero_grad's deferred fill
    p.set_grad(Tensor());  // the full gradient goes: its sum lives in the shards now
  }
  // The shard's .grad receives the sum itself, no buffer of its own: what it holds already (earlier
  // micro-batches of the window) is added into this rank's chunk of `full` first, so the sum over
  // ranks of that chunk is the old value plus this micro-batch's gradients.
  AutogradMeta& meta = *k.shard.autograd_meta();
  if (!meta.grad_is_zero)
    kernels::binary_(kernels::BinaryOp::Add, full.narrow(0, k.layout.begin, k.layout.chunk), meta.grad);
  profile::AsyncSpan comm = comm_span([&] { return "reduce_scatter unit '" + k.name + "'"; });
  group_.reduce_scatter(meta.grad, full);
  comm.end();
  ++reduce_scatters_;
  meta.grad_is_zero = false;
  reduced_[u] = true;
}

// ---- the window ---------------------------------------------------------------------------

int64_t FullyShardedDataParallel::global_count(int64_t local) { return group_.all_reduce(local); }

void FullyShardedDataParallel::before_last_backward() {
  REEL_CHECK(!armed_, "FullyShardedDataParallel: before_last_backward twice without after_last_backward");
  armed_ = true;
}

void FullyShardedDataParallel::after_last_backward() {
  REEL_CHECK(armed_, "FullyShardedDataParallel: after_last_backward without before_last_backward");
  armed_ = false;
  end_backward();
  drop_prefetch();
  // What the backwards left: PerWindow, every unit not reduced yet (a rank without micro-batches: all
  // of them, zeros, as its peers reduce theirs); PerMicroBatch, a unit with full gradients left over.
  for (size_t u : reduce_order_) {
    bool pending = options_.reduce == ReduceMode::PerWindow && !reduced_[u];
    if (options_.reduce == ReduceMode::PerMicroBatch)
      for (size_t i : units_[u].params) pending = pending || params_[i].second.grad().defined();
    if (pending) reduce(u);
  }
  reduced_.assign(units_.size(), false);
}

double FullyShardedDataParallel::global_sum(double local) { return group_.all_reduce(local, ReduceOp::Sum); }

double FullyShardedDataParallel::grad_norm() {
  std::vector<Tensor> grads;
  for (const Unit& k : units_) grads.push_back(k.shard.grad());
  return sharded_norm(grads, group_);
}

void FullyShardedDataParallel::scale_grads(double factor) {
  std::vector<Tensor> grads;
  for (const Unit& k : units_) grads.push_back(k.shard.grad());
  kernels::scale_(grads, factor);
}

void FullyShardedDataParallel::after_step() {
  autograd::NoGrad no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].gathered) continue;  // stage 3: the next forward gathers the new values
    units_[u].gathered = false;         // stale: gather again into the same storage
    gather(u, Phase::AfterStep);
  }
}

}  // namespace reel::distributed
