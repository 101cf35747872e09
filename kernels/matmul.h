// The matmul family: batched matrix products with numpy.matmul's shape rules, on Eigen (cpu) or
// cuBLAS (cuda); kernels/matmul_layout.h says how an operand's strides reach the GEMM.
//
// The entry point checks its inputs (dtypes, devices, inner dims: reel::Error naming them),
// broadcasts the batch dims, allocates a contiguous output on the inputs' device and runs the
// backend kernel (kernels/matmul_backend.h) on cpu or cuda.
#pragma once
#include "core/tensor.h"

namespace reel::kernels {

// a (..., M, K) @ b (..., K, N) -> (..., M, N); 1-D operands as in numpy.matmul; batch dims
// broadcast. transpose_a / transpose_b use the transpose of the last two dims of a / b.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

}  // namespace reel::kernels
