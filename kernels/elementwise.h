// The elementwise family: unary and binary ops (kernels/op_kinds.h lists them and their scalar
// math) over floating tensors, binary ones with NumPy broadcasting or a scalar operand.
//
// Each entry point checks its inputs (dtypes, devices, broadcastable shapes: reel::Error naming
// the op and them), allocates a contiguous output on the inputs' device and runs the backend
// kernel (kernels/elementwise_backend.h) on cpu or cuda.
#pragma once
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

}  // namespace reel::kernels
