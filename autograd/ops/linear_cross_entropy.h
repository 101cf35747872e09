// linear_cross_entropy: an LM head and its cross-entropy fused and chunked, so that the (N, V)
// logits and their gradient never exist whole (Liger-Kernel's FusedLinearCrossEntropy).
//   loss = cross_entropy(h W^T + b, targets)      h (N..., C), W (V, C), b (V) or none, targets (N...)
// Forward walks the N rows in chunks of R rows (h_c (R, C), t_c (R)):
//   logits_c  = h_c W^T + b                       (R, V)  one GEMM (kernels::matmul: oneDNN/Eigen, cuBLAS)
//   losses_c, dlogits_c                           (R), (R, V)  the fused kernel of kernels/cross_entropy.h,
//                                                 dlogits_c scaled by 1/count, count = the targets not
//                                                 ignored over ALL N rows (counted before the first chunk)
//   dh_c      = dlogits_c W                       (R, C)  written into its rows of dh
//   dW       += dlogits_c^T h_c                   (V, C)  one GEMM accumulating (beta = 1)
//   db       += column sums of dlogits_c          (V)
// then frees logits_c and dlogits_c before the next chunk. The loss is the per-row losses summed
// in f64 in row order (on the host) times 1/count ("mean") or 1 ("sum").
//
// What is saved, and why: dh and dW (and db) for d(loss) = 1; backward multiplies each in place
// by the incoming scalar gradient (no (V, C) temporary) and hands it on (for backward(loss), a
// seed of 1 taken as a number, Op::accepts_host_seed, it multiplies nothing: no launch). Neither the logits nor h nor W are kept. Memory for N rows, C
// features, V classes, f32 (GPT-2 small: N = B*T = 8*1024, C = 768, V = 50257):
//   linear + cross_entropy:  saves h (N*C, often another node's save already) and W (a parameter),
//                            plus cross_entropy's dlogits N*V*4 = 1.53 GiB; the logits N*V*4 =
//                            1.53 GiB exist too while the caller holds them (at least in forward);
//   linear_cross_entropy:    saves dh N*C*4 = 24 MiB and dW V*C*4 = 147 MiB (+ db V*4);
//                            transient: one chunk's logits and dlogits, 2*R*V*4 (64 MiB at the
//                            default R), and the chunk's losses and lse.
// The saves win when V >> C: for V < C (a character GPT) dh (N, C) is larger than dlogits (N, V).
// The default chunk R makes one chunk's logits about 32 MiB (R = 32 MiB / (V * element size),
// 166 rows for GPT-2 in f32), at least one row. The FLOPs are the unfused op's: three GEMMs of
// 2*N*V*C each and one pass over the logits; only their order changes (dh and dW move from
// backward into forward), so a backward that never comes (a validation pass in grad mode) costs
// the two gradient GEMMs. What chunking adds is traffic: each chunk's dW GEMM reads and writes all
// of dW, 2*V*C element sizes per chunk (ceil(N / R) chunks), and has an inner dimension of only R. In eval or under NoGrad, when no input needs a gradient, and inside a
// collapsed checkpoint segment (ForwardCtx::keeps_saves is false; the replay recomputes), the
// forward computes the loss alone: one GEMM and the loss sweep per chunk, no gradient.
// Reduction "none" is not supported: its backward scales each row by its own gradient, which
// needs dlogits (N, V) again, the very memory this op exists to avoid (use linear + cross_entropy).
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/cross_entropy.h"
#include "kernels/index_check.h"
#include "kernels/ops.h"

namespace reel {
namespace autograd::ops {

// Rows per chunk: `chunk_rows` when positive, else as many as make one chunk's logits about
// 32 MiB (at least 1). Never more than n (0 for n = 0).
inline int64_t lce_chunk_rows(int64_t chunk_rows, int64_t n, int64_t v, DType dtype) {
  const int64_t bytes_per_row = std::max<int64_t>(1, v * static_cast<int64_t>(dtype_size(dtype)));
  const int64_t rows = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, (int64_t{32} << 20) / bytes_per_row);
  return std::min(rows, n);
}

// Inputs: h (N..., C), W (V, C), targets (N...), and b (V) when there is a bias.
struct LinearCrossEntropy final : autograd::Op {
  kernels::Reduction reduction;  // Mean or Sum
  int64_t ignore_index;
  int64_t chunk_rows;  // 0: the 32 MiB default
  LinearCrossEntropy(kernels::Reduction reduction, int64_t ignore_index, int64_t chunk_rows)
      : reduction(reduction), ignore_index(ignore_index), chunk_rows(chunk_rows) {}
  const char* name() const override { return "linear_cross_entropy"; }
  // Remade only at three GEMMs' cost: a selective checkpoint keeps it (its saves are none of its
  // inputs, so it keeps dh and dW and never runs again).
  bool kept_by_selective() const override { return true; }
  std::string attributes() const override {
    return std::string("reduction=") + kernels::reduction_name(reduction) +
           " ignore_index=" + std::to_string(ignore_index) + " chunk_rows=" + std::to_string(chunk_rows);
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    const Tensor& w = in[1];
    const Tensor bias = in.size() == 4 ? in[3] : Tensor();
    const int64_t C = w.size(1), V = w.size(0);
    const int64_t N = in[2].numel();
    const Tensor h = in[0].reshape({N, C});                  // (N, C), a view where strides allow
    const Tensor targets_nd = in[2].contiguous();            // (N...)
    const Tensor targets = targets_nd.reshape({N});          // (N)
    // The mean's divisor over every row, before the first chunk (each chunk's kernel would count
    // only its own rows); this also checks every target before any GEMM runs.
    const int64_t count = kernels::check_range(
        {"linear_cross_entropy", "target", V, ignore_index, "of the classes"}, targets_nd);
    const double row_scale =
        reduction == kernels::Reduction::Mean ? (count > 0 ? 1.0 / static_cast<double>(count) : 0.0) : 1.0;
    const bool keep = ctx.keeps_saves();
    const bool want_dh = keep && ctx.needs_input_grad(0);
    const bool want_dw = keep && ctx.needs_input_grad(1);
    const bool want_db = keep && bias.defined() && ctx.needs_input_grad(3);
    const bool fused = want_dh || want_dw || want_db;
    Tensor dh = want_dh ? empty({N, C}, h.dtype(), h.device()) : Tensor();  // (N, C)
    Tensor dw = want_dw ? zeros({V, C}, w.dtype(), w.device()) : Tensor();  // (V, C), zeros for N = 0
    Tensor db = want_db ? zeros({V}, w.dtype(), w.device()) : Tensor();     // (V)
    Tensor losses = empty({N}, h.dtype(), h.device());                      // (N) per-row losses
    const int64_t R = lce_chunk_rows(chunk_rows, N, V, h.dtype());
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t rows = std::min(R, N - r0);
      const Tensor h_c = h.narrow(0, r0, rows);                                   // (R, C)
      const Tensor logits_c = kernels::matmul(h_c, w, false, true, bias);         // (R, V)
      // "none" per chunk: the per-row losses, and dlogits scaled by grad_scale alone (row_scale).
      kernels::CrossEntropyForward f =
          kernels::cross_entropy_forward(logits_c, targets.narrow(0, r0, rows), kernels::Reduction::None,
                                         ignore_index, fused ? std::optional<double>(row_scale) : std::nullopt);
      losses.narrow(0, r0, rows).copy_(f.losses);
      if (!fused) continue;
      if (want_dh) kernels::matmul_into_(dh.narrow(0, r0, rows), f.dlogits, w, false, false, false);  // (R, C)
      if (want_dw) kernels::matmul_into_(dw, f.dlogits, h_c, true, false, true);                     // (V, C) +=
      if (want_db) kernels::sum_into_(db, f.dlogits, {0}, true);                                      // (V) +=
    }
    // N doubles added in row order on the host (cross_entropy's own reduction stays on the
    // device, in kernels/cross_entropy.h's lane order; this op reads the count back anyway).
    double total = 0;
    if (N > 0)
      for (double l : losses.to(DType::f64).contiguous().to_vector<double>()) total += l;
    // slot 0: dh (N..., C), slot 1: dW (V, C), slot 2: db (V); each for d(loss) = 1
    if (fused) ctx.save({want_dh ? dh.view(in[0].shape()) : Tensor(), dw, db});
    return {scalar_tensor(total * row_scale, h.dtype(), h.device())};
  }
  // backward(loss, s) hands s over as a number: for s = 1 the saves are the gradients, no launch.
  bool accepts_host_seed(size_t /*k*/) const override { return true; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    // Each save scaled in place by the loss's gradient g () and handed on as the gradient: the
    // saves are this node's own, read once (unpacked once, version-checked at that unpack, freed
    // after this rule), and a fresh product would add a (V, C) temporary at the very start of
    // backward, when every activation is still alive. The tape never writes into a gradient it
    // receives (sums are out of place, a leaf's .grad is a copy), so handing a save on is safe.
    const std::optional<double> s = ctx.host_grad(0);  // the seed as a number (accepts_host_seed)
    Tensor g = s ? Tensor() : grad[0];
    auto scaled = [&](size_t slot) {
      Tensor t = ctx.saved(slot);
      if (s && *s == 1.0) return t;  // t * 1 is t, bit for bit: nothing to launch
      // The fill the tape would have made, here once (the saves have the loss's dtype and device).
      if (!g.defined()) g = full({}, *s, t.dtype(), t.device());
      kernels::binary_(kernels::BinaryOp::Mul, t, g);
      return t;
    };
    Tensors grads(ctx.num_inputs());
    if (ctx.needs_input_grad(0)) grads[0] = scaled(0);  // (N..., C)
    if (ctx.needs_input_grad(1)) grads[1] = scaled(1);  // (V, C)
    if (grads.size() == 4 && ctx.needs_input_grad(3)) grads[3] = scaled(2);  // (V)
    return grads;
  }
};

}  // namespace autograd::ops

// ---- linear + cross-entropy, fused and chunked ----
// cross_entropy(linear(h, weight, bias), targets, ignore_index, reduction) without the (N..., V)
// logits or their gradient: h (N..., C) floating, weight (V, C) as torch.nn.Linear stores it (an LM
// head, or the token embedding it is tied to), bias (V) or undefined (none), targets (N...) i32 or
// i64 in [0, V) or equal to ignore_index; reduction "mean" (over the targets not ignored; 0 when
// all are) or "sum" ("none" raises). chunk_rows: rows per chunk, 0 for about 32 MiB of logits per
// chunk. Returns the scalar loss; saves d(loss)/dh and d(loss)/dW (+ db) computed in forward.
inline Tensor linear_cross_entropy(const Tensor& h_in, const Tensor& weight_in, const Tensor& targets,
                                   int64_t ignore_index = -100, const std::string& reduction = "mean",
                                   int64_t chunk_rows = 0, const Tensor& bias_in = Tensor()) {
  const autograd::Tensors cast = autograd::autocast("linear_cross_entropy", {h_in, weight_in, bias_in});
  const Tensor &h = cast[0], &weight = cast[1], &bias = cast[2];
  const char* op = "linear_cross_entropy";
  REEL_CHECK(h.defined() && weight.defined() && targets.defined(), op, ": h, weight and targets must be defined");
  REEL_CHECK(reduction != "none", op, ": reduction \"none\" is not supported (its backward needs the (N, V) ",
             "dlogits this op avoids); use cross_entropy(linear(h, weight), targets, ignore_index, \"none\")");
  const kernels::Reduction red = kernels::parse_reduction(reduction);
  REEL_CHECK(chunk_rows >= 0, op, ": chunk_rows ", chunk_rows, " must be >= 0 (0: about 32 MiB of logits a chunk)");
  REEL_CHECK(is_floating(h.dtype()), op, ": h ", h.shape(), " is ", h.dtype(), ": a floating dtype expected");
  REEL_CHECK(weight.dim() == 2 && weight.size(0) > 0 && h.dim() >= 1 && h.size(-1) == weight.size(1), op, ": h ",
             h.shape(), " and weight ", weight.shape(), " do not match: h (N..., C) and weight (V, C), V > 0, expected");
  for (const Tensor* t : {&weight, &bias})
    REEL_CHECK(!t->defined() || (t->dtype() == h.dtype() && t->device() == h.device()), op, ": h ", h.shape(), " ",
               h.dtype(), " on ", h.device(), " and ", t == &weight ? "weight " : "bias ", t->shape(), " ",
               t->dtype(), " on ", t->device(), ": one dtype and device expected");
  if (bias.defined())
    REEL_CHECK(bias.shape() == Shape{weight.size(0)}, op, ": bias ", bias.shape(), " does not match weight ",
               weight.shape(), ": (", weight.size(0), ") expected");
  REEL_CHECK(targets.device() == h.device(), op, ": targets ", targets.shape(), " on ", targets.device(),
             " and h ", h.shape(), " on ", h.device(), ": one device expected");
  kernels::check_index_dtype(op, "targets", targets);
  REEL_CHECK(targets.shape() == Shape(h.shape().begin(), h.shape().end() - 1), op, ": h ", h.shape(),
             " and targets ", targets.shape(), " do not match: targets of shape ",
             Shape(h.shape().begin(), h.shape().end() - 1), " expected (one class index per row of h)");
  autograd::ops::LinearCrossEntropy lce(red, ignore_index, chunk_rows);
  if (bias.defined()) return autograd::apply(std::move(lce), {h, weight, targets, bias});
  return autograd::apply(std::move(lce), {h, weight, targets});
}

}  // namespace reel
