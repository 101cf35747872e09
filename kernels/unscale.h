// The loss scaler's kernel (optim/grad_scaler.h): one fused pass over every gradient of a window
// that multiplies it by 1 / scale in place and finds any inf or NaN, as PyTorch's
// _amp_foreach_non_finite_check_and_unscale_. Gradients in f32, f64, bf16 or f16 (the product is
// computed in acc_t and rounded once to the gradient's type); cpu and cuda.
//
// The entry point checks its inputs (reel::Error naming the op, the tensor, its shape, dtype and
// device), then runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_UNSCALE_H
#define REEL_KERNELS_UNSCALE_H
#include <vector>

#include "core/tensor.h"

namespace reel::kernels {

// g *= inv_scale for every element of every tensor (defined, floating, contiguous, one device),
// in one pass; returns true when any stored result is inf or NaN (a non-finite gradient stays
// non-finite: inv_scale must be finite and > 0). With inv_scale a power of two the product is
// exact unless it falls below the dtype's smallest normal (f16: 2^-14), where it is rounded once.
// An empty list returns false.
bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_UNSCALE_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends (kernels/backends.h includes this part inside namespace
// reel::kernels::cpu and reel::kernels::cuda). In place over contiguous tensors, each viewed flat
// (numel); returns whether any result is inf or NaN. The tensors may mix the four floating dtypes.
#ifdef REEL_BACKEND_KERNELS
bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale);
#endif  // REEL_BACKEND_KERNELS
