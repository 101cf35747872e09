// Entry points of the attention family (kernels/attention.h): checks, (B, H, T, X) operands read
// in place where their layout allows, outputs laid out like the inputs, then the backend kernel.
#include "kernels/attention.h"

#include <cmath>
#include <optional>

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {
struct AttnDims {
  int64_t BH, Tq, Tk, D, Dv;
  Shape batch;  // the leading dims (B, H)
};

AttnDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  check_same_device(op, {&q, &k, &v});
  check_same_floating_dtype(op, {&q, &k, &v});
  REEL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": q ", q.shape(), ", k ", k.shape(),
             " and v ", v.shape(), " must have one rank of at least 2: (B, H, T, D)");
  AttnDims d;
  d.batch = Shape(q.shape().begin(), q.shape().end() - 2);
  const bool same_batch = Shape(k.shape().begin(), k.shape().end() - 2) == d.batch &&
                          Shape(v.shape().begin(), v.shape().end() - 2) == d.batch;
  d.Tq = q.size(-2), d.D = q.size(-1), d.Tk = k.size(-2), d.Dv = v.size(-1);
  REEL_CHECK(same_batch && k.size(-1) == d.D && v.size(-2) == d.Tk, op, ": q ", q.shape(), ", k ", k.shape(),
             " and v ", v.shape(), " do not match: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) expected");
  REEL_CHECK(!causal || d.Tq == d.Tk, op, ": causal attention needs as many queries as keys: q ", q.shape(), ", k ",
             k.shape());
  REEL_CHECK(d.D > 0 && d.Dv > 0 && (d.Tk > 0 || d.Tq == 0), op, ": q ", q.shape(), ", k ", k.shape(), " and v ",
             v.shape(), ": attention needs D > 0, Dv > 0 and at least one key");
  d.BH = shape_numel(d.batch);
  return d;
}

// The (query, key) pairs attention computes: all of them, or with a causal mask the lower triangle.
int64_t attention_pairs(const AttnDims& d, bool causal) {
  return causal ? d.BH * d.Tq * (d.Tq + 1) / 2 : d.BH * d.Tq * d.Tk;
}

// A (..., T, X) operand as the backend kernels take it: rank 4 (B, H, T, X), unit stride along X.
// A rank-4 tensor with that stride is passed as it is, whatever its other strides (the head views
// of a (B, T, 3C) projection are read in place), another rank-4 one is copied contiguous in its
// shape, and other ranks become (1, BH, T, X): every operand of a call splits its heads alike.
Tensor as_heads(const Tensor& t, int64_t BH, int64_t T, int64_t X) {
  if (t.dim() == 4) return t.stride(3) == 1 || X == 1 ? t : untracked::contiguous(t);
  return contiguous_as(t, {1, BH, T, X});
}

// An output of `shape` laid out like the operand `like`: when like is a rank-4 (B, H, T, X) view of
// (B, T, H, X) memory (heads split from a (B, T, C) tensor), the output is too, so merging its
// heads back to (B, T, C) is a view and no copy. Otherwise contiguous.
Tensor empty_laid_out_like(const Tensor& like, const Shape& shape) {
  if (like.dim() == 4 && like.stride(1) < like.stride(2))
    return untracked::transpose(empty({shape[0], shape[2], shape[1], shape[3]}, like.dtype(), like.device()), 1, 2);
  return empty(shape, like.dtype(), like.device());
}

// When q, k and v are the heads of the three thirds of one (B, T, 3C) projection (a split into
// q, k, v: one storage, strides (T 3C, D, 3C, 1), offsets 0, C and 2C from the projection's start),
// their gradients are made the same views of one fresh (B, T, 3C) buffer: the projection's
// gradient is then that buffer (split's backward joins views lying end to end, untracked::joined)
// and no concatenation runs. nullopt for any other layout.
std::optional<AttentionBackward> packed_qkv_gradients(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || k.shape() != q.shape() || v.shape() != q.shape() || q.numel() == 0 ||
      k.storage() != q.storage() || v.storage() != q.storage() || k.strides() != q.strides() ||
      v.strides() != q.strides())
    return std::nullopt;
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), C = H * D;
  const Shape packed_strides{T * 3 * C, D, 3 * C, 1};
  if (q.strides() != packed_strides || k.offset() != q.offset() + C || v.offset() != q.offset() + 2 * C)
    return std::nullopt;
  const Tensor qkv = empty({B, T, 3, H, D}, q.dtype(), q.device());
  auto grad = [&](int64_t i) { return untracked::transpose(untracked::select(qkv, 2, i), 1, 2); };  // (B, H, T, D)
  return AttentionBackward{grad(0), grad(1), grad(2)};
}

// `out` (an output made by empty_laid_out_like) as the backend kernels take it.
Tensor out_heads(const Tensor& out, int64_t BH, int64_t T, int64_t X) {
  return out.dim() == 4 ? out : untracked::view(out, {1, BH, T, X});
}

// The dtype of lse: q's for f32 and f64; f32 (the kernels' acc_t) for bf16 and f16, whose log-sum-exp
// would lose the bits the backward's P = exp(S - lse) needs if it were rounded to 16 bits.
DType lse_dtype(DType q) { return is_16bit_floating(q) ? DType::f32 : q; }

double attention_scale(const std::optional<double>& scale, int64_t D) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
}
}  // namespace

AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                                   bool causal) {
  const char* op = "attention_forward";
  const AttnDims d = check_attention(op, q, k, v, causal);
  AttentionForward r{empty_laid_out_like(q, with_last(rows_of(q.shape()), d.Dv)),
                     empty(rows_of(q.shape()), lse_dtype(q.dtype()), q.device())};
  if (d.BH * d.Tq > 0)
    // S = Q K^T and O = P V over the visible (query, key) pairs: 2 (D + Dv) FLOPs per pair.
    REEL_DEVICE_DISPATCH(q.device(), attention_forward,
                         kernel_cost({&q, &k, &v}, {&r.out, &r.lse}, 2 * attention_pairs(d, causal) * (d.D + d.Dv)),
                         as_heads(q, d.BH, d.Tq, d.D), as_heads(k, d.BH, d.Tk, d.D),
                         as_heads(v, d.BH, d.Tk, d.Dv), attention_scale(scale, d.D), causal,
                         out_heads(r.out, d.BH, d.Tq, d.Dv), untracked::view(r.lse, {d.BH, d.Tq}));
  return r;
}

AttentionBackward attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, std::optional<double> scale,
                                     bool causal) {
  const char* op = "attention_backward";
  const AttnDims d = check_attention(op, q, k, v, causal);
  check_same_device(op, {&q, &dout, &out, &lse});
  check_same_floating_dtype(op, {&q, &dout, &out});
  REEL_CHECK(lse.dtype() == lse_dtype(q.dtype()), op, ": lse ", lse.shape(), " is ", lse.dtype(), " but q ", q.shape(),
             " is ", q.dtype(), ": lse must be ", lse_dtype(q.dtype()), " (f32 for bf16 and f16 q)");
  const Shape out_shape = with_last(rows_of(q.shape()), d.Dv);
  REEL_CHECK(dout.shape() == out_shape && out.shape() == out_shape && lse.shape() == rows_of(q.shape()), op,
             ": dout ", dout.shape(), ", out ", out.shape(), " and lse ", lse.shape(), " do not match q ", q.shape(),
             " and v ", v.shape(), ": ", out_shape, ", ", out_shape, " and ", rows_of(q.shape()), " expected");
  const std::optional<AttentionBackward> packed = packed_qkv_gradients(q, k, v);
  AttentionBackward r = packed ? *packed
                               : AttentionBackward{empty_laid_out_like(q, q.shape()), empty_laid_out_like(k, k.shape()),
                                                   empty_laid_out_like(v, v.shape())};
  if (d.BH == 0 || d.Tk == 0) return r;
  if (d.Tq == 0) {  // no query reads any key: zero gradients
    r.dk.fill_(0.0);
    r.dv.fill_(0.0);
    return r;
  }
  // Per visible pair: S = Q K^T again (2D), dP = dO V^T (2Dv), dV += P^T dO (2Dv), dQ += dS K and
  // dK += dS^T Q (4D).
  REEL_DEVICE_DISPATCH(
      q.device(), attention_backward,
      kernel_cost({&dout, &q, &k, &v, &out, &lse}, {&r.dq, &r.dk, &r.dv}, attention_pairs(d, causal) * (6 * d.D + 4 * d.Dv)),
      as_heads(dout, d.BH, d.Tq, d.Dv), as_heads(q, d.BH, d.Tq, d.D), as_heads(k, d.BH, d.Tk, d.D),
      as_heads(v, d.BH, d.Tk, d.Dv), as_heads(out, d.BH, d.Tq, d.Dv), contiguous_as(lse, {d.BH, d.Tq}),
      attention_scale(scale, d.D), causal, out_heads(r.dq, d.BH, d.Tq, d.D), out_heads(r.dk, d.BH, d.Tk, d.D),
      out_heads(r.dv, d.BH, d.Tk, d.Dv));
  return r;
}

}  // namespace reel::kernels
