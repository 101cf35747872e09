// gelu (tanh form, as GPT-2): y = 0.5 x (1 + t), t = tanh(k (x + c x^3)), k = sqrt(2/pi), c = 0.044715.
//   dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
// Saves x. The derivative is composed from elementwise kernels (a dozen passes over x); a fused
// gelu-backward kernel would make it one.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;
using kernels::BinaryOp;
using kernels::UnaryOp;

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

Tensor gelu_derivative(const Tensor& x) {
  auto mul = [](const Tensor& a, const Tensor& b) { return kernels::binary(BinaryOp::Mul, a, b); };
  auto scale = [](const Tensor& a, double s) { return kernels::binary(BinaryOp::Mul, a, s); };
  const Tensor x2 = kernels::unary(UnaryOp::Square, x);
  const Tensor inner = kernels::binary(BinaryOp::Add, x, scale(mul(x2, x), kCubic));   // x + c x^3
  const Tensor t = kernels::unary(UnaryOp::Tanh, scale(inner, kSqrt2OverPi));
  const Tensor dinner = kernels::binary(BinaryOp::Add, scale(x2, 3 * kCubic * kSqrt2OverPi), kSqrt2OverPi);  // k (1 + 3c x^2)
  const Tensor sech2 = kernels::binary(BinaryOp::Sub, 1.0, kernels::unary(UnaryOp::Square, t));     // 1 - t^2
  const Tensor left = scale(kernels::binary(BinaryOp::Add, t, 1.0), 0.5);                          // 0.5 (1 + t)
  const Tensor right = scale(mul(mul(x, sech2), dinner), 0.5);                                     // 0.5 x (1 - t^2) k (1 + 3c x^2)
  return kernels::binary(BinaryOp::Add, left, right);
}

struct Gelu final : autograd::Op {
  const char* name() const override { return "gelu"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    node.save({in[0]});
    return {kernels::unary(UnaryOp::Gelu, in[0])};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    return {kernels::binary(BinaryOp::Mul, grad[0], gelu_derivative(node.saved_tensor(0)))};
  }
};

}  // namespace

Tensor gelu(const Tensor& x) { return autograd::apply(Gelu{}, {x}); }

}  // namespace reel
