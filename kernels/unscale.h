// The loss scaler's kernels (optim/grad_scaler.h): one fused pass over every gradient of a window
// that multiplies it by 1 / scale in place and finds any inf or NaN, as PyTorch's
// _amp_foreach_non_finite_check_and_unscale_. Gradients in f32, f64, bf16 or f16 (the product is
// computed in acc_t and rounded once to the gradient's type); cpu and cuda. And the device side of
// the scaler, whose decisions then stay on the device (as PyTorch's _amp_update_scale_): its
// state is an f64 (3) tensor, [0] the scale, [1] the clean windows in a row, [2] the skipped
// windows; the unscale reads the scale from it and writes a found_inf flag (i32 (1)) there,
// update_loss_scale_ reads the flag and updates the state, loss_scale_seed_ makes a backward's seed.
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
// The same pass with the scale read on the device: g *= 1 / state[0] (the division in double, as
// the host's 1.0 / scale), and found_inf[0] = 1 when any result is non-finite (never set back to
// 0: zero it first). state and found_inf on the gradients' device. One launch per dtype, no read back.
void unscale_grads_(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf);
// One thread, GradScaler::update's rule on the device: found_inf[0] nonzero: state[2] += 1,
// state[1] = 0, state[0] = max(state[0] * backoff_factor, 1e-30), and skipped_count[0] += 1 (i64 (1),
// or undefined); else state[1] += 1 and, once it reaches growth_interval, state[1] = 0 and
// state[0] *= growth_factor unless that overflows.
void update_loss_scale_(const Tensor& state, const Tensor& found_inf, const Tensor& skipped_count,
                        double growth_factor, double backoff_factor, int64_t growth_interval);
// seed (one element, the loss's dtype) = inv_count * state[0] rounded once to seed's dtype (what
// backward(loss, inv_count * scale) fills), and window_scale (f64 (1), or undefined) = state[0].
void loss_scale_seed_(const Tensor& seed, const Tensor& state, double inv_count, const Tensor& window_scale);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_UNSCALE_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends (kernels/backends.h includes this part inside namespace
// reel::kernels::cpu and reel::kernels::cuda). In place over contiguous tensors, each viewed flat
// (numel); returns whether any result is inf or NaN. The tensors may mix the four floating dtypes.
#ifdef REEL_BACKEND_KERNELS
bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale);
void unscale_grads_(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf);
void update_loss_scale_(const Tensor& state, const Tensor& found_inf, const Tensor& skipped_count,
                        double growth_factor, double backoff_factor, int64_t growth_interval);
void loss_scale_seed_(const Tensor& seed, const Tensor& state, double inv_count, const Tensor& window_scale);
#endif  // REEL_BACKEND_KERNELS
