// tanh: y = tanh(x); dx = g * (1 - y^2). Saves y.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;
using kernels::UnaryOp;

struct Tanh final : autograd::Op {
  const char* name() const override { return "tanh"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    Tensor y = kernels::unary(UnaryOp::Tanh, in[0]);
    node.save({y});
    return {y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    const Tensor one_minus_y2 = kernels::binary(BinaryOp::Sub, 1.0, kernels::unary(UnaryOp::Square, node.saved_tensor(0)));
    return {kernels::binary(BinaryOp::Mul, grad[0], one_minus_y2)};
  }
};

}  // namespace

Tensor tanh(const Tensor& x) { return autograd::apply(Tanh{}, {x}); }

}  // namespace reel
