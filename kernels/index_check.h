// Range checking of index tensors (token ids, targets, argmax indices) for the entry points that
// read them (embedding, cross_entropy, max): a kernel must never read out of bounds, and a bad
// index gets the same message on every device.
//
// On the CPU every index is range-checked on the host before any kernel runs (an error cannot
// leave an OpenMP region), and the op raises. A CUDA device cannot be read from the host without
// waiting for it, so there the kernels check each index they read, never use a bad one (a gather
// writes zeros, a loss NaN, a scatter skips it) and record its position in the launch's slot of a
// per-device error buffer that stays on the device (kernels/cuda/index_errors.h; set once, not per
// launch). The report is DEFERRED, as CUDA's device-side asserts are: the host raises the very
// message the CPU check gives (op, value, position, range: run_indexed() hands the range to the
// launch) at the next point where it waits for that device anyway: a copy to the host
// (Tensor::item, to(cpu), ...), a synchronize of the device or of its compute stream, or an
// explicit check_device_errors(device) below. Until then the op's outputs are garbage where a bad
// index was; after the error the device is usable again (the slots are cleared). A synchronize of
// an event or of the copy stream does not check (it says nothing about the compute stream's
// kernels). The meta device never reports (nothing runs there).
// check_range() is the synchronous check, for a caller that needs the count on the host
// (linear_cross_entropy): on CUDA cuda::check_indices, a kernel and one copy back.
#pragma once
#include <cstdint>
#include <optional>

#include "core/tensor.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_only.h"
#endif

namespace reel::kernels {

// reel::Error unless t has an integer index dtype (i32 or i64); `what` names it ("targets").
void check_index_dtype(const char* op, const char* what, const Tensor& t);

// What the values of an index tensor index: valid values are in [0, limit) or equal `ignore`
// (when set). `what` names one value ("id"), `what_limit` the range ("of the table's rows").
struct IndexRange {
  const char* op;
  const char* what;
  int64_t limit;
  std::optional<int64_t> ignore;
  const char* what_limit;
};

// reel::Error naming the bad value `v`, its position `flat` in an index tensor of `shape`, and
// the range: the same message on every device.
[[noreturn]] void fail_out_of_range(const IndexRange& r, const Shape& shape, int64_t flat, int64_t v);

// Every index of the contiguous tensor `idx` is in range (reel::Error naming the first that is
// not, its position and the range); returns how many are not ignored. CPU: a host loop; CUDA: a
// kernel (cuda::check_indices) and one small copy back.
int64_t check_range(const IndexRange& r, const Tensor& idx);

// The host check of an entry point whose kernel reads the indices: always on the CPU; on CUDA
// only when no kernel will run (an empty output), since a CUDA kernel checks what it reads.
void check_range_before(const IndexRange& r, const Tensor& idx, bool kernel_runs);

// The entry point's description of the index tensor that the launches of the current
// run_indexed() read (null outside one): the deferred CUDA check names them with it.
struct IndexedCall {
  IndexRange range;
  Shape shape;
};
const IndexedCall* current_indexed_call();
void set_indexed_call(const IndexedCall* call);

// Runs fn, a kernel call that reads index tensor `idx` of `shape`: a bad index that a CUDA kernel
// records raises the CPU check's message, at the next host read of the device (see above).
template <typename Fn>
void run_indexed(const IndexRange& r, const Shape& shape, Fn&& fn) {
#if defined(REEL_HAS_CUDA_BACKEND)
  const IndexedCall call{r, shape};
  const IndexedCall* outer = current_indexed_call();
  set_indexed_call(&call);
  try {
    fn();
  } catch (...) {
    set_indexed_call(outer);
    throw;
  }
  set_indexed_call(outer);
#else
  (void)r;
  (void)shape;
  fn();
#endif
}

}  // namespace reel::kernels

namespace reel {
// Waits for `device` and raises the first out-of-range index its kernels recorded since the last
// host read (kernels/index_check.h: the deferred CUDA check); nothing on the cpu (an op raises at
// once there) and on meta (no data, no errors).
void check_device_errors(Device device);
}  // namespace reel
