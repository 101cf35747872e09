// CPU matmul through Eigen's GEMM. Each operand matrix is mapped in place when one of its last
// two dims has stride 1 (row-major, or column-major = a transposed view), so transposes cost no
// copy; other layouts are made contiguous first.
//
// Threads: Eigen's GEMM runs single-threaded, and reel spreads the work itself. Batches of small
// products go one product per thread; one large product is cut into a block of output rows (or
// columns, whichever dim is longer) per thread. Why not Eigen's own OpenMP threading: for outputs
// of few rows, such as (128, 512) = (128, 784) @ (784, 512) in an MLP, its threads spin on each
// other and 2 threads ran 5-15x slower than 1 on this 2-core machine (bench/bench_kernels
// prints the rates), while the split below costs only a second packing of the shared operand.
#include <omp.h>

#include <algorithm>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/matmul_layout.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using RowMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;
template <typename T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;

template <typename T, bool ColA, bool ColB>
void gemm_batches(const MatmulOperand& A, const MatmulOperand& B, const Tensor& out) {
  const int64_t r = out.dim();
  const int64_t M = out.size(r - 2), N = out.size(r - 1), K = A.t.size(r - 1);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  const T* pa = A.t.template data<T>();
  const T* pb = B.t.template data<T>();
  T* pc = out.template data<T>();
  const Shape& shape = out.shape();
  // Small products, or at least one per thread: one product per thread; otherwise each product
  // is cut into `parts` blocks, one per thread.
  const int threads = omp_get_max_threads();
  const bool parallel_batches = batches > 1 && (M * N * K < (int64_t{1} << 21) || batches >= 2 * threads);
  // Within one product: blocks of at least 32 rows/columns, and only when the product is large
  // enough (~8 MFLOP) that a parallel region's start-up is noise.
  const int64_t split_dim = std::max(M, N);
  const int64_t parts = parallel_batches || M * N * K < (int64_t{1} << 22)
                            ? 1
                            : std::max<int64_t>(1, std::min<int64_t>(threads, split_dim / 32));
  const bool split_rows = M >= N;
  // One block of one product; the serial path calls it without entering OpenMP at all (an
  // `omp parallel if (false)` still costs a team set-up: kernels/cpu/parallel.h).
  auto block = [&](int64_t b, int64_t part) {
    int64_t oa, ob;
    matmul_batch_offsets(b, static_cast<int>(r - 2), shape.data(), A.t, B.t, oa, ob);
    OutMap<T> C(pc + b * M * N, M, N, Eigen::OuterStride<>(N));
    // This part's block: rows [lo, lo + n) of C and A, or columns [lo, lo + n) of C and B.
    const int64_t lo = split_dim * part / parts, n = split_dim * (part + 1) / parts - lo;
    auto product = [&](const auto& lhs, const auto& rhs) {
      if (parts == 1) C.noalias() = lhs * rhs;
      else if (split_rows) C.middleRows(lo, n).noalias() = lhs.middleRows(lo, n) * rhs;
      else C.middleCols(lo, n).noalias() = lhs * rhs.middleCols(lo, n);
    };
    // A column-major (M, K) matrix is the transpose of a row-major (K, M) one.
    if constexpr (ColA && ColB)
      product(RowMap<T>(pa + oa, K, M, Eigen::OuterStride<>(A.ld)).transpose(),
              RowMap<T>(pb + ob, N, K, Eigen::OuterStride<>(B.ld)).transpose());
    else if constexpr (ColA)
      product(RowMap<T>(pa + oa, K, M, Eigen::OuterStride<>(A.ld)).transpose(),
              RowMap<T>(pb + ob, K, N, Eigen::OuterStride<>(B.ld)));
    else if constexpr (ColB)
      product(RowMap<T>(pa + oa, M, K, Eigen::OuterStride<>(A.ld)),
              RowMap<T>(pb + ob, N, K, Eigen::OuterStride<>(B.ld)).transpose());
    else
      product(RowMap<T>(pa + oa, M, K, Eigen::OuterStride<>(A.ld)),
              RowMap<T>(pb + ob, K, N, Eigen::OuterStride<>(B.ld)));
  };
  if (parallel_batches || parts > 1) {
#pragma omp parallel for schedule(dynamic) collapse(2)
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t part = 0; part < parts; ++part) block(b, part);
  } else {
    for (int64_t b = 0; b < batches; ++b) block(b, 0);
  }
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  static const bool eigen_single_threaded = [] {
    Eigen::setNbThreads(1);
    return true;
  }();
  (void)eigen_single_threaded;
  const int64_t K = a.size(-1);
  if (K == 0) {  // an empty inner dim: the product of nothing is zero
    out.fill_(0.0);
    return;
  }
  const MatmulOperand A = matmul_operand(a), B = matmul_operand(b);
  REEL_DISPATCH_FLOATING(out.dtype(), "matmul", {
    if (A.col_major && B.col_major) gemm_batches<scalar_t, true, true>(A, B, out);
    else if (A.col_major) gemm_batches<scalar_t, true, false>(A, B, out);
    else if (B.col_major) gemm_batches<scalar_t, false, true>(A, B, out);
    else gemm_batches<scalar_t, false, false>(A, B, out);
  })
}

}  // namespace reel::kernels::cpu
