// The reduce family: sum, mean and max over any set of axes (kernels/op_kinds.h lists the ops),
// deterministic on every device. (max with argmax along one axis is kernels/max.h.)
//
// The entry point checks its input (dtype, axes: reel::Error naming them), permutes the reduced
// dims to the end, allocates a contiguous output on the input's device and runs the backend
// kernel (kernels/reduce_backend.h) on cpu or cuda.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "kernels/op_kinds.h"

namespace reel::kernels {

// Over `axes` (negative counts from the end; empty = all dims); keepdim leaves size-1 dims.
Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
inline Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Sum, x, std::move(axes), keepdim);
}
inline Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Mean, x, std::move(axes), keepdim);
}
inline Tensor max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false) {
  return reduce(ReduceOp::Max, x, std::move(axes), keepdim);
}

}  // namespace reel::kernels
