// kernels/cuda/index_errors.h: how a CUDA kernel that reads an index tensor reports an
// out-of-range index (the device side of kernels/index_check.h). Device side: report_bad_index
// keeps the smallest bad position in a device error buffer. Host side: that buffer, checked after
// the launch (throws cuda::IndexOutOfRange, kernels/cuda/cuda_only.h), and the dispatch over the
// two index dtypes.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/cuda_only.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

// ---- device side -----------------------------------------------------------------------------

// A kernel found index tensor element `position` out of range: keep the smallest such position
// (the one the CPU's in-order scan names). An integer atomic: the result is order-independent.
__device__ __forceinline__ void report_bad_index(unsigned long long* error, int64_t position) {
  atomicMin(error, static_cast<unsigned long long>(position));
}

// ---- host side -------------------------------------------------------------------------------

// fn(I{}) with I the C++ type of an index dtype (i32 or i64; the entry points checked it).
template <typename Fn>
void dispatch_index(DType dt, Fn fn) {
  if (dt == DType::i32) fn(int32_t{});
  else fn(int64_t{});
}

// The error buffer of a launch that reads an index tensor: one u64 on the device, all ones (no
// error) until a kernel reports. check() copies it back after the launch (8 bytes; this
// synchronises with the device) and throws IndexOutOfRange with the position and the value
// stored there in `idx`, the (N) contiguous index tensor the kernel read.
class IndexErrorBuffer {
 public:
  explicit IndexErrorBuffer(Device device) : buf_(full({1}, -1.0, DType::i64, device)) {}
  unsigned long long* ptr() const { return reinterpret_cast<unsigned long long*>(buf_.data<int64_t>()); }
  void check(const Tensor& idx) const {
    const int64_t position = buf_.to(Device::cpu()).data<int64_t>()[0];
    // still all ones; or meta, where nothing ran and no index was read (kernels/meta.h)
    if (position < 0 || buf_.device().is_meta()) return;
    const Tensor v = untracked::slice(untracked::view(idx, {idx.numel()}), 0, position, position + 1)
                         .to(Device::cpu())
                         .to(DType::i64);
    throw IndexOutOfRange(position, v.data<int64_t>()[0]);
  }

 private:
  Tensor buf_;  // (1) i64
};

}  // namespace reel::kernels::cuda
