// The optimizer family: in-place SGD and AdamW updates over flat lists of parameters, the
// global gradient norm and the scaling that clipping applies. Used by optim/, never by the tape.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_OPTIMIZER_H
#define REEL_KERNELS_OPTIMIZER_H
#include <vector>

#include "core/tensor.h"

namespace reel::kernels {

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
                double weight_decay, bool nesterov, int64_t step);
// AdamW as torch.optim.AdamW (decoupled: p *= 1 - lr * weight_decay, then the Adam step); with
// decoupled_weight_decay = false it is torch.optim.Adam's L2 form (g += weight_decay * p).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).   step counts from 1.
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay = true);
// sqrt of the sum of squares of every element of every tensor (f32, f64, bf16, f16), accumulated in
// double in a fixed order (deterministic for any number of threads). Non-finite gradients give inf or NaN.
double global_grad_norm(const std::vector<Tensor>& grads);
// t *= factor for every tensor (gradient clipping: factor = max_norm / (norm + 1e-6) when < 1),
// computed in acc_t and rounded once to the tensor's type.
void scale_(const std::vector<Tensor>& tensors, double factor);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_OPTIMIZER_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/optimizer.cpp) and reel::kernels::cuda (kernels/cuda/optimizer.cu).
// Inputs arrive validated by the entry points (kernels/optimizer.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
// In place over lists of same-shape contiguous tensors; state lists in acc_dtype of the params'.
#ifdef REEL_BACKEND_KERNELS
void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step);
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay);
double sum_of_squares(const std::vector<Tensor>& tensors);  // accumulated in double, fixed order
void scale_(const std::vector<Tensor>& tensors, double factor);
#endif  // REEL_BACKEND_KERNELS
