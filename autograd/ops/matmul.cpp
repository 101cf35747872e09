// matmul: y = op(a) @ op(b), op = transpose of the last two dims when asked, numpy.matmul rules.
// With A = op(a), B = op(b):  dA = g @ B^T,  dB = A^T @ g. Each is written as one matmul with
// transpose flags (no copies), then summed over broadcast batch dims. Saves b only when a needs
// its gradient and a only when b does.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

// A 1-D operand is a (1, K) row on the left or a (K, 1) column on the right.
Tensor as_matrix(const Tensor& t, bool left) { return t.dim() != 1 ? t : t.unsqueeze(left ? 0 : 1); }
Shape matrix_shape(const Shape& s, bool left) {
  if (s.size() != 1) return s;
  return left ? Shape{1, s[0]} : Shape{s[0], 1};
}

struct Matmul final : autograd::Op {
  bool transpose_a, transpose_b;
  Matmul(bool ta, bool tb) : transpose_a(ta), transpose_b(tb) {}
  const char* name() const override { return "matmul"; }
  bool kept_by_selective() const override { return true; }  // remade only at a GEMM's cost
  std::string attributes() const override {
    return std::string(transpose_a ? "a^T " : "") + (transpose_b ? "b^T" : "");
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    // slot 0: b (for da), slot 1: a (for db)
    ctx.save({ctx.needs_input_grad(0) ? in[1] : Tensor(), ctx.needs_input_grad(1) ? in[0] : Tensor()});
    return {kernels::matmul(in[0], in[1], transpose_a, transpose_b)};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Shape& sa = ctx.input_shape(0);
    const Shape& sb = ctx.input_shape(1);
    // Put back the dims a 1-D operand dropped from the output: g becomes (..., M, N).
    Tensor g = grad[0];
    if (sa.size() == 1 && sb.size() == 1) g = g.reshape({1, 1});
    else if (sa.size() == 1) g = g.unsqueeze(g.dim() - 1);
    else if (sb.size() == 1) g = g.unsqueeze(g.dim());
    const bool ta = transpose_a, tb = transpose_b;
    Tensors grads(2);
    if (ctx.needs_input_grad(0)) {
      const Tensor b = as_matrix(ctx.saved(0), false);
      // da = dA = g B^T, or da = dA^T = B g^T when a was transposed.
      Tensor da = ta ? kernels::matmul(b, g, tb, true) : kernels::matmul(g, b, false, !tb);
      grads[0] = autograd::sum_to(da, matrix_shape(sa, true)).reshape(sa);
    }
    if (ctx.needs_input_grad(1)) {
      const Tensor a = as_matrix(ctx.saved(1), true);
      // db = dB = A^T g, or db = dB^T = g^T A when b was transposed.
      Tensor db = tb ? kernels::matmul(g, a, true, ta) : kernels::matmul(a, g, !ta, false);
      grads[1] = autograd::sum_to(db, matrix_shape(sb, false)).reshape(sb);
    }
    return grads;
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  return autograd::apply(Matmul(transpose_a, transpose_b), {a, b});
}

}  // namespace reel
