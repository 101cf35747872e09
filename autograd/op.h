// What a differentiable op is, and what the tape records when one runs.
//
// An op is a small struct (see autograd/ops/): its members are its attributes, forward()
// computes outputs from inputs with kernels:: calls and saves what backward needs, backward()
// turns output gradients into input gradients. Because forward depends on nothing but its inputs
// and the struct, the tape can re-run it from the Node alone: that is how a checkpointed segment
// is replayed. A Node keeps no input data, only what the op saved (and, inside a checkpoint
// segment, the segment's boundary inputs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd_meta.h"
#include "core/tensor.h"

namespace reel {

namespace autograd {

struct Segment;  // autograd/tape.h
using Tensors = std::vector<Tensor>;

class Op {
 public:
  virtual ~Op() = default;
  virtual const char* name() const = 0;
  // Outputs from inputs (fresh tensors, never an input itself; they may be views sharing an
  // input's storage). Runs in forward and again when a checkpoint segment is replayed, so it may
  // depend only on `in` and the op's members; it runs under NoGrad, so nothing it calls records.
  // It calls node.save(...) with what backward needs, and only that (node.needs_input_grad tells
  // which input gradients will be asked for); the tape drops the saves where it must not keep
  // them.
  virtual Tensors forward(const Tensors& in, Node& node) const = 0;
  // Input gradients from output gradients (each defined, shaped like its output). An entry may be
  // left undefined where !node.needs_input_grad(i). Broadcast inputs get gradients of their own
  // shape (see sum_to).
  virtual Tensors backward(const Tensors& grad_out, const Node& node) const = 0;
  // Attributes for the tape dump, e.g. "p=0.1 seed=5 offset=3".
  virtual std::string attributes() const { return ""; }
};

struct Node {
  struct Input {
    std::shared_ptr<AutogradMeta> meta;  // null when this input does not require grad
    Shape shape;
    DType dtype = DType::f32;
    Device device;
    Tensor held;  // the data itself: only at the boundary of a checkpoint segment awaiting replay
    uint64_t held_version = 0;  // held's storage version when held: the replay refuses a later write
    // The node that made this input, if it is a non-leaf still on the tape.
    Node* producer() const { return meta && !meta->is_leaf ? meta->producer.lock().get() : nullptr; }
  };
  struct Output {
    Shape shape;
    DType dtype = DType::f32;
    Device device;
    Tensor grad;  // summed over consumers during backward, freed once this node has run
    bool views_leaf = false;  // a view of a parameter's storage (AutogradMeta::views_leaf), for replays
    // The output tensor's autograd state, weakly: expired once no live tensor is this output and
    // no node on the tape consumes it (a consumer's Input::meta holds it), i.e. no live tensor
    // depends on it. The tape releases a node whose outputs all expired (autograd/tape.h).
    std::weak_ptr<AutogradMeta> meta;
  };

  std::unique_ptr<Op> op;
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  Tensors saved;                     // what op->backward needs; empty while in a collapsed segment
  std::vector<uint64_t> saved_versions;  // each saved tensor's storage version when saved
  bool keep_saved = true;            // false while the node's checkpoint segment is collapsed
  // Selective checkpointing (autograd/checkpoint.h): an op whose output the segment keeps instead
  // of recomputing. Its replay runs nothing; the saves that are its own inputs are dropped after
  // forward (saved_input names the input, the slot stays empty) and refilled from the replay's
  // recomputed inputs; its other saves (e.g. attention's log-sum-exp) stay.
  bool kept = false;
  std::vector<int> saved_input;      // per saved slot of a kept node: the input it is, or -1
  const Tensors* forward_inputs = nullptr;  // while a kept node's forward runs: its inputs
  std::shared_ptr<Segment> segment;  // innermost checkpoint segment, null if none
  size_t index = 0;                  // position on the tape
  // No live tensor depends on this node any more: the tape dropped what it held (saves, held
  // inputs, the links to its inputs) and keeps only the op's name until the node can be popped.
  bool released = false;
  // Set by the tape only while this node's backward runs: per input, the persistent .grad buffer
  // of a leaf (contiguous, of the input's shape, dtype and device) that the op may add its
  // gradient into itself, or undefined. See grad_sink.
  Tensors grad_sinks;
  std::vector<bool> grad_sinks_zero;  // per input: its sink counts as zeros (zero_grad deferred the fill)

  // ---- for op authors ----
  bool needs_input_grad(size_t i) const { return inputs[i].meta != nullptr; }
  bool any_input_needs_grad() const;
  // Keeps `tensors` for backward (undefined entries are placeholders and cost nothing). Slots are
  // numbered in the order saved; re-tags their memory as activations. A saved view keeps its
  // whole storage alive, and is counted so. Records each storage's version: backward raises if an
  // in-place write changed one before the rule reads it.
  void save(const Tensors& tensors);
  const Tensor& saved_tensor(size_t slot) const;
  const Shape& input_shape(size_t i) const { return inputs[i].shape; }
  int64_t saved_bytes() const;  // bytes of the distinct storages the saved tensors keep alive
  // Where input i's gradient may be added directly, or undefined: a parameter's .grad buffer that
  // already exists (from an earlier backward, kept by zero_grad). A backward rule that adds its
  // gradient into it (kernels::matmul_into_: no temporary, no second pass over .grad) returns the
  // sink itself as input i's gradient; the tape then adds nothing more. Undefined outside backward.
  // When grad_sink_is_zero(i), the buffer's values are stale and count as zeros (zero_grad left
  // them): the rule must write the whole gradient into it (a GEMM with beta = 0), not add.
  const Tensor& grad_sink(size_t i) const;
  bool grad_sink_is_zero(size_t i) const;
};

// Runs `op` on `inputs`: records a Node on the current tape when grad mode is on and an input
// requires grad, else just computes. Returns the outputs.
Tensors record(std::unique_ptr<Op> op, const Tensors& inputs);

template <typename OpT>
Tensor apply(OpT op, const Tensors& inputs) {
  return record(std::make_unique<OpT>(std::move(op)), inputs)[0];
}

// The gradient of a broadcast input: `grad` (the broadcast shape) summed down to `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace autograd
}  // namespace reel
