// CUDA implementations behind kernels/ops.h (kernels/cuda/*.cu, compiled by nvcc or, in the
// emulated build, on the host through kernels/simt). Same contracts as kernels/cpu/cpu_kernels.h:
// inputs arrive validated (same cuda device, the dtype the entry point checked) and, for
// elementwise ops, already expanded to the output shape (broadcast dims have stride 0); outputs
// are contiguous and preallocated on the same device. Plain C++: no CUDA header is needed to
// call these.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/op_kinds.h"

namespace reel::kernels::cuda {

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
// a (B..., M, K), b (B..., K, N) already broadcast to out's batch dims; any strides. cuBLAS.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);
// The same product through the hand-written 16x16 shared-memory tiled kernel: the teaching
// version (see matmul.cu), checked against cuBLAS and the CPU; f32 and f64.
void matmul_tiled(const Tensor& a, const Tensor& b, const Tensor& out);
// x permuted so that kept dims come first and `reduced_dims` trailing dims are reduced;
// out contiguous with the kept dims' shape. Deterministic: a fixed reduction tree, no atomics.
void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out);

}  // namespace reel::kernels::cuda
