// Backward observers: each thread's list, the RAII helpers the walk calls them through, and the
// built-in observer that opens the profiler's op and phase scopes (autograd/hooks.h).
#include "autograd/hooks.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "autograd/anomaly.h"
#include "autograd/offload.h"
#include "core/profile.h"

namespace reel::autograd {

namespace {

// The profiler's scopes (core/profile.h) around each rule, replayed forward and replay: what the
// kernel table, the trace and the memory timeline attribute their records to. Scopes nest, so
// they live on a stack (a deque: emplaced in place, never moved).
class ProfileScopes final : public BackwardObserver {
 public:
  void before_node(const NodeEvent& e) override { ops_.emplace_back(e.op, e.index, e.pass == Pass::Backward); }
  void after_node(const NodeEvent&, const Tensors*) override { ops_.pop_back(); }
  void before_replay(const ReplayEvent& e) override { phases_.emplace_back(profile::Phase::Replay, e.segment); }
  void after_replay(const ReplayEvent&, bool) override { phases_.pop_back(); }

 private:
  std::deque<profile::OpScope> ops_;
  std::deque<profile::PhaseScope> phases_;
};

std::vector<std::shared_ptr<BackwardObserver>>& observers() {
  thread_local std::vector<std::shared_ptr<BackwardObserver>> list{
      anomaly_observer(), std::make_shared<ProfileScopes>(), offload_observer()};
  return list;
}

}  // namespace

const std::vector<std::shared_ptr<BackwardObserver>>& backward_observers() { return observers(); }

void add_backward_observer(std::shared_ptr<BackwardObserver> observer) {
  REEL_CHECK(observer, "add_backward_observer: the observer is null");
  observers().push_back(std::move(observer));
}

void remove_backward_observer(const BackwardObserver* observer) {
  auto& list = observers();
  list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& o) { return o.get() == observer; }),
             list.end());
}

ObserveBackward::ObserveBackward(std::shared_ptr<BackwardObserver> observer) : observer_(observer.get()) {
  add_backward_observer(std::move(observer));
}
ObserveBackward::~ObserveBackward() { remove_backward_observer(observer_); }

// before_* in order, after_* in reverse order, so observers that open scopes close them nested.
ObservedNode::ObservedNode(const NodeEvent& event) : event_(event) {
  for (const auto& o : observers()) o->before_node(event_);
}

void ObservedNode::finish(const Tensors& produced) {
  const auto& list = observers();
  for (; told_ < list.size(); ++told_) list[list.size() - 1 - told_]->after_node(event_, &produced);
}

ObservedNode::~ObservedNode() {
  const auto& list = observers();
  for (; told_ < list.size(); ++told_) list[list.size() - 1 - told_]->after_node(event_, nullptr);
}

ObservedReplay::ObservedReplay(const ReplayEvent& event) : event_(event) {
  for (const auto& o : observers()) o->before_replay(event_);
}

void ObservedReplay::finish() {
  const auto& list = observers();
  for (; told_ < list.size(); ++told_) list[list.size() - 1 - told_]->after_replay(event_, false);
}

ObservedReplay::~ObservedReplay() {
  const auto& list = observers();
  for (; told_ < list.size(); ++told_) list[list.size() - 1 - told_]->after_replay(event_, true);
}

bool any_observer_wants_leaf_grad_ready() {
  for (const auto& o : observers())
    if (o->wants_leaf_grad_ready()) return true;
  return false;
}

void notify_leaf_grad_ready(const AutogradMeta& leaf) {
  for (const auto& o : observers()) o->leaf_grad_ready(leaf);
}

void notify_before_leaf_grad(const AutogradMeta& leaf) {
  for (const auto& o : observers()) o->before_leaf_grad(leaf);
}

void notify_saved_released(const NodeEvent& event, const Tensor& value) {
  for (const auto& o : observers()) o->saved_released(event, value);
}

}  // namespace reel::autograd
