// kernels/cuda/dropout.cu: the dropout mask on a CUDA device (contract: kernels/dropout.h).
// Element i is 1 / (1 - p) when Philox uniform i of the stream (seed, offset) is >= p, else 0:
// the same host/device philox_uniform as kernels/cpu/dropout.cpp, so CPU and CUDA masks are
// bit-identical and a replayed checkpoint segment redraws exactly the same mask. The stream may be
// read from device memory (replay-safe: kernels/dropout.h).
#include "core/philox.h"
#include "kernels/backends.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

// ---- kernels ---------------------------------------------------------------------------------

// mask: (n) contiguous; kept = 1 / (1 - p), or 0 when p == 1. stream (null: none): (seed, base) on
// the device, the stream then (stream[0], stream[1] + offset).
template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_mask_kernel(T* mask, int64_t n, double p, T kept, uint64_t seed,
                                                                uint64_t offset, const int64_t* stream) {
  if (stream != nullptr) {
    seed = static_cast<uint64_t>(stream[0]);
    offset += static_cast<uint64_t>(stream[1]);
  }
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    mask[i] = static_cast<double>(philox_uniform(seed, offset, static_cast<uint64_t>(i))) >= p ? kept : T(0);
}

}  // namespace

// ---- launcher --------------------------------------------------------------------------------

void dropout_mask(const Tensor& out, double p, uint64_t seed, uint64_t offset, const Tensor& stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "dropout_mask", {
    const scalar_t kept = p < 1 ? static_cast<scalar_t>(1.0 / (1.0 - p)) : scalar_t(0);
    launch("dropout_mask_kernel", dropout_mask_kernel<scalar_t>, grid_for(n, kThreads), kThreads, 0,
           out.data<scalar_t>(), n, p, kept, seed, offset,
           stream.defined() ? static_cast<const int64_t*>(stream.data<int64_t>()) : nullptr);
  })
}

}  // namespace reel::kernels::cuda
