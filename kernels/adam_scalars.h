// kernels/adam_scalars.h: the per-step scalars of the Adam/AdamW update, computed once in double
// from (lr, betas, eps, weight_decay, step) by one host/device function that both backends use
// (kernels/cpu/optimizer.cpp and kernels/cuda/optimizer.cu), so their bias correction is the same;
// on the host once per step, or in the CUDA kernel when the step count lives on the device.
//   bias corrections: bc1 = 1 - beta1^step, bc2 = 1 - beta2^step
//   p -= step_size * m / (sqrt(v) * inv_bc2_sqrt + eps),  step_size = lr / bc1,
//   inv_bc2_sqrt = 1 / sqrt(bc2): sqrt(v) * (1 / sqrt(bc2)) where torch divides by sqrt(bc2), one
//   division per element fewer (the slowest instruction of the update), at most an ulp apart.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/philox.h"  // REEL_HOST_DEVICE

namespace reel::kernels {

struct AdamScalars {
  double step_size, inv_bc2_sqrt, one_minus_b1, b2, one_minus_b2, eps, wd, decay;
  bool decoupled;  // AdamW's p *= decay (= 1 - lr * wd); else Adam's L2 form g += wd * p
  char unused[7] = {};  // no padding: every byte a launch passes is a value (kernels::cuda::LaunchLog)
};

// The hyper-parameters adam_scalars takes besides the step: what a kernel that reads the step from
// the device (kernels/optimizer.h: StepControl::steps) computes its scalars from.
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  char unused[7] = {};  // no padding, as AdamScalars
};

REEL_HOST_DEVICE inline AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps,
                                                 double weight_decay, int64_t step, bool decoupled) {
  using std::pow;
  using std::sqrt;
  const double bc1 = 1 - pow(beta1, static_cast<double>(step));
  const double bc2 = 1 - pow(beta2, static_cast<double>(step));
  return {lr / bc1, 1 / sqrt(bc2), 1 - beta1, beta2, 1 - beta2, eps, weight_decay, 1 - lr * weight_decay, decoupled};
}

}  // namespace reel::kernels
