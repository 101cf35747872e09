// The matmul family: batched matrix products with numpy.matmul's shape rules, on Eigen (cpu) or
// cuBLAS (cuda); kernels/matmul_layout.h says how an operand's strides reach the GEMM.
//
// The entry point checks its inputs (dtypes, devices, inner dims: reel::Error naming them),
// broadcasts the batch dims, allocates a contiguous output on the inputs' device and runs the
// backend kernel (declared at the end of this file) on cpu or cuda.
//
// Dtypes: f32, f64, bf16, f16; all operands (and the bias) in one dtype, the output in it too.
// bf16 / f16 products multiply exactly and sum in f32, and each output element is the f32 result
// (bias and accumulated value included) rounded once to the 16-bit type, to nearest even: on the
// cpu (oneDNN's bf16 / f16 matmul or the f32 GEMM on widened operands) and on cuda (cublasGemmEx,
// CUBLAS_COMPUTE_32F) alike. A caller that wants the f32 result converts its operands to f32 first
// (exact), which costs the f32 GEMM's rate.
#ifndef REEL_KERNELS_MATMUL_H
#define REEL_KERNELS_MATMUL_H
#include "core/tensor.h"

namespace reel::kernels {

// a (..., M, K) @ b (..., K, N) -> (..., M, N); 1-D operands as in numpy.matmul; batch dims
// broadcast. transpose_a / transpose_b use the transpose of the last two dims of a / b.
// bias: undefined (none) or a (N) vector added to every row of the output, inside the GEMM
// (oneDNN's epilogue on the cpu; on cuda the output starts as the bias rows and cuBLAS adds the
// product with beta = 1), so no second pass runs over the finished output; same dtype and device.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false,
              const Tensor& bias = Tensor());

// out = op(a) @ op(b), or out += that when accumulate, in place, for 2-D or batched operands (no
// 1-D ones): out must be contiguous and have the product's broadcast shape, dtype and device. The
// GEMM writes out (beta = 0) or accumulates onto it (beta = 1), so there is no temporary and no
// second pass: autograd's gradient sinks put a weight's gradient straight into the parameter's
// .grad this way (autograd/op.h). Bumps out's version.
void matmul_into_(const Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a = false,
                  bool transpose_b = false, bool accumulate = true);

// How this process's CPU runs bf16 and f16 products (oneDNN's matmul, or converted to f32 and run
// in f32), chosen once on first use from what the CPU reports; printable (kernels/cpu/gemm.h).
const char* cpu_gemm16_path();

}  // namespace reel::kernels

namespace reel {
// TF32 for f32 GEMMs on cuda (matmul, linear): off by default, since its bits differ from f32's.
// On: each f32 product's inputs are rounded to TF32 (10 fraction bits, to nearest even in the
// emulated cuBLAS) and summed in f32: cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores). Read at
// every GEMM, process-wide. No effect on the CPU, on f64 or 16-bit products, or on convolutions.
void set_allow_tf32(bool allow);
bool allow_tf32();
}  // namespace reel
#endif  // REEL_KERNELS_MATMUL_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/matmul.cpp) and reel::kernels::cuda (kernels/cuda/matmul.cu).
// a (B..., M, K), b (B..., K, N) already broadcast to out's batch dims (B..., M, N); any strides
// (kernels/matmul_layout.h); out contiguous. bias: undefined, or (N) contiguous, added to every
// row of out. accumulate (never with a bias): out += a @ b, out's values read, else out written.
// oneDNN or Eigen on the cpu, cuBLAS on cuda.
#ifdef REEL_BACKEND_KERNELS
void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, bool accumulate);
#endif  // REEL_BACKEND_KERNELS
