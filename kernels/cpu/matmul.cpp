// CPU matmul: every product, batched or not, is cut into blocks fixed by its shape and each block
// is one kernels/cpu/gemm.h call (oneDNN's sgemm for f32 when built with it, else Eigen) on one of
// reel's threads.
//
// Work split. Batches of small products: one product per task. One large product (>= 2^22
// multiply-adds, ~8 MFLOP, where a parallel region's start-up is noise): cut along its longer
// output dim into parts of at least kMinBlock rows (or columns), at most kMaxParts of them, edges
// on multiples of kAlign. The parts come from the shape alone, never from the thread count: a
// GEMM's bits depend on the shape it is given (oneDNN's blocking, Eigen's register panels of up
// to 48 f32 put an element's K sum in a different order for another block shape: an f32
// (128, 784) @ (784, 512) differed in its last bits when cut at the thread count), so with the
// same blocks on 1, 2 or 16 threads the result is bit-identical (tests/test_matmul.cpp). A block
// narrower than kMinBlock would spend its time re-packing the shared operand.
//
// Bias: an optional (N) vector added to every output row inside the GEMM, never as a second pass
// over the finished output: each block's rows of C start as the bias and the product is
// accumulated onto them (a GEMM with beta = 1), so there is no zero fill either. accumulate: the
// same beta = 1 onto what out holds (kernels::matmul_add_).
//
// Operands are taken in place when one of their last two dims has stride 1 (row-major, or
// column-major = a transposed view: kernels/matmul_layout.h), so transposes cost no copy; other
// layouts are made contiguous first.
#include <algorithm>

#include "kernels/backends.h"
#include "kernels/cpu/gemm.h"
#include "kernels/matmul_layout.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kMinBlock = 256, kMaxParts = 16, kAlign = 48;

template <typename T>
void gemm_batches(const MatmulOperand& A, const MatmulOperand& B, const Tensor& out, const Tensor& bias,
                  bool accumulate) {
  const int64_t r = out.dim();
  const int64_t M = out.size(r - 2), N = out.size(r - 1), K = A.t.size(r - 1);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  const T* pa = A.t.template data<T>();
  const T* pb = B.t.template data<T>();
  T* pc = out.template data<T>();
  const T* pbias = bias.defined() ? bias.template data<T>() : nullptr;  // (N) or none
  const Shape& shape = out.shape();
  const bool split_rows = M >= N;
  const int64_t split_dim = split_rows ? M : N;
  const int64_t parts =
      M * N * K < (int64_t{1} << 22) ? 1 : std::clamp<int64_t>(split_dim / kMinBlock, 1, kMaxParts);
  // Where part `part` starts: an even share, rounded down to a multiple of kAlign.
  auto edge = [&](int64_t part) { return part == parts ? split_dim : split_dim * part / parts / kAlign * kAlign; };
  // Rows [lo, hi) (split_rows) or columns [lo, hi) of product b.
  auto block = [&](int64_t b, int64_t part) {
    int64_t oa, ob;
    matmul_batch_offsets(b, static_cast<int>(r - 2), shape.data(), A.t, B.t, oa, ob);
    const int64_t lo = edge(part), hi = edge(part + 1);
    const int64_t row0 = split_rows ? lo : 0, rows = split_rows ? hi - lo : M;
    const int64_t col0 = split_rows ? 0 : lo, cols = split_rows ? N : hi - lo;
    // Row i of op(A) starts at a + i * lda (row-major) or a + i (column-major); column j of op(B)
    // at b + j (row-major) or b + j * ldb (column-major).
    const T* a = pa + oa + row0 * (A.col_major ? 1 : A.ld);
    const T* bb = pb + ob + col0 * (B.col_major ? B.ld : 1);
    T* c = pc + b * M * N + row0 * N + col0;
    if (pbias)
      for (int64_t i = 0; i < rows; ++i) std::copy(pbias + col0, pbias + col0 + cols, c + i * N);
    gemm_serial<T>(A.col_major, B.col_major, rows, cols, K, a, A.ld, bb, B.ld, accumulate || pbias != nullptr, c, N);
  };
  const int64_t tasks = batches * parts;
  if (tasks > 1 && batches * M * N * K >= (int64_t{1} << 16)) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) block(t / parts, t % parts);
  } else {  // without entering OpenMP (an `omp parallel if (false)` still costs a team set-up)
    for (int64_t t = 0; t < tasks; ++t) block(t / parts, t % parts);
  }
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, bool accumulate) {
  if (out.numel() == 0) return;
  const MatmulOperand A = matmul_operand(a), B = matmul_operand(b);
  // K == 0 needs nothing special: the empty sum is zero, plus the bias (gemm_serial writes the
  // zeros, or leaves out as it is when accumulating).
  REEL_DISPATCH_FLOATING(out.dtype(), "matmul", gemm_batches<scalar_t>(A, B, out, bias, accumulate))
}

}  // namespace reel::kernels::cpu
