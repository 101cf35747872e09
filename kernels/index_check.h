// Range checking of index tensors (token ids, targets, argmax indices) for the entry points that
// read them (embedding, cross_entropy, max): a kernel must never read out of bounds, and a bad
// index gets the same message on every device.
//
// On the CPU every index is range-checked on the host before any kernel runs (an error cannot
// leave an OpenMP region). A CUDA device cannot be read from the host without a copy, so there the
// kernels check each index they read, skip a bad one and report its position through a device
// error buffer; the launcher throws cuda::IndexOutOfRange (kernels/cuda/cuda_only.h), which
// run_indexed() turns into the very message the CPU check gives. Cross-entropy needs the count of
// non-ignored targets before its kernel (the mean's divisor): on CUDA check_range() runs
// cuda::check_indices.
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

// Runs fn, a kernel call that reads index tensor `idx` of `shape`: a bad index that a CUDA kernel
// reported (cuda::IndexOutOfRange) raises the CPU check's message.
template <typename Fn>
void run_indexed(const IndexRange& r, const Shape& shape, Fn&& fn) {
#if defined(REEL_HAS_CUDA_BACKEND)
  try {
    fn();
  } catch (const cuda::IndexOutOfRange& e) {
    fail_out_of_range(r, shape, e.position, e.value);
  }
#else
  (void)r;
  (void)shape;
  fn();
#endif
}

}  // namespace reel::kernels
