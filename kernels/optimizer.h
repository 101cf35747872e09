// The optimizer family: in-place SGD and AdamW updates over flat lists of parameters, the
// global gradient norm and the scaling that clipping applies, and the window's device-side
// scalars (the norm with its clip coefficient and non-finite flag, the loss sum) that let
// optim::Accumulator decide a step without reading anything back to the host. Used by optim/,
// never by the tape.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_OPTIMIZER_H
#define REEL_KERNELS_OPTIMIZER_H
#include <vector>

#include "core/tensor.h"
#include "kernels/lr_rule.h"

namespace reel::kernels {

// What an update reads from the device instead of the host (optim/accumulator.h's window, as
// PyTorch's fused optimizers read found_inf): each tensor on the params' device, or undefined
// (not used). The default (all undefined, no schedule) is the plain update.
//   coef      f64 (1): every gradient is first multiplied by coef[0] in acc_t and rounded once to
//             its dtype, exactly as scale_(grads, coef) before the update would (clipping's
//             coefficient: global_grad_norm_'s out[1]); the .grad buffers are not written.
//   found_inf i32 (1): nonzero skips the update: params and state are not written.
//   steps     i64 (1): the step count before this update (the `step` argument is then ignored; the
//             update runs at steps[0] + 1). The update advances it itself, once whatever the
//             number of its launches (dtypes, long lists): on cuda the first launch's last block
//             writes steps[0] + 1 once every block has read steps[0] (kernels/cuda/last_block.h),
//             and its later launches read the advanced count; skipped, it stays as it was. So a
//             step's kernels take the same by-value arguments every step and need no copy after.
//   lr        f64 (1): the learning rate, read on the device (the `lr` argument is then ignored), so
//             that a schedule's new rate each step reaches no kernel by value (docs/design.md,
//             "Replay-safe steps"); whatever the step depends on (Adam's step size) is computed
//             from it on the device, with the host's function (kernels/adam_scalars.h).
//   schedule  kind other than LrRule::kNone (needs steps): the rate is kernels::scheduled_lr
//             (kernels/lr_rule.h) at the step count read (0-based: steps[0] before the update),
//             computed on the device by the host schedule's function: no copy of the rate at all
//             (lr and the argument are then ignored).
struct StepControl {
  Tensor coef, found_inf, steps;
  Tensor lr = Tensor();
  LrRule schedule = LrRule{};
};

// Each params[i] has grads[i] of the same shape, dtype and device, and its state tensors (momentum
// buffers, moments) of the same shape and device in acc_dtype(params[i].dtype()): f32 and f64
// parameters keep state in their own type; bf16 and f16 parameters (a model held in 16 bits, as
// Module::to gives) keep it in f32, and their update is computed in f32 and rounded once to the
// parameter's type. All are contiguous; a list may mix dtypes. The tensors are updated in place;
// nothing is allocated.
//
// SGD as torch.optim.SGD: g = grad + weight_decay * p; with momentum, buf = g on step 1 and
// buf = momentum * buf + (1 - dampening) * g after; g = nesterov ? g + momentum * buf : buf;
// p -= lr * g. momentum_bufs may be empty when momentum == 0. step counts from 1.
void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step, const StepControl& control = {});
// AdamW as torch.optim.AdamW (decoupled: p *= 1 - lr * weight_decay, then the Adam step); with
// decoupled_weight_decay = false it is torch.optim.Adam's L2 form (g += weight_decay * p).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).   step counts from 1.
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay = true,
                  const StepControl& control = {});
// sqrt of the sum of squares of every element of every tensor (f32, f64, bf16, f16), accumulated in
// double in a fixed order (deterministic for any number of threads). Non-finite gradients give inf or NaN.
double global_grad_norm(const std::vector<Tensor>& grads);
// t *= factor for every tensor (gradient clipping: factor = max_norm / (norm + 1e-6) when < 1),
// computed in acc_t and rounded once to the tensor's type.
void scale_(const std::vector<Tensor>& tensors, double factor);
// global_grad_norm without the read back: out (f64 (2), on the grads' device) gets
// out[0] = the norm and out[1] = clipping's coefficient for max_norm, max_norm / (norm + 1e-6)
// when that is below 1 and 1 otherwise (NaN too: a NaN norm clips nothing, as clip_grad_norm);
// 1 when max_norm is 0 (no clipping). found_inf (i32 (1), or undefined): with set_found, set to
// whether the norm is not finite (the non-finite check of a skip decision); either way, when it is
// nonzero afterwards, out[0] = 0 (a skipped window reports no norm) and out[1] = 1, and
// skipped_count (i64 (1), or undefined) is incremented. One launch per dtype (and per 64 tensors)
// on cuda, the sum and the rest done by the last one's last block, as global_grad_norm's sum is:
// the same norm bit for bit.
void global_grad_norm_(const std::vector<Tensor>& grads, const Tensor& out, double max_norm, const Tensor& found_inf,
                       bool set_found, const Tensor& skipped_count = Tensor());
// sum (f64 (1)) = (first ? 0 : sum) + double(value) * scale, on value's device: the window's
// loss, summed over its micro-batches on the device (value: any floating dtype, one element).
void accumulate_loss_(const Tensor& sum, const Tensor& value, double scale, bool first);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_OPTIMIZER_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/optimizer.cpp) and reel::kernels::cuda (kernels/cuda/optimizer.cu).
// Inputs arrive validated by the entry points (kernels/optimizer.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
// In place over lists of same-shape contiguous tensors; state lists in acc_dtype of the params'.
// StepControl's tensors, when defined, are on the params' device (checked).
#ifdef REEL_BACKEND_KERNELS
void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step, const StepControl& control);
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay, const StepControl& control);
double sum_of_squares(const std::vector<Tensor>& tensors);  // accumulated in double, fixed order
void scale_(const std::vector<Tensor>& tensors, double factor);
// out (f64 (2)), found_inf (i32 (1) or undefined), skipped_count (i64 (1) or undefined): as the entry point.
void grad_norm_device(const std::vector<Tensor>& tensors, const Tensor& out, double max_norm, const Tensor& found_inf,
                      bool set_found, const Tensor& skipped_count);
void accumulate_loss_(const Tensor& sum, const Tensor& value, double scale, bool first);  // sum f64 (1), value (1)
#endif  // REEL_BACKEND_KERNELS
