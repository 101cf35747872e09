// mul: a * b (broadcasting), a * s and neg. d(a*b)/da = b and d(a*b)/db = a, so each operand is
// saved only when the *other* one needs its gradient.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;

struct Mul final : autograd::Op {
  const char* name() const override { return "mul"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    // slot 0: b (for da), slot 1: a (for db)
    node.save({node.needs_input_grad(0) ? in[1] : Tensor(), node.needs_input_grad(1) ? in[0] : Tensor()});
    return {kernels::binary(BinaryOp::Mul, in[0], in[1])};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    Tensors g(2);
    for (size_t i = 0; i < 2; ++i)
      if (node.needs_input_grad(i))
        g[i] = autograd::sum_to(kernels::binary(BinaryOp::Mul, grad[0], node.saved_tensor(i)), node.input_shape(i));
    return g;
  }
};

struct MulScalar final : autograd::Op {
  double s;
  explicit MulScalar(double s) : s(s) {}
  const char* name() const override { return "mul_scalar"; }
  std::string attributes() const override { return "s=" + std::to_string(s); }
  Tensors forward(const Tensors& in, Node&) const override { return {kernels::binary(BinaryOp::Mul, in[0], s)}; }
  Tensors backward(const Tensors& grad, const Node&) const override {
    return {kernels::binary(BinaryOp::Mul, grad[0], s)};
  }
};

}  // namespace

Tensor mul(const Tensor& a, const Tensor& b) { return autograd::apply(Mul{}, {a, b}); }
Tensor mul(const Tensor& a, double b) { return autograd::apply(MulScalar(b), {a}); }
Tensor neg(const Tensor& x) { return autograd::apply(MulScalar(-1.0), {x}); }

}  // namespace reel
