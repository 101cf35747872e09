// The contexts an op sees (autograd/op.h): what ForwardCtx and BackwardCtx read and write of the
// tape's Node.
#include "autograd/op.h"

#include <utility>

#include "autograd/node.h"

namespace reel::autograd {

bool Node::any_input_needs_grad() const {
  for (const Input& in : inputs)
    if (in.meta) return true;
  return false;
}

bool ForwardCtx::needs_input_grad(size_t i) const { return node_.inputs[i].meta != nullptr; }
bool ForwardCtx::any_input_needs_grad() const { return node_.any_input_needs_grad(); }
bool ForwardCtx::keeps_saves() const { return node_.keep_saved; }

// The slots are final (packed, outputs and kept inputs marked) only once the forward returned:
// autograd/tape.cpp, finish_saves.
void ForwardCtx::save(const Tensors& tensors) {
  if (!node_.keep_saved) return;
  for (const Tensor& t : tensors) node_.saved.emplace_back(t);
}

BackwardCtx::BackwardCtx(Node& node, Tensors sinks, std::vector<bool> sink_is_zero)
    : node_(node), sinks_(std::move(sinks)), sink_is_zero_(std::move(sink_is_zero)), sunk_(node.inputs.size(), false) {}

size_t BackwardCtx::num_inputs() const { return node_.inputs.size(); }
bool BackwardCtx::needs_input_grad(size_t i) const { return node_.inputs[i].meta != nullptr; }
const Shape& BackwardCtx::input_shape(size_t i) const { return node_.inputs[i].shape; }

const Tensor& BackwardCtx::saved(size_t slot) {
  const char* op = node_.op->name();
  REEL_CHECK(slot < node_.saved.size() && node_.saved[slot].defined(), op, ": backward needs saved tensor ", slot,
             ", which forward did not save (a bug in the op)");
  return node_.saved[slot].unpack(op);
}

}  // namespace reel::autograd
