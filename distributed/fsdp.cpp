// Sharded data parallel, ZeRO-2 and ZeRO-3 (see fsdp.h), its setup: the units and their flat
// storages and shards, the module hooks and the backward observer registered, the parameters rebound
// to the flat buffers. The other concerns: fsdp_gather.cpp (gathers, releases, prefetch, forward
// hooks), fsdp_backward.cpp (the backward observer and what it reads of the tape),
// fsdp_reduce.cpp (gradient buffers, reduce-scatters, the window), fsdp_checkpoint.cpp.
#include "distributed/fsdp.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "autograd/hooks.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/autograd_meta.h"
#include "distributed/fsdp_internal.h"

namespace reel::distributed {

using fsdp_detail::piece;

const char* FullyShardedDataParallel::phase_name(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Replay: return "replay";
    case Phase::Backward: return "backward";
    case Phase::Prefetch: return "prefetch";
    case Phase::AfterStep: return "after step";
    case Phase::Checkpoint: return "checkpoint";
  }
  return "?";
}



FullyShardedDataParallel::FullyShardedDataParallel(nn::Module& model, const std::vector<nn::Module*>& units,
                                                   Options options, ProcessGroup& group)
    : model_(model), options_(std::move(options)), group_(group) {
  REEL_CHECK(options_.stage == 2 || options_.stage == 3, "FullyShardedDataParallel: stage ", options_.stage,
             " is not supported (2: gradients and optimizer state sharded, 3: parameters too; ZeRO-1 is "
             "distributed::DataParallel with distributed::ZeroAdamW)");
  params_ = model.named_parameters();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    REEL_CHECK(p.requires_grad() && p.is_leaf() && p.is_contiguous(), "FullyShardedDataParallel: parameter '", name,
               "' must be a contiguous leaf that requires grad");
    param_of_.emplace(p.autograd_meta().get(), i);
  }
  // Units: the named modules in order, then the root (the model) with what is left.
  std::unordered_map<const nn::Module*, std::string> names;
  for (const auto& [name, m] : model.named_modules()) names.emplace(m, name);
  unit_of_.assign(params_.size(), SIZE_MAX);
  std::vector<nn::Module*> modules = units;
  if (std::find(modules.begin(), modules.end(), &model) == modules.end()) modules.push_back(&model);
  for (nn::Module* m : modules) {
    REEL_CHECK(m && names.count(m), "FullyShardedDataParallel: unit ", units_.size(), " (",
               m ? m->name() : std::string("null"), ") is not a module of the model");
    for (const Unit& k : units_)
      REEL_CHECK(k.module != m, "FullyShardedDataParallel: the module '", names[m], "' is listed twice");
    Unit k;
    k.module = m;
    k.name = names[m];
    for (const Tensor& p : m->parameters()) {
      const size_t i = param_of_.at(p.autograd_meta().get());
      if (unit_of_[i] != SIZE_MAX) continue;  // an earlier unit has it
      unit_of_[i] = units_.size();
      k.params.push_back(i);
    }
    if (k.params.empty()) {
      REEL_CHECK(m == &model, "FullyShardedDataParallel: the unit '", k.name,
                 "' has no parameter of its own (every one belongs to an earlier unit)");
      continue;  // no root unit: every parameter is in a named one
    }
    units_.push_back(std::move(k));
  }
  REEL_CHECK(!units_.empty(), "FullyShardedDataParallel: the model has no parameters");
  // The root when it has parameters (its forward ends last), else the last listed.
  last_unit_ = units_.size() - 1;
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].module == &model) last_unit_ = u;
  for (size_t u = units_.size(); u-- > 0;)
    if (units_[u].module != &model) reduce_order_.push_back(u);
  if (units_[last_unit_].module == &model) reduce_order_.push_back(last_unit_);
  reduced_.assign(units_.size(), false);
  for (nn::Module* m : options_.keep) {
    bool found = false;
    for (Unit& k : units_)
      if (k.module == m) found = k.kept = true;
    REEL_CHECK(found, "FullyShardedDataParallel: Options::keep names a module that is not a unit");
  }

  // Mixed precision: a 16-bit gather dtype over f32 parameters.
  const std::optional<DType> low = options_.param_dtype;
  REEL_CHECK(!low || *low == DType::bf16 || *low == DType::f16 || *low == params_.front().second.dtype(),
             "FullyShardedDataParallel: param_dtype ", low ? dtype_name(*low) : "", " is neither bf16 nor f16 (nor the "
             "parameters' own dtype)");
  // Each unit's layout, checked before anything changes.
  for (Unit& k : units_) {
    const Tensor& first = params_[k.params.front()].second;
    int64_t numel = 0;
    for (size_t i : k.params) {
      const auto& [name, p] = params_[i];
      REEL_CHECK(p.dtype() == first.dtype() && p.device() == first.device(), "FullyShardedDataParallel: unit '", k.name,
                 "' mixes ", first.dtype(), " on ", first.device(), " with '", name, "' (", p.dtype(), " on ",
                 p.device(), "); one flat buffer per unit needs one dtype and device");
      REEL_CHECK(!low || *low == p.dtype() || p.dtype() == DType::f32, "FullyShardedDataParallel: param_dtype ",
                 *low, " gathers f32 parameters (the f32 shards are the masters); '", name, "' is ", p.dtype());
      k.offset.push_back(numel);
      numel += p.numel();
    }
    k.layout = flat_shard(numel, group_.rank(), group_.size());
  }
  // The flat buffers: rank 0's values everywhere, the shards (the masters, in the parameters' dtype),
  // the flat in the gather dtype and the parameters rebound to views of it.
  autograd::NoGrad no_grad;
  for (Unit& k : units_) {
    const Tensor& first = params_[k.params.front()].second;
    Tensor whole;  // (padded) in the parameters' dtype
    {
      MemoryCategory category(Category::Parameter);
      whole = zeros({k.layout.padded}, first.dtype(), first.device());  // the padding stays zero
    }
    for (size_t j = 0; j < k.params.size(); ++j)
      piece(whole, k.offset[j], params_[k.params[j]].second).copy_(params_[k.params[j]].second);
    group_.broadcast(whole, 0);
    {
      MemoryCategory category(Category::Parameter);
      k.shard = untracked::slice(whole, 0, k.layout.begin, k.layout.begin + k.layout.chunk).clone();
      k.flat = low ? whole.to(*low) : whole;  // rounded once, the same on every rank
    }
    whole = Tensor();
    bind(k);
    k.shard.set_requires_grad();
    MemoryCategory category(Category::Gradient);
    k.shard.set_grad(zeros_like(k.shard));
  }
  for (size_t u = 0; u < units_.size(); ++u)
    if (options_.stage == 3 && !units_[u].kept) release(u);

  // The model's pre-hook first (a new forward ends the previous backward), then the units' hooks.
  hooks_.push_back(model.register_forward_pre_hook([this](nn::Module&, const Tensor&) {
    end_backward();
    drop_prefetch();
    forward_order_.clear();
  }));
  if (options_.stage == 3)
    for (size_t u = 0; u < units_.size(); ++u) {
      hooks_.push_back(
          units_[u].module->register_forward_pre_hook([this, u](nn::Module&, const Tensor&) { pre_forward(u); }));
      hooks_.push_back(units_[u].module->register_forward_hook(
          [this, u](nn::Module&, const Tensor&, const Tensor&) { post_forward(u); }));
    }
  observe();  // fsdp_backward.cpp
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  autograd::remove_backward_observer(observer_.get());
  for (nn::HookHandle& h : hooks_) h.remove();
  // A prefetch in flight completes anyway (the group keeps its buffers alive until it is done). No
  // collective here (a destructor may run on one rank alone, while an exception unwinds): released
  // units stay released (see fsdp.h).
}

std::vector<Tensor> FullyShardedDataParallel::shard_parameters() const {
  std::vector<Tensor> out;
  for (const Unit& k : units_) out.push_back(k.shard);
  return out;
}

void FullyShardedDataParallel::bind(const Unit& k) {
  for (size_t j = 0; j < k.params.size(); ++j) {
    // Swap the data under the same TensorImpl (as Module::to): every handle follows. Under
    // param_dtype the dtype changes too; a .grad the parameter has stays (an f32 .grad of a 16-bit
    // parameter is allowed: autograd/tape.cpp).
    TensorImpl& impl = *params_[k.params[j]].second.impl_ptr();
    impl.storage = k.flat.storage();
    impl.offset = k.flat.offset() + k.offset[j];
    impl.dtype = k.flat.dtype();
  }
}

Tensor FullyShardedDataParallel::gather_input(const Unit& k) const {
  if (k.flat.dtype() == k.shard.dtype()) return k.shard;
  // param_dtype: the master shard rounded to 16 bits straight into this rank's slot of the
  // (materialised) flat, which is then gathered in place: no 16-bit copy of the chunk besides it.
  // restore_: the version is the all-gather's to bump (Write), and a re-gather writes the same bits.
  const Tensor slot = untracked::slice(k.flat, 0, k.layout.begin, k.layout.begin + k.layout.chunk);
  slot.restore_(k.shard);
  return slot;
}

int64_t FullyShardedDataParallel::all_gathers() const {
  int64_t n = 0;
  for (int64_t g : gathers_) n += g;
  return n;
}

}  // namespace reel::distributed
