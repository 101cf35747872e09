// The matmul family: batched matrix products with numpy.matmul's shape rules, on Eigen (cpu) or
// cuBLAS (cuda); kernels/matmul_layout.h says how an operand's strides reach the GEMM.
//
// The entry point checks its inputs (dtypes, devices, inner dims: reel::Error naming them),
// broadcasts the batch dims, allocates a contiguous output on the inputs' device and runs the
// backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_MATMUL_H
#define REEL_KERNELS_MATMUL_H
#include "core/tensor.h"

namespace reel::kernels {

// a (..., M, K) @ b (..., K, N) -> (..., M, N); 1-D operands as in numpy.matmul; batch dims
// broadcast. transpose_a / transpose_b use the transpose of the last two dims of a / b.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_MATMUL_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/matmul.cpp) and reel::kernels::cuda (kernels/cuda/matmul.cu).
// a (B..., M, K), b (B..., K, N) already broadcast to out's batch dims (B..., M, N); any strides
// (kernels/matmul_layout.h). Eigen on the cpu, cuBLAS on cuda.
#ifdef REEL_BACKEND_KERNELS
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);
#endif  // REEL_BACKEND_KERNELS
