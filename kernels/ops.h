// The kernel entry points: compute on tensors, no autograd. Each function checks its inputs
// (shapes, dtypes, devices: reel::Error naming them), allocates the output on the inputs'
// device and dispatches to kernels/cpu or kernels/cuda.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "kernels/op_kinds.h"

namespace reel::kernels {

// NumPy broadcasting of two shapes; reel::Error naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// ---- elementwise (floating dtypes; output contiguous) ----
Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);  // broadcasting
Tensor binary(BinaryOp op, const Tensor& a, double b);         // tensor op scalar
Tensor binary(BinaryOp op, double a, const Tensor& b);         // scalar op tensor
// The backward of a unary op in one pass: dx = dy * f'(saved), where `saved` is x or y as
// unary_saves(op) says (it may be undefined when that is Nothing); dy and saved of one shape.
Tensor unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved);
// A mask in the inputs' dtype: 1 where `a op b`, else 0 (NaN compares false, except ne).
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);  // broadcasting
Tensor compare(CompareOp op, const Tensor& a, double b);         // tensor op scalar
// a where cond is nonzero (NaN counts as nonzero), else b; the three broadcast together and
// share one floating dtype (a mask from compare() is one).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- matmul ----
// a (..., M, K) @ b (..., K, N) -> (..., M, N); 1-D operands as in numpy.matmul; batch dims
// broadcast. transpose_a / transpose_b use the transpose of the last two dims of a / b.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// ---- reductions ----
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
