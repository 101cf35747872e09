// FullyShardedDataParallel (fsdp.h) in backward: the observer the tape calls (autograd/hooks.h), and
// what it learns of the tape through autograd's public queries (autograd/inspect.h): which units
// each recorded op reads as inputs and which its rule reads through its saves. From those it gathers
// a unit before the replayed ops and rules that read it, releases it after the last one, and hands
// finished units to the reduce-scatters (fsdp_reduce.cpp).
#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "autograd/hooks.h"
#include "autograd/inspect.h"
#include "core/autograd_meta.h"
#include "core/storage.h"
#include "distributed/fsdp.h"

namespace reel::distributed {

class FullyShardedDataParallel::Observer final : public autograd::BackwardObserver {
 public:
  explicit Observer(FullyShardedDataParallel& f) : f_(f) {}
  void begin_backward(const autograd::BackwardEvent& e) override {
    if (e.root >= 0) f_.start_backward(static_cast<size_t>(e.root));
  }
  void end_backward(const autograd::BackwardEvent&, bool) override { f_.end_backward(); }
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

void FullyShardedDataParallel::observe() {
  observer_ = std::make_shared<Observer>(*this);
  autograd::add_backward_observer(observer_);
}

void FullyShardedDataParallel::start_backward(size_t root) {
  // What the walk will do (autograd/hooks.h): positions root..0, each leaf reported ready once, after
  // its lowest user. An op reads a unit when an input is one of its parameters or a view of one
  // (w.t(): the view's producer reads it); its rule reads the unit's values when a save holds them.
  const size_t n = std::min(root + 1, autograd::recorded_ops());
  reads_.assign(n, {});
  value_reads_.assign(n, {});
  expected_.assign(units_.size(), 0);
  ready_.assign(units_.size(), 0);
  done_.assign(units_.size(), false);
  std::set<const AutogradMeta*> seen;
  for (size_t i = 0; i < n; ++i) {
    for (const autograd::RecordedInput& in : autograd::recorded_inputs(i)) {
      add_input_units(i, in, reads_[i]);
      if (in.meta && in.leaf && param_of_.count(in.meta) && seen.insert(in.meta).second)
        ++expected_[unit_of_[param_of_.at(in.meta)]];
    }
    value_reads_[i] = units_saved_by(i);
  }
  next_reduce_ = 0;
  if (options_.reduce == ReduceMode::PerMicroBatch) reduced_.assign(units_.size(), false);
  in_backward_ = true;
  // A unit still gathered from forward (the last one) whose values no rule reads goes now.
  for (size_t u = 0; u < units_.size(); ++u)
    if (options_.stage == 3 && units_[u].gathered && !units_[u].kept && !read_below(u, static_cast<int64_t>(n)))
      release(u);
}

void FullyShardedDataParallel::add_input_units(size_t i, const autograd::RecordedInput& in,
                                               std::vector<size_t>& units) const {
  const auto add = [&](size_t u) {
    if (std::find(units.begin(), units.end(), u) == units.end()) units.push_back(u);
  };
  if (!in.meta) return;
  if (in.leaf) {
    const auto it = param_of_.find(in.meta);
    if (it != param_of_.end()) add(unit_of_[it->second]);
  } else if (in.views_leaf && in.producer >= 0) {
    const size_t p = static_cast<size_t>(in.producer);
    if (p < i && p < reads_.size())
      for (size_t u : reads_[p]) add(u);
  }
}

std::vector<size_t> FullyShardedDataParallel::units_saved_by(size_t i) const {
  const autograd::RecordedSaves saves = autograd::recorded_saves(i);
  // Not yet re-made by its segment's replay: every unit it reads as an input may be saved.
  if (!saves.live) return i < reads_.size() ? reads_[i] : std::vector<size_t>{};
  std::vector<size_t> units;
  // A recast slot (autograd/ops/cast.h) is listed by the parameter its 16-bit copy is cast from again.
  for (const Storage* s : saves.storages) {
    const size_t u = unit_of_storage(s);
    if (u != SIZE_MAX && std::find(units.begin(), units.end(), u) == units.end()) units.push_back(u);
  }
  if (!saves.refilled_inputs.empty()) {  // dropped, to be refilled from those inputs (a selective piece)
    const std::vector<autograd::RecordedInput> inputs = autograd::recorded_inputs(i);
    for (int j : saves.refilled_inputs)
      if (static_cast<size_t>(j) < inputs.size()) add_input_units(i, inputs[static_cast<size_t>(j)], units);
  }
  return units;
}

size_t FullyShardedDataParallel::unit_of_storage(const Storage* storage) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (storage == units_[u].flat.storage().get()) return u;
  return SIZE_MAX;
}

size_t FullyShardedDataParallel::unit_holding(const Tensor& t) const {
  return t.defined() ? unit_of_storage(t.storage().get()) : SIZE_MAX;
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
  value_reads_[i] = units_saved_by(i);
  if (const size_t u = unit_holding(value); u != SIZE_MAX) release_unread(u, index + 1);
}

void FullyShardedDataParallel::after_replay_node(int64_t index) {
  if (options_.stage != 3 || !in_backward_ || static_cast<size_t>(index) >= reads_.size()) return;
  const size_t i = static_cast<size_t>(index);
  value_reads_[i] = units_saved_by(i);  // its saves are re-made now
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


void FullyShardedDataParallel::before_replay(size_t begin, size_t last) {
  if (options_.stage != 3 || !in_backward_) return;
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

}  // namespace reel::distributed
