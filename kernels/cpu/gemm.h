// One row-major GEMM on the calling thread: the engine under every CPU product (kernels/cpu/matmul.cpp,
// the im2col convolutions of kernels/cpu/conv.cpp). Callers split their work into blocks fixed by
// the shapes and run the blocks on reel's threads; this call never starts threads of its own, so a
// block's bits depend on its operands alone, never on the thread count.
//
// Engine: f32 goes to oneDNN's sgemm (dnnl_sgemm) when reel is built with it (REEL_ONEDNN), f64
// and every product of a build without oneDNN to Eigen's GEMM. Why oneDNN for f32: on this
// project's shapes its AVX2 / AVX-512 kernels are faster than Eigen's at one thread (the table
// "CPU GEMM engines" of docs/benchmarks.md times both on reel's products); its results depend only
// on the shapes (not on the operands' alignment or leading dimensions, not on the thread count
// once it runs on one thread).
//
// bf16 and f16 operands accumulate in f32 and the product is written in f32 (acc_t), for the caller
// to round once to the 16-bit output; or, on oneDNN's 16-bit matmul, rounded once by it straight
// into a 16-bit output (gemm16_rounded: no f32 copy of the output, no rounding pass after). Their path is chosen once per process (gemm16_path()): oneDNN's
// matmul primitive with 16-bit inputs and an f32 destination where oneDNN reports an ISA with
// native instructions for the type (AVX512-BF16 or AMX for bf16; oneDNN 2.6 has no f16 ISA level,
// so f16 needs oneDNN to offer a non-reference f16 matmul for this CPU), else the operands are
// converted to f32 (exact) and the f32 GEMM above runs. Both give f32 sums of exact products;
// they differ from each other (and from cuBLAS) only in the order of the additions.
#pragma once
#include <cstdint>

#include "core/dtype.h"  // acc_type_t, bf16, f16

namespace reel::kernels::cpu {

// C (m, n) = op(A) (m, k) @ op(B) (k, n), or C += that when accumulate. op(X) = X, or X^T when
// the flag says the operand is stored transposed: A row-major (m, k) with row stride lda, or
// (trans_a) row-major (k, m); B likewise (k, n) or (trans_b) (n, k). C has row stride ldc. k == 0
// writes zeros (or leaves C) as the empty sum does. C is acc_t: T itself for f32 and f64, f32 for
// bf16 and f16 (exact products, f32 sums; the caller rounds C to 16 bits once).
template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                 int64_t ldb, bool accumulate, acc_type_t<T>* c, int64_t ldc);

// C (m, n) of T = op(A) @ op(B), plus an optional (n) bias on every row, plus C's own values when
// accumulate (the bias then replaces them, as gemm_serial's callers do: bias and accumulate are not
// combined), all summed in f32 and rounded to T once (to nearest even): the same value gemm_serial's
// f32 C rounded afterwards gives, without the f32 copy of C. Only where gemm16_native(T) and k > 0
// (a reel::Error otherwise).
template <typename T>
void gemm16_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                    int64_t ldb, const T* bias, bool accumulate, T* c, int64_t ldc);

// Which engine f32 products run on in this build: "oneDNN sgemm" or "Eigen".
const char* gemm_engine_f32();

// How this process runs bf16 and f16 products, chosen once on first use from what the CPU and
// oneDNN report, e.g. "bf16: oneDNN matmul (brg:avx512_core_bf16); f16: converted to f32, then
// oneDNN sgemm (...)". kernels::cpu_gemm16_path() (kernels/matmul.h) returns it.
const char* gemm16_path();
// Whether this process runs products in t (bf16 or f16) on oneDNN's 16-bit matmul; false: widened
// to f32 (kernels/cpu/matmul.cpp widens whole operands once rather than per block).
bool gemm16_native(DType t);

}  // namespace reel::kernels::cpu
