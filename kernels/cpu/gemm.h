// One row-major GEMM on the calling thread: the engine under every CPU product (kernels/cpu/matmul.cpp,
// the im2col convolutions of kernels/cpu/conv.cpp). Callers split their work into blocks fixed by
// the shapes and run the blocks on reel's threads; this call never starts threads of its own, so a
// block's bits depend on its operands alone, never on the thread count.
//
// Engine: f32 goes to oneDNN's sgemm (dnnl_sgemm) when reel is built with it (REEL_ONEDNN), f64
// and every product of a build without oneDNN to Eigen's GEMM. Why oneDNN for f32: on this
// project's shapes its AVX2 / AVX-512 kernels ran 1.3-2x faster than Eigen's at one thread
// (bench/bench_gemm_engines); its results depend only on the shapes (not on the operands'
// alignment or leading dimensions, not on the thread count once it runs on one thread).
#pragma once
#include <cstdint>

namespace reel::kernels::cpu {

// C (m, n) = op(A) (m, k) @ op(B) (k, n), or C += that when accumulate. op(X) = X, or X^T when
// the flag says the operand is stored transposed: A row-major (m, k) with row stride lda, or
// (trans_a) row-major (k, m); B likewise (k, n) or (trans_b) (n, k). C has row stride ldc. k == 0
// writes zeros (or leaves C) as the empty sum does.
template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                 int64_t ldb, bool accumulate, T* c, int64_t ldc);

// Which engine f32 products run on in this build: "oneDNN sgemm" or "Eigen".
const char* gemm_engine_f32();

}  // namespace reel::kernels::cpu
