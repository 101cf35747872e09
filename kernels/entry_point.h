// What every kernel entry point (kernels/<family>.cpp) shares: the device dispatch
// (kernels/dispatch.h), the input checks whose messages name the op, the shapes and the devices,
// and the shape helpers of the row-wise families. Internal to kernels/: callers include
// kernels/ops.h or a family header.
#pragma once
#include <initializer_list>
#include <vector>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace reel::kernels {

// reel::Error unless every tensor is on the first one's device: names op, shapes and devices.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
// reel::Error unless every tensor has the first one's floating dtype.
void check_same_floating_dtype(const char* op, std::initializer_list<const Tensor*> tensors);

// The profiler's cost of a kernel run (REEL_DEVICE_DISPATCH's COST): every element of the `in`
// tensors read once, of the `out` tensors written once (their numel x dtype size), and `flops`.
// Bytes are the least a kernel must move; a kernel that moves more shows it as a lower % of roof.
profile::KernelCost kernel_cost(std::initializer_list<const Tensor*> in, std::initializer_list<const Tensor*> out,
                                int64_t flops, const char* variant = nullptr);
int64_t bytes_of(const Tensor& t);                // numel x dtype size; 0 when undefined
int64_t bytes_of(const std::vector<Tensor>& ts);  // summed
int64_t numel_of(const std::vector<Tensor>& ts);  // summed

// The leading dims of a (..., C) shape: the rows.
inline Shape rows_of(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// s with `last` appended.
inline Shape with_last(Shape s, int64_t last) {
  s.push_back(last);
  return s;
}

// A (..., C) tensor as (R, C) rows, made contiguous first if it is not; never recorded on the tape,
// whether t requires grad or not.
inline Tensor as_rows(const Tensor& t, int64_t R, int64_t C) {
  return untracked::view(untracked::contiguous(t), {R, C});
}

// t made contiguous and viewed as `shape` (same numel), never recorded on the tape.
inline Tensor contiguous_as(const Tensor& t, Shape shape) {
  return untracked::view(untracked::contiguous(t), std::move(shape));
}

}  // namespace reel::kernels
