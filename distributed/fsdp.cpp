// Sharded data parallel, ZeRO-2 and ZeRO-3 (see fsdp.h): units and their flat storages, the module
// hooks and the backward observer that gather and release them, the reduce-scatters, the window's
// synchronisation and the gathered checkpoints.
#include "distributed/fsdp.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "autograd/hooks.h"
#include "autograd/node.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/autograd_meta.h"
#include "core/profile.h"
#include "kernels/elementwise.h"
#include "kernels/optimizer.h"
#include "nn/safetensors.h"

namespace reel::distributed {

namespace {
Tensor piece(const Tensor& flat, int64_t offset, const Tensor& like) {  // like's shape, at offset in flat
  return untracked::reshape(untracked::slice(flat, 0, offset, offset + like.numel()), like.shape());
}
// A span in the profiler's trace around what the host does for one collective, when profiling (the
// name is made only then).
template <typename Name>
void open_span(std::optional<profile::Scope>& span, Name&& name) {
  if (profile::enabled()) span.emplace("fsdp: " + name());
}
// The collective itself, from its start to the moment it is seen done: a span on the trace's lanes
// of work in flight (the communication track, profile::AsyncSpan), beside DataParallel's buckets.
template <typename Name>
profile::AsyncSpan comm_span(Name&& name) {
  return profile::enabled() ? profile::AsyncSpan::begin("fsdp: " + name()) : profile::AsyncSpan();
}
}  // namespace

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

// The tape's events, handed to FSDP (the thread that constructed it).
class FullyShardedDataParallel::Observer final : public autograd::BackwardObserver {
 public:
  explicit Observer(FullyShardedDataParallel& f) : f_(f) {}
  void before_node(const autograd::NodeEvent& e) override {
    f_.before_node(e.index, e.pass == autograd::Pass::Replay ? Phase::Replay : Phase::Backward);
  }
  void after_node(const autograd::NodeEvent& e, const autograd::Tensors*) override {
    if (e.pass == autograd::Pass::Replay) f_.after_replay_node(e.index);
    else f_.after_rule(e.index);
  }
  void before_replay(const autograd::ReplayEvent& e) override { f_.before_replay(e.begin, e.last); }
  void leaf_grad_ready(const AutogradMeta& leaf) override { f_.leaf_ready(leaf); }
  void before_leaf_grad(const AutogradMeta& leaf) override { f_.before_leaf_grad(leaf); }
  void saved_released(const autograd::NodeEvent& e, const Tensor& value) override {
    f_.saved_released(e.index, value);
  }
  bool wants_leaf_grad_ready() const override { return true; }

 private:
  FullyShardedDataParallel& f_;
};

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
  observer_ = std::make_shared<Observer>(*this);
  autograd::add_backward_observer(observer_);
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

// ---- gather, release, prefetch ------------------------------------------------------------

void FullyShardedDataParallel::gather(size_t u, Phase phase) {
  Unit& k = units_[u];
  if (k.gathered) return;
  if (in_flight_ && in_flight_->unit == u) {  // prefetched: already written into the storage
    std::optional<profile::Scope> s;
    open_span(s, [&] { return "wait for the prefetch of unit '" + k.name + "'"; });
    in_flight_->work.wait();
    in_flight_->span.end();
    in_flight_.reset();
  } else {
    std::optional<profile::Scope> s;
    open_span(s, [&] { return "all_gather unit '" + k.name + "' (" + phase_name(phase) + ")"; });
    k.flat.storage()->materialize();
    profile::AsyncSpan comm = comm_span([&] { return "all_gather unit '" + k.name + "' (" + phase_name(phase) + ")"; });
    // Straight into the unit's storage. In backward (a replay, a rule) the values are the ones
    // forward read and the tape saved: a Restore, no version bump, so the saved-tensor checks still
    // pass. In forward, after a step and in gather_all they are new values: an Update, bumped.
    const bool fresh = phase == Phase::Forward || phase == Phase::AfterStep || phase == Phase::Checkpoint;
    group_.all_gather(k.flat, gather_input(k), fresh ? Write::Update : Write::Restore);
    comm.end();
    ++gathers_[static_cast<int>(phase)];
  }
  k.gathered = true;
}

void FullyShardedDataParallel::release(size_t u) {
  units_[u].flat.storage()->release();
  units_[u].gathered = false;
}

void FullyShardedDataParallel::prefetch_before(size_t u, int64_t index) {
  const auto it = std::find(forward_order_.begin(), forward_order_.end(), u);
  if (it == forward_order_.end() || it == forward_order_.begin()) return;
  const size_t v = *(it - 1);
  if (!read_below(v, index)) return;  // no rule left reads its values: nothing to fetch
  // A replay to come reads it first: that replay gathers it when its turn comes (fetched now, it
  // would be held through the whole replay).
  const autograd::Tape& tape = autograd::Tape::current();
  const size_t end = std::min(static_cast<size_t>(std::max<int64_t>(index, 0)), reads_.size());
  for (size_t j = 0; j < end; ++j)
    if (!tape.node(j).keep_saved && std::find(reads_[j].begin(), reads_[j].end(), v) != reads_[j].end()) return;
  prefetch(v);
}

void FullyShardedDataParallel::prefetch_after(size_t u) {
  const auto it = std::find(replay_order_.begin(), replay_order_.end(), u);
  if (it != replay_order_.end() && it + 1 != replay_order_.end()) prefetch(*(it + 1));
}

void FullyShardedDataParallel::prefetch(size_t v) {
  if (!options_.prefetch || options_.stage != 3 || in_flight_) return;
  Unit& k = units_[v];
  // Not a unit whose gradients this backward has finished: nothing reads it again (the forward order
  // need not be the tape's: `wte(ids) + wpe(pos)` may record wpe first).
  if (k.gathered || (in_backward_ && v < done_.size() && done_[v])) return;
  std::optional<profile::Scope> s;
  open_span(s, [&] { return "start the prefetch of unit '" + k.name + "'"; });
  in_flight_ = std::make_unique<InFlight>();
  in_flight_->unit = v;
  // Straight into the unit's storage (its bytes count as Parameter from here: one more gathered unit
  // in flight). Prefetches are issued in backward only, where the values are the ones forward read:
  // a Restore.
  k.flat.storage()->materialize();
  in_flight_->span = comm_span([&] { return "all_gather unit '" + k.name + "' (prefetch)"; });
  in_flight_->work = group_.all_gather_async(k.flat, gather_input(k), Write::Restore);
  ++gathers_[static_cast<int>(Phase::Prefetch)];
}

void FullyShardedDataParallel::drop_prefetch() {
  if (!in_flight_) return;
  in_flight_->work.wait();  // every rank issued it: it completes; its values may be stale by now
  in_flight_->span.end();
  const size_t u = in_flight_->unit;
  in_flight_.reset();
  if (!units_[u].gathered) release(u);  // its storage was filled for nothing: released again
}

// ---- forward ----------------------------------------------------------------------------

void FullyShardedDataParallel::pre_forward(size_t u) {
  autograd::NoGrad no_grad;  // the gather records nothing, inside a checkpoint segment too
  gather(u, Phase::Forward);
  if (std::find(forward_order_.begin(), forward_order_.end(), u) == forward_order_.end()) forward_order_.push_back(u);
}

void FullyShardedDataParallel::post_forward(size_t u) {
  if (u != last_unit_ && !units_[u].kept) release(u);
}

// ---- backward ---------------------------------------------------------------------------

void FullyShardedDataParallel::start_backward(size_t root) {
  // What the walk will do (autograd/tape.cpp): nodes 0..root, each leaf reported ready once, after
  // its lowest user. A node reads a unit when an input is one of its parameters or a view of one
  // (w.t(): the view's producer reads it); its rule reads the unit's values when a save holds them.
  const autograd::Tape& tape = autograd::Tape::current();
  const size_t n = std::min(root + 1, tape.size());
  reads_.assign(n, {});
  value_reads_.assign(n, {});
  expected_.assign(units_.size(), 0);
  ready_.assign(units_.size(), 0);
  done_.assign(units_.size(), false);
  std::set<const AutogradMeta*> seen;
  for (size_t i = 0; i < n; ++i) {
    const autograd::Node& node = tape.node(i);
    for (size_t j = 0; j < node.inputs.size(); ++j) {
      add_input_units(node, j, reads_[i]);
      const AutogradMeta* meta = node.inputs[j].meta.get();
      if (meta && meta->is_leaf && param_of_.count(meta) && seen.insert(meta).second)
        ++expected_[unit_of_[param_of_.at(meta)]];
    }
    value_reads_[i] = units_saved_by(node);
  }
  next_reduce_ = 0;
  if (options_.reduce == ReduceMode::PerMicroBatch) reduced_.assign(units_.size(), false);
  in_backward_ = true;
  // A unit still gathered from forward (the last one) whose values no rule reads goes now.
  for (size_t u = 0; u < units_.size(); ++u)
    if (options_.stage == 3 && units_[u].gathered && !units_[u].kept && !read_below(u, static_cast<int64_t>(n)))
      release(u);
}

void FullyShardedDataParallel::add_input_units(const autograd::Node& node, size_t j, std::vector<size_t>& units) const {
  const autograd::Node::Input& in = node.inputs[j];
  const auto add = [&](size_t u) {
    if (std::find(units.begin(), units.end(), u) == units.end()) units.push_back(u);
  };
  if (!in.meta) return;
  if (in.meta->is_leaf) {
    const auto it = param_of_.find(in.meta.get());
    if (it != param_of_.end()) add(unit_of_[it->second]);
  } else if (in.meta->views_leaf) {
    const autograd::Node* p = in.producer();
    if (p && p->index < node.index && p->index < reads_.size())
      for (size_t u : reads_[p->index]) add(u);
  }
}

std::vector<size_t> FullyShardedDataParallel::units_saved_by(const autograd::Node& node) const {
  // Not yet re-made by its segment's replay: every unit it reads as an input may be saved.
  if (!node.keep_saved) return node.index < reads_.size() ? reads_[node.index] : std::vector<size_t>{};
  std::vector<size_t> units;
  for (const autograd::SavedTensor& slot : node.saved) {
    // A recast slot (autograd/ops/cast.h) keeps the parameter its 16-bit copy is cast from again.
    if (const Tensor* t = slot.kept_tensor() ? slot.kept_tensor() : slot.recast_source()) {
      const size_t u = unit_holding(*t);
      if (u != SIZE_MAX && std::find(units.begin(), units.end(), u) == units.end()) units.push_back(u);
    } else if (slot.input() >= 0) {  // dropped, to be refilled from that input (a selective piece)
      add_input_units(node, static_cast<size_t>(slot.input()), units);
    }
  }
  return units;
}

size_t FullyShardedDataParallel::unit_holding(const Tensor& t) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (t.storage() == units_[u].flat.storage()) return u;
  return SIZE_MAX;
}

bool FullyShardedDataParallel::read_below(size_t u, int64_t index) const {
  const int64_t end = std::min<int64_t>(index, static_cast<int64_t>(value_reads_.size()));
  for (int64_t i = 0; i < end; ++i)
    if (std::find(value_reads_[i].begin(), value_reads_[i].end(), u) != value_reads_[i].end()) return true;
  return false;
}

void FullyShardedDataParallel::release_unread(size_t u, int64_t index) {
  if (options_.stage == 3 && units_[u].gathered && !units_[u].kept && !read_below(u, index)) release(u);
}

void FullyShardedDataParallel::end_backward() {
  in_backward_ = false;
  reads_.clear();
  value_reads_.clear();
}

void FullyShardedDataParallel::before_node(int64_t index, Phase phase) {
  if (!in_backward_) start_backward(static_cast<size_t>(index));
  group_.progress();  // Open MPI advances a prefetch in flight only inside MPI calls
  if (options_.stage != 3 || static_cast<size_t>(index) >= reads_.size()) return;
  // A replayed forward reads its inputs' values; a rule only what its saves hold (the embedding's
  // rule reads no table, a matmul whose other input needs no gradient saves no weight).
  const size_t i = static_cast<size_t>(index);
  if (phase == Phase::Backward) rule_index_ = index;
  for (size_t u : phase == Phase::Replay ? reads_[i] : value_reads_[i]) {
    gather(u, phase);
    if (options_.prefetch_after_grads) continue;  // issued when u is done with (after_replay_node, leaf_ready)
    if (phase == Phase::Replay) prefetch_after(u);   // the replay runs forward: the next unit it reads, ahead
    else prefetch_before(u, index);
  }
}

void FullyShardedDataParallel::after_rule(int64_t index) {
  if (!in_backward_ || static_cast<size_t>(index) >= value_reads_.size()) return;
  // The units this rule read whose values no rule below it reads: released now, before their
  // gradients are final (those live in Unit::grad_flat, not in the gathered storage).
  const std::vector<size_t> read = std::move(value_reads_[static_cast<size_t>(index)]);
  value_reads_[static_cast<size_t>(index)].clear();
  for (size_t u : read) release_unread(u, index);
}

void FullyShardedDataParallel::saved_released(int64_t index, const Tensor& value) {
  if (!in_backward_ || static_cast<size_t>(index) >= value_reads_.size()) return;
  // Mid-rule (Linear after dX): the unit goes now if nothing the rule still holds, and no rule
  // below it, reads it, so its gathered values are gone before the rule's dW is written.
  const size_t i = static_cast<size_t>(index);
  value_reads_[i] = units_saved_by(autograd::Tape::current().node(i));
  if (const size_t u = unit_holding(value); u != SIZE_MAX) release_unread(u, index + 1);
}

void FullyShardedDataParallel::after_replay_node(int64_t index) {
  if (options_.stage != 3 || !in_backward_ || static_cast<size_t>(index) >= reads_.size()) return;
  const size_t i = static_cast<size_t>(index);
  value_reads_[i] = units_saved_by(autograd::Tape::current().node(i));  // its saves are re-made now
  // A unit the replay has read for the last time is released again (backward gathers it when a
  // rule reads it), so a segment's replay holds one unit at a time, not all of the segment's;
  // except the units of the segment's last op that reads any, when a rule still reads them: the
  // segment's backward starts there.
  for (size_t u : reads_[i]) {
    if (u >= replay_last_read_.size() || replay_last_read_[u] != index || units_[u].kept) continue;
    const bool keep = std::find(replay_keep_.begin(), replay_keep_.end(), u) != replay_keep_.end() &&
                      read_below(u, static_cast<int64_t>(replay_last_) + 1);
    if (!keep) release(u);
    if (options_.prefetch_after_grads) prefetch_after(u);  // u is gone: the next comes without meeting it
  }
}

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

void FullyShardedDataParallel::before_replay(size_t begin, size_t last) {
  if (!in_backward_) start_backward(last);
  if (options_.stage != 3) return;
  replay_last_ = last;
  // The units the segment's recorded ops read, in the order the replay reads them, each with its last
  // reader; the replay's nodes gather them (before_node) and release them (after_replay_node).
  replay_order_.clear();
  replay_keep_.clear();
  replay_last_read_.assign(units_.size(), -1);
  const size_t end = std::min(last + 1, reads_.size());
  for (size_t i = begin; i < end; ++i)
    for (size_t u : reads_[i]) {
      if (replay_last_read_[u] < 0) replay_order_.push_back(u);
      replay_last_read_[u] = static_cast<int64_t>(i);
    }
  for (size_t i = end; i-- > begin;)
    if (!reads_[i].empty()) {
      replay_keep_ = reads_[i];
      break;
    }
  if (!replay_order_.empty()) prefetch(replay_order_.front());
}

void FullyShardedDataParallel::before_leaf_grad(const AutogradMeta& leaf) {
  if (!in_backward_) return;
  const auto it = param_of_.find(&leaf);
  if (it != param_of_.end()) install_grads(unit_of_[it->second]);  // from its first gradient on
}

void FullyShardedDataParallel::leaf_ready(const AutogradMeta& leaf) {
  if (!in_backward_) return;
  const auto it = param_of_.find(&leaf);
  if (it == param_of_.end()) return;
  const size_t u = unit_of_[it->second];
  if (++ready_[u] < expected_[u]) return;
  done_[u] = true;
  if (options_.stage == 3 && units_[u].gathered && !units_[u].kept) release(u);  // a reader that never ran
  if (options_.reduce == ReduceMode::PerMicroBatch || armed_) reduce_ready();
  // Its whole gradients are gone now (PerMicroBatch): the next unit may come without meeting them.
  if (options_.prefetch_after_grads) prefetch_before(u, rule_index_);
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

// ---- checkpoints --------------------------------------------------------------------------

void FullyShardedDataParallel::gather_all() {
  autograd::NoGrad no_grad;
  drop_prefetch();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& k = units_[u];
    if (k.flat.dtype() != k.shard.dtype()) {
      // param_dtype: the parameters become whole in the masters' dtype, a storage of their own
      // (the 16-bit one goes), so evaluation and nn::save see what the optimizer stepped.
      {
        MemoryCategory category(Category::Parameter);
        k.flat = zeros({k.layout.padded}, k.shard.dtype(), k.shard.device());
      }
      bind(k);
      k.gathered = false;
    }
    gather(u, Phase::Checkpoint);
    k.kept = true;
  }
}

nn::TensorDict FullyShardedDataParallel::full_state_dict() {
  autograd::NoGrad no_grad;
  nn::TensorDict out;
  for (const Unit& k : units_) {
    const Tensor full = empty({k.layout.padded}, k.shard.dtype(), k.shard.device());  // (padded)
    group_.all_gather(full, k.shard);
    ++gathers_[static_cast<int>(Phase::Checkpoint)];
    for (size_t j = 0; j < k.params.size(); ++j) {
      const auto& [name, p] = params_[k.params[j]];
      out[name] = piece(full, k.offset[j], p).clone();
    }
  }
  for (const auto& [name, b] : model_.named_buffers()) out[name] = b.clone();
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const nn::TensorDict& state) {
  // Check everything first: nothing changes unless every key matches.
  std::map<std::string, Tensor> expected;
  for (const auto& [name, p] : params_) expected[name] = p;
  for (const auto& [name, b] : model_.named_buffers()) expected[name] = b;
  std::ostringstream problems;
  for (const auto& [name, t] : expected) {
    const auto it = state.find(name);
    if (it == state.end()) problems << " missing '" << name << "';";
    else if (it->second.shape() != t.shape())
      problems << " '" << name << "' has shape " << shape_str(it->second.shape()) << ", expected "
               << shape_str(t.shape()) << ";";
  }
  for (const auto& [name, t] : state)
    if (!expected.count(name)) problems << " unexpected '" << name << "';";
  REEL_CHECK(problems.str().empty(), "FullyShardedDataParallel load_full_state_dict:", problems.str());
  autograd::NoGrad no_grad;
  for (Unit& k : units_) {
    const Tensor full = zeros({k.layout.padded}, k.shard.dtype(), k.shard.device());  // (padded)
    for (size_t j = 0; j < k.params.size(); ++j) {
      const auto& [name, p] = params_[k.params[j]];
      piece(full, k.offset[j], p).copy_(state.at(name));
    }
    k.shard.copy_(untracked::slice(full, 0, k.layout.begin, k.layout.begin + k.layout.chunk));
    if (k.gathered) k.flat.copy_(full);
  }
  for (const auto& [name, b] : model_.named_buffers()) b.copy_(state.at(name));
}

void FullyShardedDataParallel::save(const std::string& path, const nn::Metadata& metadata) {
  const nn::TensorDict state = full_state_dict();
  if (group_.rank() == 0) nn::save_safetensors(path, state, metadata);
  group_.barrier();  // the file is complete before any rank goes on (and may read it)
}

void FullyShardedDataParallel::load(const std::string& path) { load_full_state_dict(nn::load_safetensors(path)); }

}  // namespace reel::distributed
