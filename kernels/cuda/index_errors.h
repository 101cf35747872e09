// kernels/cuda/index_errors.h: how a CUDA kernel that reads an index tensor reports an
// out-of-range index (the device side of kernels/index_check.h). Device side: report_bad_index
// keeps the smallest bad position in the launch's slot of the device's error slots. Host side:
// those slots, checked when the host next waits for the device anyway (deferred, like CUDA's
// device-side asserts: see kernels/index_check.h), and the dispatch over the two index dtypes.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/cuda_only.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

// ---- device side -----------------------------------------------------------------------------

// A launch's slot: [0] the smallest bad position (kNoBadIndex: none; bit 63 set while a thread
// writes), [1] the bad value at that position.
constexpr unsigned long long kNoBadIndex = ~0ull >> 1;
constexpr unsigned long long kSlotBusy = 1ull << 63;

// A kernel found index tensor element `position` holding the out-of-range `value`: keep the
// smallest such position (the one the CPU's in-order scan names) and its value. The pair is
// written under a per-slot lock (the busy bit; rare path, only bad indices get here; a spin that
// needs independent thread scheduling, sm_70 and later, or simt's fibers, which never switch
// inside it), so the value always belongs to the position: order-independent.
__device__ __forceinline__ void report_bad_index(unsigned long long* slot, int64_t position, int64_t value) {
  const auto pos = static_cast<unsigned long long>(position);
  unsigned long long old = atomicOr(slot, 0ull);  // an atomic read
  for (;;) {
    if ((old & kSlotBusy) == 0) {
      if (old <= pos) return;  // an earlier position is kept
      if (atomicCAS(slot, old, pos | kSlotBusy) == old) break;
    }
    old = atomicOr(slot, 0ull);
  }
  atomicExch(slot + 1, static_cast<unsigned long long>(value));
#if defined(__CUDACC__)
  __threadfence();  // the value before the unlock (simt: x86 keeps stores in order; tsan refuses fences)
#endif
  atomicExch(slot, pos);  // unlock: position and value are both there
}

// check_indices' own buffer: only the smallest position (it reads the value back itself).
__device__ __forceinline__ void report_bad_position(unsigned long long* error, int64_t position) {
  atomicMin(error, static_cast<unsigned long long>(position));
}

// ---- host side -------------------------------------------------------------------------------

// fn(I{}) with I the C++ type of an index dtype (i32 or i64; the entry points checked it).
template <typename Fn>
void dispatch_index(DType dt, Fn fn) {
  if (dt == DType::i32) fn(int32_t{});
  else fn(int64_t{});
}

// The per-device error slots (kernels/cuda/index_errors.cu). Each launch that reads an index
// tensor takes the next slot of its device (two u64: kNoBadIndex and a value; set once, when the
// device's slots are first allocated, and again only after a reported error: no fill per launch);
// its kernels keep the first bad position and its value there (report_bad_index). Nothing is read back at the launch:
// check_index_errors(device), which the backend calls wherever the host has waited for the compute
// stream anyway (a copy to the host, a device or compute-stream synchronize; kernels/cuda/backend.cu),
// reads the slots of the launches since the last check (one small copy, no further wait) and
// raises the first bad index in launch order: the entry point's message (run_indexed gave the
// range), or IndexOutOfRange for a kernel called directly. A device that runs kMaxPendingIndexed
// indexed launches without the host ever reading is checked at the next launch (a synchronize).
constexpr int64_t kMaxPendingIndexed = 4096;
unsigned long long* acquire_index_error_slot(int device);
// The index tensor the launch that took the last slot read (its shape, not kept) and the range of
// the entry point that ran it, if any (run_indexed): what the check's message names.
void note_index_tensor(int device, const Tensor& idx);
// Raises the first bad index of the launches since the last check (their kernels must be done);
// a no-op in a dry run (the meta device: nothing ran) and when no indexed launch is pending.
void check_index_errors(int device);

// A launch's slot: IndexErrorBuffer(device) takes it, ptr() goes to the kernels, check(idx) (after
// the launch) names the index tensor they read, the (N) contiguous idx. On meta nothing: no kernel
// runs there, so there are no errors to report (and ptr() is null).
class IndexErrorBuffer {
 public:
  explicit IndexErrorBuffer(Device device)
      : device_(device), slot_(device.is_meta() ? nullptr : acquire_index_error_slot(device.index)) {}
  unsigned long long* ptr() const { return slot_; }
  void check(const Tensor& idx) const {
    if (slot_ != nullptr) note_index_tensor(device_.index, idx);
  }

 private:
  Device device_;
  unsigned long long* slot_;  // (2) u64 on the device
};

}  // namespace reel::kernels::cuda
