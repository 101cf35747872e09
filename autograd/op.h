// What a differentiable op is, and the narrow contexts it sees when the tape runs it.
//
// An op is a small struct (see autograd/ops/): its members are its attributes, forward()
// computes outputs from inputs with kernels:: calls and saves what backward needs through its
// ForwardCtx, backward() turns output gradients into input gradients, reading those saves through
// its BackwardCtx. Because forward depends on nothing but its inputs and the struct, the tape can
// re-run it from its record alone: that is how a checkpointed segment is replayed. An op never
// sees the tape's record (autograd/node.h): the contexts are all it may touch.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel {

namespace autograd {

struct Node;  // autograd/node.h: the tape's record of one op run
using Tensors = std::vector<Tensor>;

// What forward may ask of the tape: which input gradients will be wanted, and keeping tensors for
// backward.
class ForwardCtx {
 public:
  explicit ForwardCtx(Node& node) : node_(node) {}
  bool needs_input_grad(size_t i) const;
  bool any_input_needs_grad() const;
  // False where the tape drops this op's saves (inside a collapsed checkpoint segment, and when no
  // input needs a gradient): work whose only use is a save may be skipped (cross_entropy's fused
  // gradient).
  bool keeps_saves() const;
  // Keeps `tensors` for backward, in slots numbered in the order saved (undefined entries are
  // placeholders and cost nothing). Save only what the rule reads: the tape packs each slot when
  // the forward returns (autograd/saved_tensor.h), counts it as an activation, and checks at
  // backward that no in-place write changed it meanwhile. A saved view keeps its whole storage alive.
  void save(const Tensors& tensors);

 private:
  Node& node_;
};

// What backward may ask of the tape: the saves, the inputs' shapes, and where an input's gradient
// may be written straight into a parameter's existing .grad buffer.
class BackwardCtx {
 public:
  explicit BackwardCtx(Node& node);  // made by the tape
  size_t num_inputs() const;
  bool needs_input_grad(size_t i) const;
  const Shape& input_shape(size_t i) const;
  // Output k's gradient as a host number, when the tape passed it so (grad_out[k] is then
  // undefined): the seed `scale` of backward(loss, scale) where this node made the loss and its op
  // accepts_host_seed(k). Empty otherwise (the gradient is the tensor grad_out[k]). Not rounded:
  // kernels::binary(op, t, s) rounds it to t's dtype first, as the filled seed tensor was.
  std::optional<double> host_grad(size_t k) const;
  // Saved slot `slot`, unpacked (its hook's unpack runs once) and version-checked; reel::Error if
  // forward did not save it (or the rule released it).
  const Tensor& saved(size_t slot);
  // The rule reads slot `slot` no more: the tape drops it now instead of after the rule and tells
  // the observers (saved_released), so what it kept alive may go before the rule allocates more
  // (Linear releases W once dx is made: a sharded weight is freed before its dW exists). A
  // reference saved() returned for the slot is dangling afterwards.
  void release_saved(size_t slot);
  // Input i's gradient, either made by `fresh()` and returned (the tape adds it where it goes), or,
  // when the input is a parameter whose .grad buffer exists at this moment (looked up when asked,
  // after the observers' before_leaf_grad, which may install it), computed straight into that
  // buffer by `write(sink, accumulate)`: accumulate says add (a GEMM with beta = 1), else write the
  // whole gradient (beta = 0, the buffer counted as zeros). No temporary, no second pass over .grad.
  template <typename Write, typename Fresh>
  Tensor grad_write_or_add(size_t i, Write write, Fresh fresh) {
    bool accumulate = false;
    const Tensor sink = grad_sink(i, accumulate);
    if (!sink.defined()) return fresh();
    write(sink, accumulate);
    mark_sunk(i);
    return sink;
  }

  // Whether input i has a .grad buffer grad_write_or_add would write into now, asked WITHOUT telling
  // the observers (no before_leaf_grad: FSDP would install its flat gradient buffer then). Linear
  // groups dW's GEMM with dX's, before W is released, only into an existing buffer: a fresh dW would
  // exist while W does (a gathered weight and its gradient at once).
  bool has_grad_sink(size_t i) const;

  // For the tape: input i's gradient is already in its .grad buffer.
  bool sunk(size_t i) const { return i < sunk_.size() && sunk_[i]; }
  // For the tape, before it adds a returned gradient into leaf input i's .grad: the observers'
  // before_leaf_grad, once per rule and leaf.
  void before_leaf_grad(size_t i);

 private:
  Tensor grad_sink(size_t i, bool& accumulate);  // input i's .grad as a sink, or undefined
  void mark_sunk(size_t i);
  Node& node_;
  std::vector<bool> sunk_;
  std::vector<bool> announced_;  // before_leaf_grad told, per input
};

class Op {
 public:
  virtual ~Op() = default;
  virtual const char* name() const = 0;
  // Outputs from inputs (fresh tensors, never an input itself; they may be views sharing an
  // input's storage). Runs in forward and again when a checkpoint segment is replayed, so it may
  // depend only on `in` and the op's members; it runs under NoGrad, so nothing it calls records.
  virtual Tensors forward(const Tensors& in, ForwardCtx& ctx) const = 0;
  // Input gradients from output gradients (each defined, shaped like its output, except where
  // accepts_absent_grad or accepts_host_seed says otherwise). An entry may be
  // left undefined where !ctx.needs_input_grad(i). Broadcast inputs get gradients of their own
  // shape (see sum_to). A returned gradient may be a tensor the rule owns (a save of its own, or
  // grad_out itself): the tape never writes into a gradient it received (it sums out of place and
  // copies into a leaf's new .grad), and a rule must not write into its grad_out either.
  virtual Tensors backward(const Tensors& grad_out, BackwardCtx& ctx) const = 0;
  // Whether backward takes output `k`'s gradient undefined when nothing reached that output (else
  // the tape hands it zeros, a fill): for a rule that only adds it somewhere (add_layer_norm's sum).
  virtual bool accepts_absent_grad(size_t /*k*/) const { return false; }
  // Whether backward takes output `k`'s gradient as a host number (ctx.host_grad(k), grad_out[k]
  // undefined) when that output is the scalar loss of backward(loss, scale): the seed is then a
  // constant the host knows, and the tape makes no tensor of it (a fill launch). For a rule whose
  // input gradients are a saved tensor times the seed (cross_entropy, linear_cross_entropy): it
  // hands the save on as it is for a seed of 1 (no launch), or scales it by the number. Every other
  // gradient, an explicit one (backward(loss, grad)) included, is a tensor as before.
  virtual bool accepts_host_seed(size_t /*k*/) const { return false; }
  // Attributes for the tape dump, e.g. "p=0.1 seed=5 offset=3".
  virtual std::string attributes() const { return ""; }
  // Selective checkpointing keeps this op's output instead of recomputing it: true for the ops
  // whose output costs a GEMM to remake (linear, matmul, attention, conv2d, linear_cross_entropy).
  // A user's KeepRule may decide otherwise (autograd/checkpoint.h).
  virtual bool kept_by_selective() const { return false; }
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
