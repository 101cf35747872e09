// The kernel entry points of the neural-network op families: LayerNorm/RMSNorm, softmax and
// log-softmax, fused cross-entropy, embedding, max with argmax, causal flash-style attention,
// and the optimizer updates. Plain kernels, forward AND backward, no autograd: the tape (in
// autograd/) decides what to save and calls the backward kernels with it.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes inputs contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the device kernel (kernels/cpu/nn_kernels.h, kernels/cuda/nn_kernels.h).
// Floating tensors are f32 or f64 (all of one dtype per call); index tensors (token ids,
// targets) are i32 or i64.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel::kernels {

// ---- LayerNorm / RMSNorm over the last dim ----------------------------------------------------
// x (N..., C), w (C), b (C). mean and rstd have the rows' shape (N...) and x's dtype; they are
// what backward needs, so the tape saves them instead of recomputing the row statistics.
//   LayerNorm: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased (/ C)
//   RMSNorm:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
struct LayerNormForward { Tensor y, mean, rstd; };   // (N..., C), (N...), (N...)
struct LayerNormBackward { Tensor dx, dw, db; };     // (N..., C), (C), (C)
struct RMSNormForward { Tensor y, rstd; };           // (N..., C), (N...)
struct RMSNormBackward { Tensor dx, dw; };           // (N..., C), (C)

LayerNormForward layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);
// dy (N..., C); x, w, mean, rstd as saved by the forward. dw and db are summed over all rows in
// a fixed order (fixed row chunks, partials added in chunk order): bit-identical run to run and
// for any number of threads.
LayerNormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd);
RMSNormForward rmsnorm_forward(const Tensor& x, const Tensor& w, double eps = 1e-6);
RMSNormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);

// ---- softmax / log-softmax along the last dim (max-subtracted) -------------------------------
// x (N..., C) -> y (N..., C). Backward takes the saved OUTPUT y, not x:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
Tensor softmax_forward(const Tensor& x);
Tensor log_softmax_forward(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

// ---- fused cross-entropy over logits with integer targets ------------------------------------
enum class Reduction { None, Mean, Sum };
const char* reduction_name(Reduction r);
Reduction parse_reduction(const std::string& name);  // "none" | "mean" | "sum", else reel::Error

struct CrossEntropyForward {
  Tensor loss;     // Mean/Sum: a scalar (); None: the per-row losses (N...)
  Tensor losses;   // (N...) per-row loss lse - logit[target], 0 for ignored rows
  Tensor lse;      // (N...) log-sum-exp of each row: what backward needs, instead of the softmax
  Tensor dlogits;  // (N..., V) when a fused grad_scale was given, else undefined
  int64_t count = 0;  // rows whose target is not ignore_index (the Mean divisor)
};
// logits (N..., V) floating, classes along the LAST dim (llm.c's layout; PyTorch puts them in
// dim 1); targets (N...) i32 or i64, each in [0, V) or equal to ignore_index.
//   Mean averages over the non-ignored rows. When every row is ignored the mean is 0, not NaN as
//   in PyTorch: in an accumulation window a micro-batch that is all padding must add nothing to
//   the window's loss and gradients, not poison the sum with NaN.
// One pass per row computes the max and the log-sum-exp online (blockwise rescaling) and never
// materialises the probability matrix. With grad_scale set it also writes, in the same sweep,
//   dlogits[row] = (softmax(row) - onehot(target)) * g,   0 for ignored rows,
// where g = grad_scale / count for Mean and grad_scale for Sum and None (for None that is the
// gradient of the SUM of the per-row losses), i.e. the llm.c fused classifier: backward is free.
// Out-of-range targets and non-integer targets raise reel::Error (naming the value and row).
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                                          std::optional<double> grad_scale = std::nullopt);
// dloss: for None the per-row gradient (N...); for Mean/Sum the scalar gradient (one element).
// lse from the forward. Returns dlogits (N..., V): softmax recomputed as exp(logit - lse).
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);

// ---- embedding -------------------------------------------------------------------------------
// ids (N...) i32 or i64 in [0, V), table (V, C) floating -> out (N..., C) = table[ids].
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
// dout (N..., C), ids (N...) -> dtable (V, C): row v = sum of dout rows at the positions where
// ids == v, added in position order. Deterministic: no float atomics, the result is
// bit-identical for any number of threads (see kernels/cpu/embedding.cpp for the strategy).
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings);

// ---- max along an axis with argmax -----------------------------------------------------------
// x (..., A, ...) -> values and indices (i64) with the axis dropped (or kept as size 1 when
// keepdim). The index of the first maximum; a NaN is the maximum (the first NaN wins), as in
// torch.max(x, dim).
struct MaxWithIndices { Tensor values, indices; };
MaxWithIndices max_with_indices(const Tensor& x, int64_t axis, bool keepdim = false);
// dy and indices with the shape of values (keepdim or not: read from dy's rank) -> dx of
// input_shape: zero except dx[..., indices, ...] = dy (a scatter along `axis`).
Tensor max_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape, int64_t axis);

// ---- scaled-dot-product attention, flash-style -----------------------------------------------
// q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); any number of leading batch dims, equal in
// q, k and v. scale defaults to 1/sqrt(D). causal: query i sees keys j <= i (needs Tq == Tk).
// Key tiles are processed with an online softmax, so the extra memory is O(T) per (b, h) (the
// running max/sum and one tile of scores), never the T x T matrix.
struct AttentionForward { Tensor out, lse; };  // out (B, H, Tq, Dv), lse (B, H, Tq)
struct AttentionBackward { Tensor dq, dk, dv; };
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   std::optional<double> scale = std::nullopt, bool causal = true);
// FlashAttention-2 backward: probabilities recomputed from the saved lse, P = exp(S - lse);
// Di = rowsum(dout * out); dS = P * (dP - Di). dout, out (B, H, Tq, Dv), lse (B, H, Tq).
AttentionBackward attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, std::optional<double> scale = std::nullopt,
                                     bool causal = true);

// ---- optimizer updates (in place, over a flat list of parameters) -----------------------------
// Each params[i] has grads[i] and its state tensors of the same shape, dtype and device; all are
// contiguous. The tensors are updated in place; nothing is allocated.
//
// SGD as torch.optim.SGD: g = grad + weight_decay * p; with momentum, buf = g on step 1 and
// buf = momentum * buf + (1 - dampening) * g after; g = nesterov ? g + momentum * buf : buf;
// p -= lr * g. momentum_bufs may be empty when momentum == 0. step counts from 1.
void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step);
// AdamW as torch.optim.AdamW (decoupled: p *= 1 - lr * weight_decay, then the Adam step); with
// decoupled_weight_decay = false it is torch.optim.Adam's L2 form (g += weight_decay * p).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).   step counts from 1.
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay = true);
// sqrt of the sum of squares of every element of every tensor, accumulated in double in a fixed
// order (deterministic for any number of threads). Non-finite gradients give inf or NaN.
double global_grad_norm(const std::vector<Tensor>& grads);
// t *= factor for every tensor (gradient clipping: factor = max_norm / (norm + 1e-6) when < 1).
void scale_(const std::vector<Tensor>& tensors, double factor);

}  // namespace reel::kernels
