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
#include <vector>

#include "core/tensor.h"

namespace reel::kernels {

// a (..., M, K) @ b (..., K, N) -> (..., M, N); 1-D operands as in numpy.matmul; batch dims
// broadcast. transpose_a / transpose_b use the transpose of the last two dims of a / b.
// bias: undefined (none) or a (N) vector added to every row of the output, inside the GEMM
// (oneDNN's epilogue on the cpu; on cuda cuBLASLt's bias epilogue where the product is one 2-D GEMM,
// else the output starts as the bias rows and cuBLAS adds the product with beta = 1: see
// kernels/cuda/matmul.cu), so no second pass runs over the finished output; same dtype and device.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false,
              const Tensor& bias = Tensor());

// out = op(a) @ op(b), or out += that when accumulate, in place, for 2-D or batched operands (no
// 1-D ones): out must be contiguous and have the product's broadcast shape, dtype and device. The
// GEMM writes out (beta = 0) or accumulates onto it (beta = 1), so there is no temporary and no
// second pass: autograd's gradient sinks put a weight's gradient straight into the parameter's
// .grad this way (autograd/op.h). Bumps out's version.
void matmul_into_(const Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a = false,
                  bool transpose_b = false, bool accumulate = true);

// A few independent 2-D products in ONE kernel run (one launch, one profiler record): each
// out_i = op(a_i) @ op(b_i), or out_i += that (accumulate_i), exactly as matmul_into_ computes it
// (the same bits: on the cpu the products run one after another through the same GEMM; on cuda
// cublasGemmGroupedBatchedEx, each problem with the compute type and math mode of matmul_into_'s
// cuBLAS call). What linear's backward uses for dX = G W together with dW = G^T X (and the MLP's
// third, dW2 = G^T act), so a layer's two (three) GEMMs cost one launch. 1 to kMaxGemmGroup
// products, all 2-D, one dtype (f32, f64, bf16, f16) and device; every out contiguous, of the
// product's shape, distinct from the other outs and from every operand. Bumps every out's version.
// On cuda the pointer arrays cuBLAS reads on the device come from a ring of pinned, mapped host
// memory (kernels/cuda/matmul.cu). Under a CUDA graph capture (a replay would read ring slots rewritten
// since), for one product, or with an empty inner dim, the products run as separate GEMMs instead.
struct GemmInto {
  Tensor out, a, b;
  bool transpose_a = false, transpose_b = false, accumulate = false;
};
constexpr size_t kMaxGemmGroup = 3;
void matmul_group_into_(const std::vector<GemmInto>& gemms);

// ---- linear's fused GEMMs (cuBLASLt epilogues on cuda: kernels/cuda/matmul.cu) ----
// Each is one kernel run (one profiler record): the GEMM and what its epilogue fuses. All 2-D,
// one dtype (f32, f64, bf16, f16) and device; 16-bit results are the f32 ones rounded once.

// A linear's weight and bias gradients from its output gradient g (N, out) and input x (N, in):
// dw (out, in) = g^T x and db (out) = the column sums of g (over the N rows, in acc_t, k ascending
// on cuda, row blocks summed in a fixed order on the cpu: deterministic). dw gets the product
// written (or added, accumulate_w), db the sums written (or added, accumulate_b): autograd's
// gradient sinks put them straight into the parameters' .grad. dw and db contiguous. Bumps both
// versions. cuBLASLt's CUBLASLT_EPILOGUE_BGRADB on cuda.
void linear_grad_into_(const Tensor& dw, const Tensor& db, const Tensor& g, const Tensor& x, bool accumulate_w,
                       bool accumulate_b);

// The MLP's up-projection with its activation: pre = x w^T + b (N, out), y = gelu(pre) (the tanh
// approximation, kernels/op_kinds.h), x (N, in), w (out, in), b (out). Returns {y, pre}: pre is what
// the GELU's backward reads. CUBLASLT_EPILOGUE_GELU_AUX_BIAS on cuda (gelu of the f32 pre, pre
// saved as the aux output); on the cpu the biased GEMM then the GELU pass over its output.
struct LinearGelu {
  Tensor y, pre;
};
LinearGelu linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b);

// The gradient into that GELU's input, made by the GEMM that produces the gradient of its output:
// returns dpre (N, hidden) = (g @ w) * gelu'(pre), g (N, out) the gradient of the next linear's
// output, w (out, hidden) its weight, pre (N, hidden) what linear_gelu returned; and db (hidden) =
// the column sums of dpre (the up-projection's bias gradient), written or added (accumulate_b).
// CUBLASLT_EPILOGUE_DGELU_BGRAD on cuda. Bumps db's version.
Tensor linear_dgelu(const Tensor& g, const Tensor& w, const Tensor& pre, const Tensor& db, bool accumulate_b);

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
// The fused GEMMs of linear (the entry points above say what they compute). All 2-D; g, x, w, pre
// any strides (kernels/matmul_layout.h); dw, db, y, pre's output and dpre contiguous.
//   matmul_bgrad: g (N, out), x (N, in) -> dw (out, in), db (out)
//   matmul_gelu:  x (N, in), w (out, in), b (out) -> y (N, out), pre (N, out)
//   matmul_dgelu: g (N, out), w (out, hidden), pre (N, hidden) -> dpre (N, hidden), db (hidden)
// matmul_group: 1 to kMaxGemmGroup gemms, a (M, K) and b (K, N) the transposes applied (views,
// any strides; transpose_a / transpose_b false), out (M, N) contiguous; each run as matmul above
// with no bias would run it.
#ifdef REEL_BACKEND_KERNELS
void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, bool accumulate);
void matmul_group(const std::vector<GemmInto>& gemms);
void matmul_bgrad(const Tensor& g, const Tensor& x, const Tensor& dw, const Tensor& db, bool accumulate_w,
                  bool accumulate_b);
void matmul_gelu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& pre);
void matmul_dgelu(const Tensor& g, const Tensor& w, const Tensor& pre, const Tensor& dpre, const Tensor& db,
                  bool accumulate_b);
#endif  // REEL_BACKEND_KERNELS
