// CPU implementations behind kernels/ops.h. Inputs arrive validated: same device (cpu), the
// dtype the entry point checked, and for elementwise ops already expanded to the output shape
// (broadcast dims have stride 0). Outputs are contiguous and preallocated.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "kernels/op_kinds.h"

namespace reel::kernels::cpu {

void unary(UnaryOp op, const Tensor& x, const Tensor& out);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = s op a when scalar_left, else a op s.
void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_left, const Tensor& out);
// a (B..., M, K), b (B..., K, N) already broadcast to out's batch dims; any strides.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);
// x permuted so that kept dims come first and `reduced_dims` trailing dims are reduced;
// out contiguous with the kept dims' shape.
void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out);

}  // namespace reel::kernels::cpu
