// add: a + b (broadcasting) and a + s. The gradient passes through to both inputs, summed down
// to each input's shape. Nothing is saved.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;

struct Add final : autograd::Op {
  const char* name() const override { return "add"; }
  Tensors forward(const Tensors& in, Node&) const override { return {kernels::binary(BinaryOp::Add, in[0], in[1])}; }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    Tensors g(2);
    for (size_t i = 0; i < 2; ++i)
      if (node.needs_input_grad(i)) g[i] = autograd::sum_to(grad[0], node.input_shape(i));
    return g;
  }
};

struct AddScalar final : autograd::Op {
  double s;
  explicit AddScalar(double s) : s(s) {}
  const char* name() const override { return "add_scalar"; }
  std::string attributes() const override { return "s=" + std::to_string(s); }
  Tensors forward(const Tensors& in, Node&) const override { return {kernels::binary(BinaryOp::Add, in[0], s)}; }
  Tensors backward(const Tensors& grad, const Node&) const override { return {grad[0]}; }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return autograd::apply(Add{}, {a, b}); }
Tensor add(const Tensor& a, double b) { return autograd::apply(AddScalar(b), {a}); }

}  // namespace reel
