// The differentiable ops of MLPs and transformers: linear, LayerNorm/RMSNorm, softmax, fused
// cross-entropy, embedding and causal attention. Each is one tape op (autograd/ops/<name>.cpp,
// forward and backward side by side) over the kernels of kernels/ops.h, except
// attention_composed, which is built from other ops as a reference.
//
//   Tensor x = embedding(ids, wte);                       // ids (B, T) -> (B, T, C)
//   Tensor y = attention(q, k, v);                        // q, k, v (B, H, T, D), causal
//   Tensor logits = linear(layer_norm(x, g, b), wte);     // (B, T, V), weights tied to wte
//   Tensor loss = cross_entropy(logits, targets);         // targets (B, T), mean over tokens
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "autograd/functions.h"
#include "core/tensor.h"

namespace reel {

// ---- linear (autograd/ops/linear.cpp) ----
// x (..., in) @ W^T + b: W (out, in) as torch.nn.Linear stores it, b (out) or undefined (no bias).
// One GEMM over all rows of x; the bias gradient is a column sum of the output gradient.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- normalisation over the last dim (autograd/ops/layernorm.cpp) ----
// y = (x - mean) / sqrt(var + eps) * weight + bias, var biased; weight, bias (C) for x (..., C);
// bias may be undefined (no bias). RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight.
// Both save x and the row statistics (mean, rstd), not the output.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// ---- softmax and log-softmax (autograd/ops/softmax.cpp) ----
// Along `dim` (the last by default; another dim goes through a transpose); both save the output.
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

// ---- cross-entropy (autograd/ops/cross_entropy.cpp) ----
// logits (N..., V) with classes along the LAST dim, targets (N...) i32 or i64 in [0, V) or equal to
// ignore_index. reduction "mean" (over the targets not ignored), "sum" or "none" (per-row losses,
// 0 where ignored). With every target ignored, "mean" gives loss 0 and zero gradients, not NaN
// (see kernels/cross_entropy.h: an all-padding micro-batch adds nothing to its accumulation window).
// Fused: one pass over the logits computes the loss and, when logits need a gradient, dlogits too.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     const std::string& reduction = "mean");

// ---- embedding (autograd/ops/embedding.cpp) ----
// table[ids]: ids (N...) i32 or i64 in [0, V), table (V, C) -> (N..., C). The table's gradient is
// summed per row in position order (deterministic, no atomics).
Tensor embedding(const Tensor& ids, const Tensor& table);

// ---- scaled-dot-product attention (autograd/ops/attention.cpp) ----
// softmax(q k^T * scale + mask) v for q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), e.g. (B, H,
// T, D); scale defaults to 1/sqrt(D); causal: query i sees keys j <= i (needs Tq == Tk).
// attention: the fused flash-style kernel. Saves q, k, v, out and the row log-sum-exp (B, H, T);
//   backward recomputes the probabilities, so no (T, T) matrix is ever kept.
// attention_composed: the same from matmul, mul, add (a constant -inf mask), softmax and matmul,
//   saving the (T, T) probabilities: the reference the fused op is tested against.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                 std::optional<double> scale = std::nullopt);
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                          std::optional<double> scale = std::nullopt);

}  // namespace reel
