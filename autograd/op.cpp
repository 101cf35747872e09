// The contexts an op sees (autograd/op.h): what ForwardCtx and BackwardCtx read and write of the
// tape's Node.
#include "autograd/op.h"

#include <utility>

#include "autograd/hooks.h"
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
// autograd/checkpoint.cpp, run_forward.
void ForwardCtx::save(const Tensors& tensors) {
  if (!node_.keep_saved) return;
  for (const Tensor& t : tensors) node_.saved.emplace_back(t);
}

BackwardCtx::BackwardCtx(Node& node)
    : node_(node), sunk_(node.inputs.size(), false), announced_(node.inputs.size(), false) {}

size_t BackwardCtx::num_inputs() const { return node_.inputs.size(); }
bool BackwardCtx::needs_input_grad(size_t i) const { return node_.inputs[i].meta != nullptr; }
const Shape& BackwardCtx::input_shape(size_t i) const { return node_.inputs[i].shape; }
std::optional<double> BackwardCtx::host_grad(size_t k) const {
  return k < node_.outputs.size() ? node_.outputs[k].host_grad : std::nullopt;
}

const Tensor& BackwardCtx::saved(size_t slot) {
  const char* op = node_.op->name();
  REEL_CHECK(slot < node_.saved.size() && node_.saved[slot].defined(), op, ": backward needs saved tensor ", slot,
             ", which forward did not save or the rule released (a bug in the op)");
  return node_.saved[slot].unpack(op);
}

void BackwardCtx::release_saved(size_t slot) {
  if (slot >= node_.saved.size() || !node_.saved[slot].defined()) return;
  const Tensor* kept = node_.saved[slot].kept_tensor();
  const Tensor value = kept ? *kept : Tensor();  // held through the notice: observers may look at it
  node_.saved[slot].clear();
  if (value.defined()) notify_saved_released({node_.op->name(), static_cast<int64_t>(node_.index), Pass::Backward}, value);
}

void BackwardCtx::before_leaf_grad(size_t i) {
  const Node::Input& in = node_.inputs[i];
  if (announced_[i] || !in.meta || !in.meta->is_leaf) return;
  announced_[i] = true;
  notify_before_leaf_grad(*in.meta);
}

// Input i's .grad buffer if the rule may write into it itself: a leaf's existing buffer, contiguous
// and of the input's shape, dtype and device (a buffer the user replaced with another layout, or an
// f32 .grad of a 16-bit parameter, goes through the tape's accumulate_into_leaf instead). Else
// undefined. `accumulate`: add to it (false: its values are stale, zero_grad deferred the fill).
Tensor BackwardCtx::grad_sink(size_t i, bool& accumulate) {
  if (i >= node_.inputs.size()) return Tensor();
  before_leaf_grad(i);
  const Node::Input& in = node_.inputs[i];
  if (!in.meta || !in.meta->is_leaf) return Tensor();
  const Tensor& g = in.meta->grad;
  if (!g.defined() || !g.is_contiguous() || g.shape() != in.shape || g.dtype() != in.dtype || g.device() != in.device)
    return Tensor();
  accumulate = !in.meta->grad_is_zero;
  return g;
}

bool BackwardCtx::has_grad_sink(size_t i) const {
  if (i >= node_.inputs.size()) return false;
  const Node::Input& in = node_.inputs[i];
  if (!in.meta || !in.meta->is_leaf) return false;
  const Tensor& g = in.meta->grad;
  return g.defined() && g.is_contiguous() && g.shape() == in.shape && g.dtype() == in.dtype && g.device() == in.device;
}

// The buffer holds this rule's gradient now: a second write into it (the same leaf as another
// input of the rule) adds.
void BackwardCtx::mark_sunk(size_t i) {
  sunk_[i] = true;
  node_.inputs[i].meta->grad_is_zero = false;
}

}  // namespace reel::autograd
