// Backward observers: code that watches (or acts during) a backward without living in the walk.
// The tape calls each observer of its thread, in the order added. One backward, in order:
//   begin_backward                the walk is about to start: the loss's checks passed, nothing is
//                                 accumulated yet; the tape still holds the forward, so the queries
//                                 of autograd/inspect.h describe what the walk will run
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
//                                 the buffer here (a lever that keeps gradients in a buffer of its
//                                 own: distributed/fsdp.h's flat views exist from the first write on)
//   saved_released                a rule let go of one of its saves before its end
//                                 (BackwardCtx::release_saved) and the tape dropped the slot: what
//                                 the save kept alive may go before the rule's next allocation
//                                 (a sharded weight's gathered values, before Linear's dW exists);
//                                 the slots a rule still holds at its end go right after its
//                                 after_node, unannounced
//   end_backward                  the walk is over and the tape cleared (every save freed), or it
//                                 threw: then the exception is on its way to the caller, and the
//                                 observer must not throw
// Every backward that passes its checks gets one begin_backward and one end_backward, a loss that
// is a leaf itself too (no node runs between them); a backward refused by its checks (a wrong
// gradient shape, a tape already cleared, a tensor written in place) gets neither.
// Anomaly mode (autograd/anomaly.h) and the profiler's op and phase scopes are built in; data
// parallel's bucket trigger (distributed/data_parallel.h), FSDP's gathers and releases
// (distributed/fsdp.h) and Offload's prefetch (autograd/offload.h) are added by the lever that turns
// them on, while it is on.
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

struct BackwardEvent {
  // The tape position of the loss's op: the walk runs positions root, root - 1, ..., 0 (those the
  // loss reaches). -1 when the loss is a leaf (its gradient is added to its .grad, nothing runs).
  int64_t root = -1;
  // A leaf the walk reaches already holds a gradient (a .grad that is defined and not zero_grad's
  // deferred zeros): this backward adds to it, e.g. the second micro-batch of an accumulation window.
  bool accumulates = false;
};

struct ReplayEvent {
  int segment;         // the segment's id (the tape dump's)
  size_t begin, last;  // the tape positions re-run: [begin, last]
};

class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void begin_backward(const BackwardEvent&) {}
  virtual void end_backward(const BackwardEvent&, bool /*threw*/) {}
  virtual void before_node(const NodeEvent&) {}
  virtual void after_node(const NodeEvent&, const Tensors* /*produced, null when it threw*/) {}
  virtual void before_replay(const ReplayEvent&) {}
  virtual void after_replay(const ReplayEvent&, bool /*threw*/) {}
  virtual void leaf_grad_ready(const AutogradMeta&) {}
  virtual void before_leaf_grad(const AutogradMeta&) {}
  // `value`: what the slot kept (the saved tensor, or the Tensor a pack hook made of it). A slot
  // whose pack hook made something else of it (Offload's host copy, not yet unpacked) goes unannounced.
  virtual void saved_released(const NodeEvent&, const Tensor& /*value*/) {}
  // leaf_grad_ready costs the walk a pass over the tape to find each leaf's last user: only an
  // observer that says so here pays for it.
  virtual bool wants_leaf_grad_ready() const { return false; }
};

// This thread's observers: the built-in ones (anomaly mode, the profiler's scopes) first, then the
// ones added, in order. One added or removed during a backward (a lever's state freed with a save
// the walk let go) misses, or still gets, the events of what was already under way: the after_node,
// after_replay and end_backward go to the observers that were told the matching before.
const std::vector<std::shared_ptr<BackwardObserver>>& backward_observers();
void add_backward_observer(std::shared_ptr<BackwardObserver> observer);
// No-op if absent, and once the thread's list is gone (a lever's state freed during thread exit).
void remove_backward_observer(const BackwardObserver* observer);

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
  std::vector<std::shared_ptr<BackwardObserver>> told_;  // told before_node, not yet after_node
};

// The same around one backward: begin_backward now; finish() calls end_backward(threw = false);
// leaving without finish calls it with threw = true (in reverse order, as after_node).
class ObservedBackward {
 public:
  explicit ObservedBackward(const BackwardEvent& event);
  ~ObservedBackward();
  void finish();
  ObservedBackward(const ObservedBackward&) = delete;
  ObservedBackward& operator=(const ObservedBackward&) = delete;

 private:
  BackwardEvent event_;
  std::vector<std::shared_ptr<BackwardObserver>> told_;  // told begin_backward, not yet end_backward
};

// The same around one segment's replay.
class ObservedReplay {
 public:
  explicit ObservedReplay(const ReplayEvent& event);
  ~ObservedReplay();
  void finish();

 private:
  ReplayEvent event_;
  std::vector<std::shared_ptr<BackwardObserver>> told_;  // told before_replay, not yet after_replay
};

bool any_observer_wants_leaf_grad_ready();
void notify_before_leaf_grad(const AutogradMeta& leaf);
void notify_saved_released(const NodeEvent& event, const Tensor& value);
void notify_leaf_grad_ready(const AutogradMeta& leaf);

}  // namespace reel::autograd
