// silu (swish): y = x * s, s = sigmoid(x);  dy/dx = s + x s (1 - s) = s (1 + x (1 - s)).
// Saves x (y alone does not determine x); backward recomputes s with one sigmoid pass. A fused
// silu-backward kernel would turn the five elementwise passes into one.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;

struct Silu final : autograd::Op {
  const char* name() const override { return "silu"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    node.save({in[0]});
    return {kernels::unary(kernels::UnaryOp::Silu, in[0])};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    const Tensor& x = node.saved_tensor(0);
    const Tensor s = kernels::unary(kernels::UnaryOp::Sigmoid, x);
    const Tensor x_one_minus_s = kernels::binary(BinaryOp::Mul, x, kernels::binary(BinaryOp::Sub, 1.0, s));
    const Tensor dy_dx = kernels::binary(BinaryOp::Mul, s, kernels::binary(BinaryOp::Add, x_one_minus_s, 1.0));
    return {kernels::binary(BinaryOp::Mul, grad[0], dy_dx)};
  }
};

}  // namespace

Tensor silu(const Tensor& x) { return autograd::apply(Silu{}, {x}); }

}  // namespace reel
