// The tape's record of one op run: the op, its inputs' and outputs' metadata, what it keeps for
// backward, and where it sits (tape position, checkpoint segment). Only the tape
// (autograd/tape.cpp, autograd/checkpoint.cpp) and the contexts (autograd/op.cpp) touch it; an op
// sees ForwardCtx and BackwardCtx (autograd/op.h). A Node keeps no input data, only its saves (and,
// inside a checkpoint segment, the segment's boundary inputs); a cast node of a parameter keeps the
// parameter in its op (autograd/ops/cast.h), memory that lives anyway.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/op.h"
#include "autograd/saved_tensor.h"
#include "core/autograd_meta.h"

namespace reel::autograd {

struct Segment;  // autograd/checkpoint.h

struct Node {
  struct Input {
    std::shared_ptr<AutogradMeta> meta;  // null when this input does not require grad
    Shape shape;
    DType dtype = DType::f32;
    Device device;
    SavedTensor held;  // the data itself: only at the boundary of a checkpoint segment awaiting replay
    // The node that made this input, if it is a non-leaf still on the tape.
    Node* producer() const { return meta && !meta->is_leaf ? meta->producer.lock().get() : nullptr; }
  };
  struct Output {
    Shape shape;
    DType dtype = DType::f32;
    Device device;
    Tensor grad;  // summed over consumers during backward, freed once this node has run
    // The loss's seed as a host number instead of `grad`: set on the root's output alone, by
    // backward(loss, scale) when the op accepts_host_seed (autograd/op.h); nothing else adds to it
    // (every consumer of the loss comes after the root, and the walk starts there).
    std::optional<double> host_grad;
    bool views_leaf = false;  // a view of a parameter's storage (AutogradMeta::views_leaf), for replays
    // The output tensor's autograd state, weakly: expired once no live tensor is this output and
    // no node on the tape consumes it (a consumer's Input::meta holds it), i.e. no live tensor
    // depends on it. The tape releases a node whose outputs all expired (autograd/tape.h).
    std::weak_ptr<AutogradMeta> meta;
  };

  std::unique_ptr<Op> op;
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  std::vector<SavedTensor> saved;  // what op->backward reads; empty while in a collapsed segment
  bool keep_saved = true;          // false while the node's checkpoint segment is collapsed
  // Selective checkpointing (autograd/checkpoint.h): an op whose output the segment keeps instead
  // of recomputing. Its replay runs nothing; its saves that are its own inputs are dropped after
  // forward (the slot remembers which input) and refilled from the replay's recomputed inputs; its
  // other saves (e.g. attention's log-sum-exp) stay.
  bool kept = false;
  std::shared_ptr<Segment> segment;  // innermost checkpoint segment, null if none
  size_t index = 0;                  // position on the tape
  // No live tensor depends on this node any more: the tape dropped what it held (saves, held
  // inputs, the links to its inputs) and keeps only the op's name until the node can be popped.
  bool released = false;

  bool any_input_needs_grad() const;
  int64_t saved_bytes() const;  // bytes of the distinct storages the saved slots keep alive
};

}  // namespace reel::autograd
