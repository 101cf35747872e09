// kernels/cuda/unscale.cu: the loss scaler's kernels on a CUDA device (kernels/unscale.h):
// g *= inv_scale over a list of gradients, in place, finding any inf or NaN in the same sweep;
// with the scale read from the device state, the flag left there (no read back), and the state's
// update and the backward seed, one thread each.
//
// The list goes through the multi-tensor launches of kernels/cuda/multi_tensor.h (the optimizer
// kernels' too): a model's hundred small gradients cost a few launches, not a hundred. Every
// launch writes to one device flag (atomicMax to 1 by a block that stored a non-finite value), and
// with a host inv_scale one copy of that flag goes to the host after the last launch: each gradient
// is read and written once and the host waits once per window, not once per tensor; with the
// device state (optim/accumulator.h's device decisions) the flag stays on the device.
#include <array>
#include <cstdint>

#include "core/half.h"
#include "kernels/backends.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.h"
#include "kernels/loss_scale_rule.h"

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

// unscale_kernel with the scale read from the device state: factor = 1 / state[0] in double (the
// host's 1.0 / scale), then in acc_t.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kListThreads) unscale_state_kernel(ListArgs<1> a, const double* state, int* found) {
  const acc_t factor = static_cast<acc_t>(1.0 / state[0]);
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

// One thread: the scaler's rule (kernels/loss_scale_rule.h) on the device state.
__global__ void __launch_bounds__(32) update_scale_kernel(double* state, const int* found, int64_t* skipped_count,
                                                          double growth_factor, double backoff_factor,
                                                          int64_t growth_interval) {
  if (threadIdx.x != 0) return;
  update_loss_scale(state, *found != 0, skipped_count, growth_factor, backoff_factor, growth_interval);
}

// One thread: seed[0] = T(inv_count * state[0]) (fill's rounding), window_scale[0] = state[0].
template <typename T>
__global__ void __launch_bounds__(32) seed_kernel(T* seed, const double* state, double inv_count, double* window_scale) {
  if (threadIdx.x != 0) return;
  seed[0] = static_cast<T>(inv_count * state[0]);
  if (window_scale != nullptr) window_scale[0] = state[0];
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

void unscale_grads_(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf) {
  const Device device = list_device(grads);
  if (device.is_cpu()) return;  // nothing to unscale
  set_device(device);
  const double* st = state.data<double>();
  int* found = found_inf.data<int32_t>();
  const std::array<const std::vector<Tensor>*, 1> lists{&grads};
  for_each_floating_type([&](auto zero) {
    using T = decltype(zero);
    using A = acc_type_t<T>;
    list_apply<T, 1>(lists, [&](const ListArgs<1>& a, int blocks) {
      launch("unscale_kernel", unscale_state_kernel<T, A>, blocks, kListThreads, 0, a, st, found);
    });
  });
}

void update_loss_scale_(const Tensor& state, const Tensor& found_inf, const Tensor& skipped_count,
                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  set_device(state.device());
  launch("update_scale_kernel", update_scale_kernel, 1, 32, 0, state.data<double>(),
         static_cast<const int*>(found_inf.data<int32_t>()),
         skipped_count.defined() ? skipped_count.data<int64_t>() : nullptr, growth_factor, backoff_factor,
         growth_interval);
}

void loss_scale_seed_(const Tensor& seed, const Tensor& state, double inv_count, const Tensor& window_scale) {
  set_device(seed.device());
  double* ws = window_scale.defined() ? window_scale.data<double>() : nullptr;
  for_each_floating_type([&](auto zero) {
    using T = decltype(zero);
    if (seed.dtype() == dtype_of<T>::value)
      launch("seed_kernel", seed_kernel<T>, 1, 32, 0, seed.data<T>(), static_cast<const double*>(state.data<double>()),
             inv_count, ws);
  });
}

}  // namespace reel::kernels::cuda
