// The elementwise family: unary and binary ops (kernels/op_kinds.h lists them and their scalar
// math) over floating tensors (f32, f64, bf16, f16), binary ones with NumPy broadcasting or a
// scalar operand. bf16 and f16 compute in f32 (acc_t) and round each result once to the output
// type; comparisons and where are exact in every dtype.
//
// Each entry point checks its inputs (dtypes, devices, broadcastable shapes: reel::Error naming
// the op and them), allocates a contiguous output on the inputs' device and runs the backend
// kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_ELEMENTWISE_H
#define REEL_KERNELS_ELEMENTWISE_H
#include "core/tensor.h"
#include "kernels/op_kinds.h"

namespace reel::kernels {

// NumPy broadcasting of two shapes; reel::Error naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Floating dtypes; output contiguous.
Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);  // broadcasting
Tensor binary(BinaryOp op, const Tensor& a, double b);         // tensor op scalar
Tensor binary(BinaryOp op, double a, const Tensor& b);         // scalar op tensor
// a = a op b in place, one pass, nothing allocated (gradient accumulation: grad += g). a must be
// contiguous and b broadcast to a's shape; bumps a's version (core/storage.h). A b that shares a's
// storage is read from a copy first.
void binary_(BinaryOp op, const Tensor& a, const Tensor& b);

// The backward of a unary op in one pass: dx = dy * f'(saved), where `saved` is x or y as
// unary_saves(op) says (it may be undefined when that is Nothing); dy and saved of one shape.
Tensor unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved);
// A mask in the inputs' dtype: 1 where `a op b`, else 0 (NaN compares false, except ne).
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);  // broadcasting
Tensor compare(CompareOp op, const Tensor& a, double b);         // tensor op scalar
// a where cond is nonzero (NaN counts as nonzero), else b; the three broadcast together and
// share one floating dtype (a mask from compare() is one).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_ELEMENTWISE_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/elementwise.cpp) and reel::kernels::cuda (kernels/cuda/elementwise.cu).
// Inputs arrive validated by the entry points (kernels/elementwise.cpp), of the dtype they checked
// and already expanded to the output shape (broadcast dims have stride 0), with any strides; out
// is contiguous and preallocated.
#ifdef REEL_BACKEND_KERNELS
void unary(UnaryOp op, const Tensor& x, const Tensor& out);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = s op a when scalar_left, else a op s.
void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_left, const Tensor& out);
// out = dy * f'(saved); dy, saved and out of one shape.
void unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved, const Tensor& out);
// out = 1 where a op b (a op s), else 0.
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void compare_scalar(CompareOp op, const Tensor& a, double s, const Tensor& out);
// out = cond != 0 ? a : b.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
#endif  // REEL_BACKEND_KERNELS
