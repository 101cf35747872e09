// kernels/cuda/unscale.cu: the loss scaler's unscale on a CUDA device (kernels/unscale.h):
// g *= inv_scale over a list of gradients, in place, finding any inf or NaN in the same sweep.
//
// One grid-stride launch per gradient, all of them writing to one device flag (atomicMax to 1 by a
// thread that stored a non-finite value), and one copy of that flag to the host after the last
// launch: each gradient is read and written once and the host waits once per window, not once per
// tensor. (A multi-tensor launch as kernels/cuda/optimizer.cu's would save the launches of small
// tensors; the unscale runs once per window, so it is not worth its complexity here.)
#include <cstdint>

#include "core/half.h"
#include "kernels/backends.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

// Whether x is inf or NaN, from its bits (all exponent bits set): the same on a GPU and in simt.
__device__ __forceinline__ bool nonfinite(float x) {
  return (half_detail::bits_of(x) & 0x7f800000u) == 0x7f800000u;
}
__device__ __forceinline__ bool nonfinite(double x) {
  return (half_detail::bits_of(x) & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

// ---- kernels ---------------------------------------------------------------------------------

// x (n) *= factor in acc_t, rounded once to T; *found = 1 when any stored value is non-finite.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kThreads) unscale_kernel(T* x, int64_t n, acc_t factor, int* found) {
  bool f = false;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const T y = static_cast<T>(acc_t(x[i]) * factor);
    x[i] = y;
    f = f || nonfinite(static_cast<acc_t>(y));
  }
  if (f) atomicMax(found, 1);
}

// ---- launchers -------------------------------------------------------------------------------

template <typename T>
void unscale_one(const Tensor& g, double inv_scale, int* found) {
  using A = acc_type_t<T>;
  const int64_t n = g.numel();
  launch("unscale_kernel", unscale_kernel<T, A>, grid_for(n, kThreads), kThreads, 0, g.data<T>(), n,
         static_cast<A>(inv_scale), found);
}

}  // namespace

bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  Device device = Device::cpu();
  for (const Tensor& g : grads)
    if (g.numel() > 0) device = g.device();
  if (device.is_cpu()) return false;  // nothing to unscale
  set_device(device);
  const Tensor flag = zeros({1}, DType::i32, device);  // (1): 1 once any value is non-finite
  int* found = flag.data<int32_t>();
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    switch (g.dtype()) {
      case DType::f32: unscale_one<float>(g, inv_scale, found); break;
      case DType::f64: unscale_one<double>(g, inv_scale, found); break;
      case DType::bf16: unscale_one<bf16>(g, inv_scale, found); break;
      case DType::f16: unscale_one<f16>(g, inv_scale, found); break;
      default: break;  // the entry point let floating dtypes through only
    }
  }
  return flag.to(Device::cpu()).data<int32_t>()[0] != 0;
}

}  // namespace reel::kernels::cuda
