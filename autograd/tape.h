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
// allocator (reel::memory_stats()); leaf gradients as Category::Gradient.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/op.h"

namespace reel::autograd {

class Tape {
 public:
  static Tape& current();  // this thread's tape

  // Backward from a scalar loss: seeds d(loss) = scale.
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

  // Used by record(), Node::save and Checkpoint.
  void push(std::shared_ptr<Node> node);
  // `storage` was re-tagged as an activation because the tape keeps it; clear() tags it back
  // (temporary) if someone else still holds it then.
  void remember_activation(const std::shared_ptr<Storage>& storage) { activations_.push_back(storage); }
  // Module::to moved the leaf that owns `leaf` in place: its data now lives on `device`. A node
  // recorded with the leaf on another device would get its gradient there, so backward through it
  // raises instead (the move must come before the forward). Only this thread's tape is told.
  void leaf_moved(const std::shared_ptr<AutogradMeta>& leaf, Device device);
  const std::shared_ptr<Segment>& open_segment() const { return open_segment_; }
  void open(std::shared_ptr<Segment> segment);
  // What close() does when `segment` is closed out of order: raise now (Checkpoint::close), leave
  // the error for the next backward (a destructor, which cannot throw), or drop it (a destructor
  // while an exception unwinds).
  enum class OnMisuse { Raise, RaiseAtBackward, Ignore };
  // Ends `segment`, and (closed out of order) the segments still open inside it, at the same node.
  // A segment that already ended (by clear(), or with a scope around it) is left alone.
  void close(const std::shared_ptr<Segment>& segment, OnMisuse on_misuse);

 private:
  void run_backward(const Node& root, int output_index, const Tensor& seed);
  void replay(Segment& segment, size_t last);  // autograd/checkpoint.cpp
  const Device* moved_to(const AutogradMeta* leaf) const;  // where leaf_moved() last put it, or null

  std::vector<std::shared_ptr<Node>> nodes_;
  std::vector<std::weak_ptr<Storage>> activations_;  // re-tagged by this tape
  std::shared_ptr<Segment> open_segment_;  // innermost open Checkpoint scope
  std::string deferred_error_;  // an out-of-order close found by a destructor; the next backward raises it
  std::vector<std::pair<std::weak_ptr<AutogradMeta>, Device>> moved_leaves_;  // since the last clear()
  int segments_opened_ = 0;
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
// Fills each tensor's .grad with zeros (the buffers stay allocated for the next window).
void zero_grad(const std::vector<Tensor>& params);
inline std::string tape_dump() { return Tape::current().dump(); }

// Tags a tensor the tape keeps (a node's save, a segment's held boundary) as an activation in the
// memory statistics, unless it is a parameter's or gradient's memory (used by Node::save and
// checkpoint segments; Tape::clear tags it back).
void mark_activation(const Tensor& t);

// Registers autograd's differentiable views with core (autograd/register.cpp), so that x.view(...)
// of a tensor that requires grad is recorded. Programs linking reel::reel get this call before
// main (reel.cpp); a program linking the layer libraries alone makes it itself.
void register_with_core();

}  // namespace reel::autograd
