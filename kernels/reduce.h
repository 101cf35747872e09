// The reduce family: sum, mean and max over any set of axes (kernels/op_kinds.h lists the ops),
// deterministic on every device. (max with argmax along one axis is kernels/max.h.) f32, f64, bf16
// and f16: a 16-bit input is widened on load, summed in f32 on cuda (double on the cpu) and the
// result rounded once to its dtype; max is exact.
//
// The entry point checks its input (dtype, axes: reel::Error naming them), permutes the reduced
// dims to the end, allocates a contiguous output on the input's device and runs the backend
// kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_REDUCE_H
#define REEL_KERNELS_REDUCE_H
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

// out = the sum of x over `axes` (as sum, keepdim false), or out += it when accumulate, in place:
// out contiguous of the summed shape, x's dtype and device. No temporary and no second pass:
// Linear's bias gradient goes straight into the bias's .grad this way (its gradient sink,
// autograd/op.h). The sum is formed first and then added, so the bits equal out + sum(x). Bumps
// out's version.
void sum_into_(const Tensor& out, const Tensor& x, std::vector<int64_t> axes, bool accumulate);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_REDUCE_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/reduce.cpp) and reel::kernels::cuda (kernels/cuda/reduce.cu).
// x permuted so that kept dims come first and `reduced_dims` trailing dims are reduced; out
// contiguous with the kept dims' shape. accumulate (sums only): out += the result, out's values
// read, else written. Deterministic on both backends: a fixed reduction order, no atomics.
#ifdef REEL_BACKEND_KERNELS
void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out, bool accumulate);
#endif  // REEL_BACKEND_KERNELS
