// exp: y = e^x; dx = g * y. Saves y.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;

struct Exp final : autograd::Op {
  const char* name() const override { return "exp"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    Tensor y = kernels::unary(kernels::UnaryOp::Exp, in[0]);
    node.save({y});
    return {y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    return {kernels::binary(kernels::BinaryOp::Mul, grad[0], node.saved_tensor(0))};
  }
};

}  // namespace

Tensor exp(const Tensor& x) { return autograd::apply(Exp{}, {x}); }

}  // namespace reel
