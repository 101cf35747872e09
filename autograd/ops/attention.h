// Causal scaled-dot-product attention, softmax(q k^T * scale + mask) v, two ways:
//
// attention: one op on the flash-style kernels of kernels/attention.h. The forward walks key tiles
//   with an online softmax and never forms the (Tq, Tk) matrix; it saves q, k, v, the output and
//   the row log-sum-exp lse (..., Tq). Backward (FlashAttention-2) recomputes the probabilities
//   from them, P = exp(q k^T * scale - lse), so the tape keeps O(T) per (b, h), not O(T^2).
//   q, k, v usually are views of one qkv projection; saving them keeps that projection's storage.
//
// attention_composed: the textbook composition of tape ops: matmul with a transpose flag, a
//   scalar multiply, a constant additive mask (0 where key j <= query i, -inf above the diagonal:
//   exp(-inf) = 0 gives those keys zero weight and zero gradient; the diagonal is never masked,
//   so no row is all -inf), softmax and matmul. It saves the (Tq, Tk) probabilities: the
//   reference the fused op is tested against, and a readable statement of what it computes.
#pragma once
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/ops/softmax.h"
#include "kernels/attention.h"

namespace reel {
namespace autograd::ops {
struct Attention final : autograd::Op {
  bool causal;
  std::optional<double> scale;  // none: 1/sqrt(D)
  Attention(bool causal, std::optional<double> scale) : causal(causal), scale(scale) {}
  const char* name() const override { return "attention"; }
  bool kept_by_selective() const override { return true; }  // remade only at a GEMM's cost
  std::string attributes() const override {
    return std::string(causal ? "causal" : "full") + (scale ? " scale=" + std::to_string(*scale) : "");
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    kernels::AttentionForward r = kernels::attention_forward(in[0], in[1], in[2], scale, causal);
    ctx.save({in[0], in[1], in[2], r.out, r.lse});
    return {r.out};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    kernels::AttentionBackward r =
        kernels::attention_backward(grad[0], ctx.saved(0), ctx.saved(1), ctx.saved(2),
                                    ctx.saved(3), ctx.saved(4), scale, causal);
    return {r.dq, r.dk, r.dv};
  }
};

// (T, T): 0 where key j <= query i, -inf above the diagonal. A constant: it needs no gradient.
inline Tensor causal_mask(int64_t T, DType dtype, Device device) {
  std::vector<double> m(static_cast<size_t>(T * T), 0.0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) m[static_cast<size_t>(i * T + j)] = -std::numeric_limits<double>::infinity();
  return from_vector(m, {T, T}).to(dtype).to(device);
}

}  // namespace autograd::ops

// ---- scaled-dot-product attention ----
// softmax(q k^T * scale + mask) v for q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), e.g. (B, H,
// T, D); scale defaults to 1/sqrt(D); causal: query i sees keys j <= i (needs Tq == Tk).
// attention: the fused flash-style kernel. Saves q, k, v, out and the row log-sum-exp (B, H, T);
//   backward recomputes the probabilities, so no (T, T) matrix is ever kept.
// attention_composed: the same from matmul, mul, add (a constant -inf mask), softmax and matmul,
//   saving the (T, T) probabilities: the reference the fused op is tested against.
inline Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                        std::optional<double> scale = std::nullopt) {
  return autograd::apply(autograd::ops::Attention(causal, scale), autograd::autocast("attention", {q, k, v}));
}

inline Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                                 std::optional<double> scale = std::nullopt) {
  REEL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() && k.size(-1) == q.size(-1) &&
                 v.size(-2) == k.size(-2),
             "attention_composed: q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(),
             " do not match: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) expected");
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  REEL_CHECK(!causal || Tq == Tk, "attention_composed: causal attention needs as many queries as keys: q ",
             q.shape(), ", k ", k.shape());
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = matmul(q, k, false, true) * s;  // (..., Tq, Tk)
  if (causal) scores = scores + autograd::ops::causal_mask(Tq, scores.dtype(), scores.device());
  return matmul(softmax(scores), v);  // (..., Tq, Dv)
}

}  // namespace reel
