// The autograd accessors declared in core/tensor.h: core carries an AutogradMeta pointer, this file
// gives it meaning (the linker joins the two, so core never includes autograd).
#include "autograd/op.h"
#include "core/tensor.h"

namespace reel {

bool Tensor::requires_grad() const {
  const auto& meta = autograd_meta();
  return meta && meta->requires_grad;
}

const Tensor& Tensor::set_requires_grad(bool on) const {
  auto& meta = autograd_meta();
  REEL_CHECK(!meta || meta->is_leaf, "set_requires_grad: the ", shape(), " tensor is not a leaf (recorded ops "
             "made it, so it follows their inputs); detach() gives a leaf");
  REEL_CHECK(!on || is_floating(dtype()), "set_requires_grad: a ", dtype(), " tensor ", shape(),
             " cannot require grad (f32 or f64 expected)");
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
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  auto& meta = autograd_meta();
  REEL_CHECK(!meta || meta->is_leaf, "set_grad: the ", shape(), " tensor is not a leaf; only leaves keep a .grad");
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->grad = grad;
}

Tensor Tensor::detach() const {
  REEL_CHECK(defined(), "detach: use of an undefined (default-constructed) tensor");
  auto impl = std::make_shared<TensorImpl>(*impl_ptr());
  impl->autograd = nullptr;
  return Tensor(std::move(impl));
}

}  // namespace reel
