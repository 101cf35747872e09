// Device dispatch shared by the kernel entry points: runs kernels::cpu::FN or kernels::cuda::FN
// for the device the (already validated) tensors live on.
#pragma once
#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_kernels.h"
#define REEL_DEVICE_DISPATCH(device, FN, ...)         \
  do {                                                \
    if ((device).is_cpu()) ::reel::kernels::cpu::FN(__VA_ARGS__);  \
    else ::reel::kernels::cuda::FN(__VA_ARGS__);                    \
  } while (0)
#else
#define REEL_DEVICE_DISPATCH(device, FN, ...)                                       \
  do {                                                                              \
    REEL_CHECK((device).is_cpu(), #FN ": this build has no CUDA backend");          \
    ::reel::kernels::cpu::FN(__VA_ARGS__);                                          \
  } while (0)
#endif

namespace reel::kernels {
// reel::Error unless every tensor is on the first one's device: names op, shapes and devices.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
// reel::Error unless every tensor has the first one's floating dtype.
void check_same_floating_dtype(const char* op, std::initializer_list<const Tensor*> tensors);
}  // namespace reel::kernels
