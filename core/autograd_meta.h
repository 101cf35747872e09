// The autograd state a tensor carries (TensorImpl::autograd) and the thread's grad mode: plain data
// that core owns so that a Tensor can answer requires_grad() / grad() without linking autograd.
// What the fields mean, and every use of `producer`, belongs to autograd/ (the tape).
#pragma once
#include <memory>

#include "core/tensor.h"

namespace reel {

namespace autograd {
struct Node;  // the tape's record of one op run (autograd/); only autograd reads it
}

// Leaves (tensors no recorded op made, e.g. parameters) own a persistent gradient buffer;
// non-leaves point at the node that made them.
struct AutogradMeta {
  AutogradMeta() = default;
  // A non-leaf going away (its last tensor handle, or the last node consuming it) may leave its
  // producer with no live output: tells autograd, which releases what no live tensor depends on
  // (see register_output_released).
  ~AutogradMeta();
  AutogradMeta(const AutogradMeta&) = delete;
  AutogradMeta& operator=(const AutogradMeta&) = delete;

  bool requires_grad = false;
  bool is_leaf = true;
  Tensor grad;                              // leaves: summed over every backward, category gradient
  // zero_grad deferred its fill: grad's values are stale and count as zeros. The next backward
  // writes the buffer instead of adding to it (the tape), and Tensor::grad() fills it first if
  // anything reads it before then, so a step pays no pass zeroing its gradients.
  bool grad_is_zero = false;
  std::weak_ptr<autograd::Node> producer;   // non-leaves: expires when the tape is cleared
  int output_index = 0;                     // which output of `producer` this tensor is
  // A view (made by recorded ops, e.g. w.t(), or by their replay) sharing the storage of a leaf
  // that requires grad. Its bytes are that parameter's: saving it never makes them an activation.
  bool views_leaf = false;
};

// Grad mode of this thread: on by default; autograd::NoGrad turns it off for a scope. Ops record
// on the tape, and Tensor views are recorded, only while it is on.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// How core records the views of a tensor that requires grad, in grad mode, without knowing the
// tape: autograd registers its differentiable views (autograd/ops/view.cpp) here, as kernels
// register the device backends (core/device_backend.h). Until it has, views are not recorded.
struct RecordingViews {
  Tensor (*view)(const Tensor&, Shape);
  Tensor (*reshape)(const Tensor&, Shape);
  Tensor (*transpose)(const Tensor&, int64_t, int64_t);
  Tensor (*permute)(const Tensor&, std::vector<int64_t>);
  Tensor (*slice)(const Tensor&, int64_t, int64_t, int64_t, int64_t);
  Tensor (*select)(const Tensor&, int64_t, int64_t);
  Tensor (*squeeze)(const Tensor&, int64_t);
  Tensor (*unsqueeze)(const Tensor&, int64_t);
  Tensor (*expand)(const Tensor&, Shape);
  Tensor (*contiguous)(const Tensor&);
};
void register_recording_views(const RecordingViews& views);

// Called (on the thread destroying it) when the AutogradMeta of a non-leaf goes, with its
// producer: autograd registers the tape's release of nodes no live tensor depends on
// (autograd/register.cpp). It must not throw: it runs in a destructor.
using OutputReleasedHook = void (*)(const std::weak_ptr<autograd::Node>& producer);
void register_output_released(OutputReleasedHook hook);

}  // namespace reel
