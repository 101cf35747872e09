// Device dispatch of the kernel entry points: REEL_DEVICE_DISPATCH(device, FN, args...) calls
// kernels::cpu::FN(args...) or kernels::cuda::FN(args...) (declared once for both in
// kernels/backends.h) for the device the (already validated) tensors live on. It is an
// expression with the kernel's value (void or not), so an entry point never branches on the
// device by hand:
//   REEL_DEVICE_DISPATCH(x.device(), softmax_forward, xr, log, yr);
//   const double ss = REEL_DEVICE_DISPATCH(device, sum_of_squares, tensors);
#pragma once
#include "core/device.h"
#include "core/error.h"
#include "kernels/backends.h"

namespace reel::kernels::detail {
// reel::Error unless `device` is the cpu: the only device of a build without a CUDA backend.
inline void require_cpu_only_build(Device device, const char* fn) {
  REEL_CHECK(device.is_cpu(), fn, ": this build has no CUDA backend");
}
}  // namespace reel::kernels::detail

#if defined(REEL_HAS_CUDA_BACKEND)
#define REEL_DEVICE_DISPATCH(device, FN, ...) \
  ((device).is_cpu() ? ::reel::kernels::cpu::FN(__VA_ARGS__) : ::reel::kernels::cuda::FN(__VA_ARGS__))
#else
#define REEL_DEVICE_DISPATCH(device, FN, ...) \
  (::reel::kernels::detail::require_cpu_only_build((device), #FN), ::reel::kernels::cpu::FN(__VA_ARGS__))
#endif
