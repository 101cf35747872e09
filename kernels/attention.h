// The attention family: causal scaled-dot-product attention, flash-style (online softmax over
// key tiles, never the T x T matrix), forward and FlashAttention-2 backward. Plain kernels, no
// autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_ATTENTION_H
#define REEL_KERNELS_ATTENTION_H
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
#endif  // REEL_KERNELS_ATTENTION_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/attention.cpp) and reel::kernels::cuda (kernels/cuda/attention.cu).
// Inputs arrive validated by the entry points (kernels/attention.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
// The CUDA kernels take D and Dv at most 128.
#ifdef REEL_BACKEND_KERNELS
void attention_forward(const Tensor& q,   // (BH, Tq, D)
                       const Tensor& k,   // (BH, Tk, D)
                       const Tensor& v,   // (BH, Tk, Dv)
                       double scale, bool causal,
                       const Tensor& out, // (BH, Tq, Dv) out
                       const Tensor& lse);// (BH, Tq) out
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, double scale, bool causal,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv);  // outs like q, k, v
#endif  // REEL_BACKEND_KERNELS
