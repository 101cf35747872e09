// kernels/cuda/unscale.cu: the loss scaler's unscale on a CUDA device (kernels/unscale.h):
// g *= inv_scale over a list of gradients, in place, finding any inf or NaN in the same sweep.
//
// The list goes through the multi-tensor launches of kernels/cuda/multi_tensor.h (the optimizer
// kernels' too): a model's hundred small gradients cost a few launches, not a hundred. Every
// launch writes to one device flag (atomicMax to 1 by a block that stored a non-finite value), and
// one copy of that flag goes to the host after the last launch: each gradient is read and written
// once and the host waits once per window, not once per tensor.
#include <array>
#include <cstdint>

#include "core/half.h"
#include "kernels/backends.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.h"

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

// Each chunk of the launch's gradients (ListArgs: kernels/cuda/multi_tensor.h) *= factor in
// acc_t, rounded once to T; *found = 1 when any stored value is non-finite.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kListThreads) unscale_kernel(ListArgs<1> a, acc_t factor, int* found) {
  int64_t begin, end;
  T* x = static_cast<T*>(a.ptr[0][block_chunk(a, begin, end)]);
  bool f = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const T y = static_cast<T>(acc_t(x[i]) * factor);
    x[i] = y;
    f = f || nonfinite(static_cast<acc_t>(y));
  }
  if (f) atomicMax(found, 1);
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  const Device device = list_device(grads);
  if (device.is_cpu()) return false;  // nothing to unscale
  set_device(device);
  const Tensor flag = zeros({1}, DType::i32, device);  // (1): 1 once any value is non-finite
  int* found = flag.data<int32_t>();
  const std::array<const std::vector<Tensor>*, 1> lists{&grads};
  for_each_floating_type([&](auto zero) {
    using T = decltype(zero);
    using A = acc_type_t<T>;
    list_apply<T, 1>(lists, [&](const ListArgs<1>& a, int blocks) {
      launch("unscale_kernel", unscale_kernel<T, A>, blocks, kListThreads, 0, a, static_cast<A>(inv_scale), found);
    });
  });
  return flag.to(Device::cpu()).data<int32_t>()[0] != 0;
}

}  // namespace reel::kernels::cuda
