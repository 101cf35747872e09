// relu: y = max(x, 0); dx = g where x > 0, else 0. Saves y, which is > 0 exactly where x > 0.
#include <limits>

#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;

// 1 where y > 0, 0 where y == 0 (y >= 0). kernels has no compare/select op yet, so the step is
// made from the ones it has: y * M * M (M the dtype's largest finite value) is 0 where y == 0 and
// >= 1 (or inf) where y > 0, down to the smallest subnormal; min(., 1) makes it exactly 0 or 1.
Tensor positive_step(const Tensor& y) {
  const double big = y.dtype() == DType::f32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  const Tensor scaled = kernels::binary(BinaryOp::Mul, kernels::binary(BinaryOp::Mul, y, big), big);
  return kernels::binary(BinaryOp::Minimum, scaled, 1.0);
}

struct Relu final : autograd::Op {
  const char* name() const override { return "relu"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    Tensor y = kernels::unary(kernels::UnaryOp::Relu, in[0]);
    node.save({y});
    return {y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    return {kernels::binary(BinaryOp::Mul, grad[0], positive_step(node.saved_tensor(0)))};
  }
};

}  // namespace

Tensor relu(const Tensor& x) { return autograd::apply(Relu{}, {x}); }

}  // namespace reel
