// The attention family: causal scaled-dot-product attention, flash-style (online softmax over
// key tiles, never the T x T matrix), forward and FlashAttention-2 backward. Plain kernels, no
// autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (kernels/attention_backend.h) on cpu or cuda.
#pragma once
#include <optional>

#include "core/tensor.h"

namespace reel::kernels {

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

}  // namespace reel::kernels
