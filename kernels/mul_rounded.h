// kernels/mul_rounded.h: a * b rounded once as a multiply of its own, for the few products whose
// bits must not depend on whether the compiler fused them into an FMA with what follows: the clip
// coefficient's multiply inside an update (kernels/optimizer_rules.h: clipped_grad), the window's
// loss sum (kernels/optimizer.h: accumulate_loss_) and the learning-rate schedule's last step
// (kernels/lr_rule.h), which the host and the update kernels must compute to the same bits.
#pragma once

#include "core/host_device.h"  // REEL_HOST_DEVICE

namespace reel::kernels {

// a * b rounded once, never contracted into an FMA with what follows (the compilers contract
// a * b + c by default, on the host and in nvcc).
template <typename A>
REEL_HOST_DEVICE inline A mul_rounded(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(A) == 4) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
#else
  A r = a * b;
#if defined(__x86_64__) || defined(__i386__)
  asm("" : "+x"(r));  // the product leaves the register as it is: no FMA across this point
#elif defined(__aarch64__)
  asm("" : "+w"(r));
#else
  volatile A v = r;
  r = v;
#endif
  return r;
#endif
}

}  // namespace reel::kernels
