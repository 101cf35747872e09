// The attention family: causal scaled-dot-product attention, flash-style (online softmax over
// key tiles, never the T x T matrix), forward and FlashAttention-2 backward. Plain kernels, no
// autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), reads them in place when they are (B, H, T, X) with unit stride along X (else copies them
// contiguous), allocates the outputs on the inputs' device, laid out like the inputs (heads split
// from a (B, T, C) tensor give outputs whose heads merge back without a copy), and runs the backend
// kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_ATTENTION_H
#define REEL_KERNELS_ATTENTION_H
#include <optional>

#include "core/tensor.h"

namespace reel::kernels {

// q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); any number of leading batch dims, equal in
// q, k and v. scale defaults to 1/sqrt(D). causal: query i sees keys j <= i (needs Tq == Tk).
// Key tiles are processed with an online softmax, so the extra memory is O(T) per (b, h) (the
// running max/sum and one tile of scores), never the T x T matrix. (The cpu's bf16 and f16 kernels
// widen one (b, h)'s K and V into f32 scratch per thread instead and take a row's keys in one
// softmax: O(T (D + Dv)) per thread, still never T x T.)
// Dtypes: q, k, v (and dout, out) one floating dtype; the outputs are in it too, except lse, which is
// f32 for bf16 and f16 inputs (the softmax statistics stay in f32: acc_t). 16-bit operands are
// widened to f32 on load, every score, softmax and product is f32, and each output element is
// rounded once to the 16-bit type.
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
// Inputs arrive validated by the entry points (kernels/attention.cpp); see kernels/backends.h for
// the common contract. Layout: q, k, v, out, dout, dq, dk and dv are rank 4, (B, H, T, X), with
// unit stride along X and any strides on B, H and T (element (b, h, t, x) at
// data + b*stride(0) + h*stride(1) + t*stride(2) + x): the head views of one (B, T, 3C) projection
// are read in place, and outputs come as (B, T, H, X) memory seen as (B, H, T, X) when the inputs
// were such views. lse is contiguous (B*H, Tq), acc_t: q's dtype, or f32 for bf16 and f16 q. Outputs overlap neither each other nor the inputs.
// The CUDA kernels take D and Dv at most 128.
#ifdef REEL_BACKEND_KERNELS
void attention_forward(const Tensor& q,   // (B, H, Tq, D)
                       const Tensor& k,   // (B, H, Tk, D)
                       const Tensor& v,   // (B, H, Tk, Dv)
                       double scale, bool causal,
                       const Tensor& out, // (B, H, Tq, Dv) out
                       const Tensor& lse);// (B*H, Tq) out, acc_t
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, double scale, bool causal,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv);  // outs like q, k, v
#endif  // REEL_BACKEND_KERNELS
