// sigmoid: y = 1 / (1 + e^-x); dx = g * y * (1 - y). Saves y.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;

struct Sigmoid final : autograd::Op {
  const char* name() const override { return "sigmoid"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    Tensor y = kernels::unary(kernels::UnaryOp::Sigmoid, in[0]);
    node.save({y});
    return {y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    const Tensor& y = node.saved_tensor(0);
    const Tensor dy_dx = kernels::binary(BinaryOp::Mul, y, kernels::binary(BinaryOp::Sub, 1.0, y));
    return {kernels::binary(BinaryOp::Mul, grad[0], dy_dx)};
  }
};

}  // namespace

Tensor sigmoid(const Tensor& x) { return autograd::apply(Sigmoid{}, {x}); }

}  // namespace reel
