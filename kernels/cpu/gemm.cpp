// kernels/cpu/gemm.h: one row-major GEMM on the calling thread, on oneDNN's sgemm (f32, when built
// with it) or Eigen.
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <type_traits>

#include <Eigen/Core>

#if defined(REEL_ONEDNN)
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#endif

namespace reel::kernels::cpu {

namespace {

template <typename T>
using RowMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;
template <typename T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;

template <typename T>
void eigen_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                bool accumulate, T* c, int64_t ldc) {
  static const bool single_threaded = [] {  // reel spreads the work; Eigen's own threads stay off
    Eigen::setNbThreads(1);
    return true;
  }();
  (void)single_threaded;
  OutMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  auto product = [&](const auto& lhs, const auto& rhs) {
    if (accumulate) C.noalias() += lhs * rhs;
    else C.noalias() = lhs * rhs;
  };
  // A transposed (m, k) operand is the transpose of a row-major (k, m) one.
  const RowMap<T> A(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  const RowMap<T> B(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  if (ta && tb) product(A.transpose(), B.transpose());
  else if (ta) product(A.transpose(), B);
  else if (tb) product(A, B.transpose());
  else product(A, B);
}

#if defined(REEL_ONEDNN)
// oneDNN's OpenMP build sizes its team from the calling thread's nthreads ICV (unless it is inside
// an active parallel region): set to 1 for the call, so that oneDNN never splits a product (its
// K split would make the bits depend on the thread count). The ICV is per thread, so reel's other
// threads keep theirs.
struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

// A leading dimension that is a multiple of 256 floats (1 KiB) puts the rows oneDNN's packing
// walks down into the same few cache sets: a (256, 1024) @ (1024, 256)^T block ran at half speed
// with lda = 256 and at full speed with lda = 272. Such an operand is copied into a buffer with
// 16 floats more per row first (its copy costs one pass over the operand, the GEMM reads it n
// times); oneDNN's results do not depend on the leading dimension, so the bits stay the same.
// Not when the GEMM reads the operand fewer than kMinReuse times (the other operand's outer dim:
// a batch of 16 rows, a layer of 10 outputs): then the copy is most of the work. Without it the
// MLP's (16, 512) @ (512, 512)^T ran 1.25x and its (512, 512) @ (512, 10) 1.2-1.4x faster
// (bench/bench_gemm_engines, fastest of 7 rounds, two runs).
constexpr int64_t kConflictingLd = 256, kLdPad = 16, kMinReuse = 64;

// op's storage (rows, cols, ld) copied with a padded ld into `buffer`, or the operand itself. reuse:
// how many times the GEMM reads it.
const float* unconflicted(const float* x, int64_t rows, int64_t cols, int64_t& ld, std::vector<float>& buffer,
                          int64_t reuse) {
  if (ld % kConflictingLd != 0 || rows < 64 || reuse < kMinReuse) return x;
  const int64_t padded = cols + kLdPad;
  buffer.resize(static_cast<size_t>(rows * padded));
  for (int64_t i = 0; i < rows; ++i) std::copy(x + i * ld, x + i * ld + cols, buffer.data() + i * padded);
  ld = padded;
  return buffer.data();
}

void onednn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  thread_local std::vector<float> a_buffer, b_buffer;
  a = unconflicted(a, ta ? k : m, ta ? m : k, lda, a_buffer, n);  // stored (rows, cols): op's transpose when ta
  b = unconflicted(b, tb ? n : k, tb ? k : n, ldb, b_buffer, m);
  OneThread one;
  const dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                          accumulate ? 1.0f : 0.0f, c, ldc);
  REEL_CHECK(status == dnnl_success, "matmul: oneDNN sgemm failed (status ", static_cast<int>(status), ") on (", m,
             ", ", k, ") @ (", k, ", ", n, ")");
}
#endif

}  // namespace

template <typename T>
void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                 int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if defined(REEL_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0) return onednn_sgemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
#endif
  eigen_gemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
}

template void gemm_serial<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                                 bool, float*, int64_t);
template void gemm_serial<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                                  int64_t, bool, double*, int64_t);

const char* gemm_engine_f32() {
#if defined(REEL_ONEDNN)
  return "oneDNN sgemm";
#else
  return "Eigen";
#endif
}

}  // namespace reel::kernels::cpu
