// sub: a - b (broadcasting), a - s and s - a. The gradient passes through, negated for the
// subtracted operand, summed down to each input's shape. Nothing is saved.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;
using kernels::UnaryOp;

struct Sub final : autograd::Op {
  const char* name() const override { return "sub"; }
  Tensors forward(const Tensors& in, Node&) const override { return {kernels::binary(BinaryOp::Sub, in[0], in[1])}; }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    Tensors g(2);
    if (node.needs_input_grad(0)) g[0] = autograd::sum_to(grad[0], node.input_shape(0));
    if (node.needs_input_grad(1)) g[1] = kernels::unary(UnaryOp::Neg, autograd::sum_to(grad[0], node.input_shape(1)));
    return g;
  }
};

// x - s, or s - x when scalar_left.
struct SubScalar final : autograd::Op {
  double s;
  bool scalar_left;
  SubScalar(double s, bool scalar_left) : s(s), scalar_left(scalar_left) {}
  const char* name() const override { return scalar_left ? "rsub_scalar" : "sub_scalar"; }
  std::string attributes() const override { return "s=" + std::to_string(s); }
  Tensors forward(const Tensors& in, Node&) const override {
    return {scalar_left ? kernels::binary(BinaryOp::Sub, s, in[0]) : kernels::binary(BinaryOp::Sub, in[0], s)};
  }
  Tensors backward(const Tensors& grad, const Node&) const override {
    return {scalar_left ? kernels::unary(UnaryOp::Neg, grad[0]) : grad[0]};
  }
};

}  // namespace

Tensor sub(const Tensor& a, const Tensor& b) { return autograd::apply(Sub{}, {a, b}); }
Tensor sub(const Tensor& a, double b) { return autograd::apply(SubScalar(b, false), {a}); }
Tensor sub(double a, const Tensor& b) { return autograd::apply(SubScalar(a, true), {b}); }

}  // namespace reel
