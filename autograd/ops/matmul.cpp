// matmul: y = op(a) @ op(b), op = transpose of the last two dims when asked, numpy.matmul rules.
// With A = op(a), B = op(b):  dA = g @ B^T,  dB = A^T @ g. Each is written as one matmul with
// transpose flags (no copies), then summed over broadcast batch dims (for bf16 / f16 in f32, see
// backward). Saves b only when a needs its gradient and a only when b does; backward releases b
// once da is made (BackwardCtx::release_saved), before db.
#include "autograd/autocast.h"
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
    // A bf16 / f16 gradient that sums over broadcast batch dims is computed in f32 (the operands
    // widened exactly), summed and rounded once: the 16-bit reductions are not ported, and one
    // rounding at the end is what the unbroadcast product gets too.
    const DType dt = g.dtype();
    const auto batch_of = [](const Shape& s) { return Shape(s.begin(), s.end() - 2); };
    const auto widened = [&](const Shape& s, bool left) {
      return is_16bit_floating(dt) && batch_of(matrix_shape(s, left)) != batch_of(g.shape());
    };
    const auto in_f32 = [](const Tensor& t, bool wide) { return wide ? t.to(DType::f32) : t; };
    Tensors grads(2);
    if (ctx.needs_input_grad(0)) {
      const bool wide = widened(sa, true);
      const Tensor b = in_f32(as_matrix(ctx.saved(0), false), wide), gw = in_f32(g, wide);
      // da = dA = g B^T, or da = dA^T = B g^T when a was transposed.
      Tensor da = ta ? kernels::matmul(b, gw, tb, true) : kernels::matmul(gw, b, false, !tb);
      grads[0] = autograd::sum_to(da, matrix_shape(sa, true)).reshape(sa);
      if (wide) grads[0] = grads[0].to(dt);
    }
    ctx.release_saved(0);  // b is read no more (a sharded weight is freed before db exists)
    if (ctx.needs_input_grad(1)) {
      const bool wide = widened(sb, false);
      const Tensor a = in_f32(as_matrix(ctx.saved(1), true), wide), gw = in_f32(g, wide);
      // db = dB = A^T g, or db = dB^T = g^T A when b was transposed.
      Tensor db = tb ? kernels::matmul(gw, a, true, ta) : kernels::matmul(a, gw, !ta, false);
      grads[1] = autograd::sum_to(db, matrix_shape(sb, false)).reshape(sb);
      if (wide) grads[1] = grads[1].to(dt);
    }
    return grads;
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  return autograd::apply(Matmul(transpose_a, transpose_b), autograd::autocast("matmul", {a, b}));
}

}  // namespace reel
