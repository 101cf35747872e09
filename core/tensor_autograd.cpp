// The autograd state of a tensor as core keeps it (core/autograd_meta.h): the accessors declared in
// core/tensor.h, the thread's grad mode, and the views autograd registers for core to record with.
#include "core/autograd_meta.h"

namespace reel {

namespace {
thread_local bool t_grad_enabled = true;
RecordingViews g_recording_views{};  // all null until autograd registers: constant-initialised
}  // namespace

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

void register_recording_views(const RecordingViews& views) { g_recording_views = views; }

namespace {
OutputReleasedHook g_output_released = nullptr;
}  // namespace

void register_output_released(OutputReleasedHook hook) { g_output_released = hook; }

// Leaves have no producer; a non-leaf's producer may now have no live output (autograd decides).
AutogradMeta::~AutogradMeta() {
  if (!is_leaf && g_output_released) g_output_released(producer);
}

// Used by core/tensor.cpp: the registered views, or null when a view of `t` is not to be recorded.
const RecordingViews* recording_views_for(const Tensor& t) {
  if (!g_recording_views.view || !t.requires_grad() || !GradMode::is_enabled()) return nullptr;
  return &g_recording_views;
}

bool Tensor::requires_grad() const {
  const auto& meta = autograd_meta();
  return meta && meta->requires_grad;
}

const Tensor& Tensor::set_requires_grad(bool on) const {
  auto& meta = autograd_meta();
  REEL_CHECK(!meta || meta->is_leaf, "set_requires_grad: the ", shape(), " tensor is not a leaf (recorded ops "
             "made it, so it follows their inputs); detach() gives a leaf");
  REEL_CHECK(!on || is_floating(dtype()), "set_requires_grad: a ", dtype(), " tensor ", shape(),
             " cannot require grad (a floating dtype expected)");
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const auto& meta = autograd_meta();
  return !meta || meta->is_leaf;
}

Tensor Tensor::grad() const {
  const auto& meta = autograd_meta();
  if (!meta) return Tensor();
  if (meta->grad_is_zero) {  // zero_grad's deferred fill, due now that someone reads the values
    meta->grad.fill_(0.0);
    meta->grad_is_zero = false;
  }
  return meta->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  auto& meta = autograd_meta();
  REEL_CHECK(!meta || meta->is_leaf, "set_grad: the ", shape(), " tensor is not a leaf; only leaves keep a .grad");
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->grad = grad;
  meta->grad_is_zero = false;
}

Tensor Tensor::detach() const {
  REEL_CHECK(defined(), "detach: use of an undefined (default-constructed) tensor");
  auto impl = std::make_shared<TensorImpl>(*impl_ptr());
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

}  // namespace reel
