// Backward observers: code that watches (or acts during) a backward without living in the walk.
// The tape calls each observer of its thread, in the order added:
//   before_node / after_node      around each node's backward rule (pass Backward), and around each
//                                 forward a checkpoint replay re-runs (pass Replay); after_node gets
//                                 what the node produced (input gradients, or the replayed outputs),
//                                 or null when the rule threw (then it must not throw itself)
//   before_replay / after_replay  around the replay of one collapsed checkpoint segment
//   leaf_grad_ready               a leaf's .grad is final for this backward: the walk is past the
//                                 last node that uses it (replays included); a leaf the loss does
//                                 not reach is reported too, with its .grad as it was
//   before_leaf_grad              a rule is about to write a leaf's gradient into its .grad, or the
//                                 tape to add the gradient a rule returned: once per rule and leaf,
//                                 before the .grad buffer is looked at, so an observer may install
//                                 it here (FSDP's flat gradient views exist from the first write on)
//   saved_released                a rule reads one of its saves no more (BackwardCtx::release_saved)
//                                 and the tape dropped it: what was kept alive for that read may go
//                                 before the rule's next allocation (FSDP's gathered unit, before
//                                 Linear's dW exists)
// Anomaly mode (autograd/anomaly.h), the profiler's op and phase scopes, data parallel's bucket
// trigger (distributed/data_parallel.h), Offload's prefetch (autograd/offload.h) and FSDP's re-gathers
// before a replay or a rule (distributed/fsdp.h) are observers.
//
//   struct Count : autograd::BackwardObserver {
//     int nodes = 0;
//     void before_node(const autograd::NodeEvent& e) override { nodes += e.pass == autograd::Pass::Backward; }
//   };
//   autograd::ObserveBackward observe(std::make_shared<Count>());   // this thread, while it lives
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/op.h"
#include "core/autograd_meta.h"

namespace reel::autograd {

enum class Pass { Backward, Replay };

struct NodeEvent {
  const char* op;     // the op's name
  int64_t index;      // its tape position
  Pass pass;
};

struct ReplayEvent {
  int segment;         // the segment's id (the tape dump's)
  size_t begin, last;  // the tape positions re-run: [begin, last]
};

class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void before_node(const NodeEvent&) {}
  virtual void after_node(const NodeEvent&, const Tensors* /*produced, null when it threw*/) {}
  virtual void before_replay(const ReplayEvent&) {}
  virtual void after_replay(const ReplayEvent&, bool /*threw*/) {}
  virtual void leaf_grad_ready(const AutogradMeta&) {}
  virtual void before_leaf_grad(const AutogradMeta&) {}
  // `value`: what the slot kept (the saved tensor, or the Tensor a pack hook made of it).
  virtual void saved_released(const NodeEvent&, const Tensor& /*value*/) {}
  // leaf_grad_ready costs the walk a pass over the tape to find each leaf's last user: only an
  // observer that says so here pays for it.
  virtual bool wants_leaf_grad_ready() const { return false; }
};

// This thread's observers: the built-in ones (anomaly mode, the profiler's scopes, offload's
// prefetch) first, then the ones added, in order.
const std::vector<std::shared_ptr<BackwardObserver>>& backward_observers();
void add_backward_observer(std::shared_ptr<BackwardObserver> observer);
void remove_backward_observer(const BackwardObserver* observer);  // no-op if absent

// RAII: `observer` watches this thread's backwards while the scope lives.
class ObserveBackward {
 public:
  explicit ObserveBackward(std::shared_ptr<BackwardObserver> observer);
  ~ObserveBackward();
  ObserveBackward(const ObserveBackward&) = delete;
  ObserveBackward& operator=(const ObserveBackward&) = delete;

 private:
  const BackwardObserver* observer_;
};

// ---- for the walk (autograd/tape.cpp, autograd/checkpoint.cpp) --------------------------

// RAII around one node run in backward: before_node now; finish(produced) calls after_node with it;
// leaving without finish (an exception) calls after_node with null on every observer not yet told.
class ObservedNode {
 public:
  explicit ObservedNode(const NodeEvent& event);
  ~ObservedNode();
  void finish(const Tensors& produced);
  ObservedNode(const ObservedNode&) = delete;
  ObservedNode& operator=(const ObservedNode&) = delete;

 private:
  NodeEvent event_;
  size_t told_ = 0;  // observers whose after_node has run
};

// The same around one segment's replay.
class ObservedReplay {
 public:
  explicit ObservedReplay(const ReplayEvent& event);
  ~ObservedReplay();
  void finish();

 private:
  ReplayEvent event_;
  size_t told_ = 0;
};

bool any_observer_wants_leaf_grad_ready();
void notify_before_leaf_grad(const AutogradMeta& leaf);
void notify_saved_released(const NodeEvent& event, const Tensor& value);
void notify_leaf_grad_ready(const AutogradMeta& leaf);

}  // namespace reel::autograd
