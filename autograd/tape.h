// The tape: the list of nodes recorded in forward, walked in reverse by backward, with
// gradient accumulation and checkpoint segments built in.
//
//   Tensor loss = ...;                       // ops record nodes on Tape::current()
//   autograd::backward(loss, 1.0 / tokens);  // param.grad() += d(loss * scale)/d(param); tape cleared
//
//   { autograd::Checkpoint seg; y = block(x); }  // block's nodes keep no saved tensors; backward
//                                                // replays them from the boundary inputs
//
// One tape per thread. Memory: what nodes save is counted as Category::Activation by the
// allocator (reel::memory_stats(device)); leaf gradients as Category::Gradient. What the tape keeps is
// one slot type (autograd/saved_tensor.h), which SavedTensorHooks may move elsewhere; backward
// observers (autograd/hooks.h) watch the walk.
//
// Lifetime rule: a node stays on the tape while a live tensor depends on it, and no longer. A
// node is needed while one of its outputs is alive: held by a live Tensor, or consumed by a node
// still on the tape (a consumer holds its inputs' autograd state, so a loss keeps its whole graph,
// checkpoint segments included). When the last tensor of a node's outputs goes (a forward whose
// loss is dropped, e.g. a validation pass run in grad mode; the temporaries of a forward that
// threw), the node is released at once on the thread that recorded it: what it saved or held is
// freed, and the links to its inputs are dropped, which may release their producers in turn.
// A released node at the end of the tape is removed; one in the middle stays as an empty
// placeholder (its position is what segments and the walk index by) until the nodes after it go,
// or the next backward or clear(). So `{ Tensor l = model(x); }` leaves the tape as it found it,
// activations included. (A tensor dropped on another thread releases nothing there; the owning
// thread's next recorded op removes what is dead at the end of its tape.)
//
// In-place writes: every storage has a version counter that in-place writes bump (core/storage.h).
// Each saved slot records the version of what it keeps (an op's save, a segment's held input);
// backward (before any gradient is accumulated, and again as a rule or a replay unpacks the slot)
// raises a reel::Error naming the op, the tensor's shape and both versions when one changed: the
// gradient would silently use the new values (e.g. x.fill_() or an optimizer step between the
// forward and its backward). Writes through raw data<T>() pointers are not seen.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/node.h"
#include "autograd/op.h"

namespace reel::autograd {

class Tape {
 public:
  static Tape& current();  // this thread's tape
  Tape();
  ~Tape();
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // Backward from a scalar loss: seeds d(loss) = scale, as a number where the loss's op takes one
  // (Op::accepts_host_seed: cross_entropy's backward is then no launch for scale 1, one for
  // another scale), else as a filled tensor.
  void backward(const Tensor& loss, double scale = 1.0);
  // Backward from any loss with an explicit gradient (loss's shape, dtype and device).
  void backward(const Tensor& loss, const Tensor& grad);
  // Drops every node and what they hold, ends the segments of Checkpoint scopes still open (their
  // close is then a no-op; ops they record later are not checkpointed) and drops an error a
  // Checkpoint destructor left for the next backward: the tape starts from nothing.
  void clear();

  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }
  const Node& node(size_t i) const { return *nodes_[i]; }
  int64_t saved_bytes() const;  // bytes of the distinct storages saved tensors and boundaries hold
  std::string dump() const;     // one line per node: op, shapes, saved bytes, segment

  // Used by record() and Checkpoint. Removes the dead nodes at the end of the tape
  // first (see the lifetime rule above).
  void push(std::shared_ptr<Node> node);
  // An output of `producer` lost its last tensor (AutogradMeta's destructor, registered with core
  // by register_with_core): releases the nodes no live tensor depends on any more. Never throws.
  static void output_released(const std::weak_ptr<Node>& producer);
  // `storage` was re-tagged as an activation because the tape keeps it; clear() tags it back
  // (temporary) if someone else still holds it then.
  void remember_activation(const std::shared_ptr<Storage>& storage) { activations_.push_back(storage); }
  // A forward failed before its node was pushed (record()): on an empty tape, what it saved is
  // tagged back as temporary at once.
  void forward_failed() {
    if (nodes_.empty()) forget_activations();
  }
  // Module::to moved the leaf that owns `leaf` in place: its data now lives on `device`. A node
  // recorded with the leaf on another device would get its gradient there, so backward through it
  // raises instead (the move must come before the forward). Only this thread's tape is told.
  void leaf_moved(const std::shared_ptr<AutogradMeta>& leaf, Device device);
  const std::shared_ptr<Segment>& open_segment() const { return open_segment_; }
  // Sets the segment of a node about to be recorded: the innermost open one or, inside a selective
  // scope, its current piece (begun here if need be); and whether the node is kept there.
  void place(Node& node);
  void open(std::shared_ptr<Segment> segment);
  // What close() does when `segment` is closed out of order: raise now (Checkpoint::close), leave
  // the error for the next backward (a destructor, which cannot throw), or drop it (a destructor
  // while an exception unwinds).
  enum class OnMisuse { Raise, RaiseAtBackward, Ignore };
  // Ends `segment`, and (closed out of order) the segments still open inside it, at the same node.
  // A segment that already ended (by clear(), or with a scope around it) is left alone.
  void close(const std::shared_ptr<Segment>& segment, OnMisuse on_misuse);

 private:
  void raise_deferred_error();  // the error a Checkpoint destructor left, once
  // backward's checks and walk: the seed a tensor `grad`, or the number `host_seed` (then `grad`
  // is undefined; see Op::accepts_host_seed).
  void walk(const Tensor& loss, const Tensor& grad, std::optional<double> host_seed);
  void run_backward(const Node& root, int output_index, const Tensor& seed, std::optional<double> host_seed);
  void run_rule(Node& node);                   // one node's backward rule, its gradients summed
  void replay(Segment& segment, size_t last);  // autograd/checkpoint.cpp
  const Device* moved_to(const AutogradMeta* leaf) const;  // where leaf_moved() last put it, or null
  // The lifetime rule: releases the nodes queued in dead_, then pops dead nodes off the end.
  void collect();
  void release_dead(Node& node);  // drops what a node no live tensor depends on holds
  void forget_activations();      // re-tags what the tape let go of as temporary

  std::vector<std::shared_ptr<Node>> nodes_;
  std::vector<std::weak_ptr<Storage>> activations_;  // re-tagged by this tape
  std::shared_ptr<Segment> open_segment_;  // innermost open Checkpoint scope
  std::string deferred_error_;  // an out-of-order close found by a destructor; the next backward raises it
  std::vector<std::pair<std::weak_ptr<AutogradMeta>, Device>> moved_leaves_;  // since the last clear()
  int segments_opened_ = 0;
  std::vector<std::shared_ptr<Node>> dead_;  // nodes that may have lost their last live output
  bool collecting_ = false;  // collect() is running: releases it causes queue, not recurse
  bool walking_ = false;     // backward or clear() own nodes_: releases wait
};

// ---- grad mode -----------------------------------------------------------------

bool grad_enabled();  // this thread

// RAII: no op records while it lives (inference, optimizer updates, gradient checks).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// ---- free functions ---------------------------------------------------------------

inline void backward(const Tensor& loss, double scale = 1.0) { Tape::current().backward(loss, scale); }
inline void backward(const Tensor& loss, const Tensor& grad) { Tape::current().backward(loss, grad); }
// Makes each tensor's .grad count as zeros: the buffers stay allocated for the next window, and the
// fill is deferred (AutogradMeta::grad_is_zero): the next backward writes them instead of adding,
// and Tensor::grad() fills them first if anything reads them before that.
void zero_grad(const std::vector<Tensor>& params);
inline std::string tape_dump() { return Tape::current().dump(); }

// Registers autograd's differentiable views with core (autograd/register.cpp), so that x.view(...)
// of a tensor that requires grad is recorded. Programs linking reel::reel get this call before
// main (reel.cpp); a program linking the layer libraries alone makes it itself.
void register_with_core();

}  // namespace reel::autograd
