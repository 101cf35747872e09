// log: y = ln(x); dx = g / x. Saves x.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;

struct Log final : autograd::Op {
  const char* name() const override { return "log"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    node.save({in[0]});
    return {kernels::unary(kernels::UnaryOp::Log, in[0])};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    return {kernels::binary(kernels::BinaryOp::Div, grad[0], node.saved_tensor(0))};
  }
};

}  // namespace

Tensor log(const Tensor& x) { return autograd::apply(Log{}, {x}); }

}  // namespace reel
