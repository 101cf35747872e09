// div: a / b (broadcasting), a / s and s / a.
//   y = a / b:  da = g / b,  db = -g * y / b   (saves b, and y only when b needs its gradient)
//   y = s / x:  dx = -g * s / x^2              (saves x)
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;
using kernels::UnaryOp;

struct Div final : autograd::Op {
  const char* name() const override { return "div"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    Tensor y = kernels::binary(BinaryOp::Div, in[0], in[1]);
    // slot 0: b, slot 1: y
    node.save({node.any_input_needs_grad() ? in[1] : Tensor(), node.needs_input_grad(1) ? y : Tensor()});
    return {y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    Tensors g(2);
    const Tensor& b = node.saved_tensor(0);
    if (node.needs_input_grad(0))
      g[0] = autograd::sum_to(kernels::binary(BinaryOp::Div, grad[0], b), node.input_shape(0));
    if (node.needs_input_grad(1)) {
      Tensor gy_over_b = kernels::binary(BinaryOp::Div, kernels::binary(BinaryOp::Mul, grad[0], node.saved_tensor(1)), b);
      g[1] = kernels::unary(UnaryOp::Neg, autograd::sum_to(gy_over_b, node.input_shape(1)));
    }
    return g;
  }
};

struct DivScalar final : autograd::Op {  // x / s
  double s;
  explicit DivScalar(double s) : s(s) {}
  const char* name() const override { return "div_scalar"; }
  std::string attributes() const override { return "s=" + std::to_string(s); }
  Tensors forward(const Tensors& in, Node&) const override { return {kernels::binary(BinaryOp::Div, in[0], s)}; }
  Tensors backward(const Tensors& grad, const Node&) const override {
    return {kernels::binary(BinaryOp::Div, grad[0], s)};
  }
};

struct RDivScalar final : autograd::Op {  // s / x
  double s;
  explicit RDivScalar(double s) : s(s) {}
  const char* name() const override { return "rdiv_scalar"; }
  std::string attributes() const override { return "s=" + std::to_string(s); }
  Tensors forward(const Tensors& in, Node& node) const override {
    node.save({in[0]});
    return {kernels::binary(BinaryOp::Div, s, in[0])};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    const Tensor x_squared = kernels::unary(UnaryOp::Square, node.saved_tensor(0));
    return {kernels::binary(BinaryOp::Div, kernels::binary(BinaryOp::Mul, grad[0], -s), x_squared)};
  }
};

}  // namespace

Tensor div(const Tensor& a, const Tensor& b) { return autograd::apply(Div{}, {a, b}); }
Tensor div(const Tensor& a, double b) { return autograd::apply(DivScalar(b), {a}); }
Tensor div(double a, const Tensor& b) { return autograd::apply(RDivScalar(a), {b}); }

}  // namespace reel
