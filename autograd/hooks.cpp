// Backward observers: each thread's list, the RAII helpers the walk calls them through, and the
// built-in observer that opens the profiler's op and phase scopes (autograd/hooks.h).
#include "autograd/hooks.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "autograd/anomaly.h"
#include "core/profile.h"

namespace reel::autograd {

namespace {

using Observers = std::vector<std::shared_ptr<BackwardObserver>>;

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

// Set once the thread's list is destroyed at thread exit: a lever's state that dies later (with the
// thread's tape) removes its observer from nothing then.
thread_local bool t_list_gone = false;

struct List {
  std::vector<std::shared_ptr<BackwardObserver>> observers{anomaly_observer(), std::make_shared<ProfileScopes>()};
  ~List() { t_list_gone = true; }
};

std::vector<std::shared_ptr<BackwardObserver>>& observers() {
  thread_local List list;
  return list.observers;
}

}  // namespace

const std::vector<std::shared_ptr<BackwardObserver>>& backward_observers() { return observers(); }

void add_backward_observer(std::shared_ptr<BackwardObserver> observer) {
  REEL_CHECK(observer, "add_backward_observer: the observer is null");
  observers().push_back(std::move(observer));
}

void remove_backward_observer(const BackwardObserver* observer) {
  if (t_list_gone) return;
  auto& list = observers();
  list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& o) { return o.get() == observer; }),
             list.end());
}

ObserveBackward::ObserveBackward(std::shared_ptr<BackwardObserver> observer) : observer_(observer.get()) {
  add_backward_observer(std::move(observer));
}
ObserveBackward::~ObserveBackward() { remove_backward_observer(observer_); }

// before_* in order, after_* in reverse order, so observers that open scopes close them nested. The
// after_* go to the observers the before_* went to (a snapshot), even if one was removed meanwhile:
// Offload's observer goes when its last state does, which may be a save a replay just unpacked.
ObservedNode::ObservedNode(const NodeEvent& event) : event_(event), told_(observers()) {
  for (const auto& o : told_) o->before_node(event_);
}

void ObservedNode::finish(const Tensors& produced) {
  for (; !told_.empty(); told_.pop_back()) told_.back()->after_node(event_, &produced);
}

ObservedNode::~ObservedNode() {
  for (; !told_.empty(); told_.pop_back()) told_.back()->after_node(event_, nullptr);
}

ObservedBackward::ObservedBackward(const BackwardEvent& event) : event_(event), told_(observers()) {
  for (const auto& o : told_) o->begin_backward(event_);
}

void ObservedBackward::finish() {
  for (; !told_.empty(); told_.pop_back()) told_.back()->end_backward(event_, false);
}

ObservedBackward::~ObservedBackward() {
  for (; !told_.empty(); told_.pop_back()) told_.back()->end_backward(event_, true);
}

ObservedReplay::ObservedReplay(const ReplayEvent& event) : event_(event), told_(observers()) {
  for (const auto& o : told_) o->before_replay(event_);
}

void ObservedReplay::finish() {
  for (; !told_.empty(); told_.pop_back()) told_.back()->after_replay(event_, false);
}

ObservedReplay::~ObservedReplay() {
  for (; !told_.empty(); told_.pop_back()) told_.back()->after_replay(event_, true);
}

bool any_observer_wants_leaf_grad_ready() {
  for (const auto& o : observers())
    if (o->wants_leaf_grad_ready()) return true;
  return false;
}

// Over a snapshot: an event may free the last state of a lever, which removes its observer.
void notify_leaf_grad_ready(const AutogradMeta& leaf) {
  for (const auto& o : Observers(observers())) o->leaf_grad_ready(leaf);
}

void notify_before_leaf_grad(const AutogradMeta& leaf) {
  for (const auto& o : Observers(observers())) o->before_leaf_grad(leaf);
}

void notify_saved_released(const NodeEvent& event, const Tensor& value) {
  for (const auto& o : Observers(observers())) o->saved_released(event, value);
}

}  // namespace reel::autograd
