// CPU matmul. f32 products go to oneDNN's matmul primitive when reel is built with it
// (REEL_ONEDNN, the default where CMake finds the dnnl package); f64 products (oneDNN has no f64
// matmul), layouts oneDNN has no brgemm kernel for, and every product of a build without oneDNN
// go to Eigen's GEMM. Why oneDNN: on reel's own shapes (the MLP's 784-512-512-10
// linears, char-GPT's, forward and both backward products) its brgemm kernels ran ~1.5x faster
// than the Eigen path below at 1 and 2 threads, and GEMM is 3/4 of a CPU training step.
//
// Bias: an optional (N) vector added to every output row inside the GEMM, never as a second pass
// over the finished output. oneDNN adds it in the brgemm epilogue (DNNL_ARG_BIAS); Eigen's path
// writes the bias rows into C and then accumulates the product onto them (C += A B), as a GEMM
// with beta = 1 would.
//
// Both paths take each operand matrix in place when one of its last two dims has stride 1
// (row-major, or column-major = a transposed view), so transposes cost no copy; other layouts are
// made contiguous first.
//
// Eigen's threads: Eigen's GEMM runs single-threaded, and reel spreads the work itself. Batches of small
// products go one product per thread; one large product is cut into a block of output rows (or
// columns, whichever dim is longer) per thread. Why not Eigen's own OpenMP threading: for outputs
// of few rows, such as (128, 512) = (128, 784) @ (784, 512) in an MLP, its threads spin on each
// other and 2 threads ran 5-15x slower than 1 on this 2-core machine (bench/bench_kernels
// prints the rates), while the split below costs only a second packing of the shared operand.
//
// oneDNN's threads: Debian's libdnnl is built on OpenMP (DNNL_CPU_RUNTIME = OMP, libgomp), so it
// follows omp_set_num_threads (reel's --threads). It is called once per product, batch included,
// from outside any parallel region of reel's, and splits the work itself.
#include <omp.h>

#include <algorithm>

#include <Eigen/Core>

#if defined(REEL_ONEDNN)
#include <cstring>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "kernels/backends.h"
#include "kernels/matmul_layout.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using RowMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;
template <typename T>
using BiasMap = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;
template <typename T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                          Eigen::OuterStride<>>;

template <typename T, bool ColA, bool ColB>
void gemm_batches(const MatmulOperand& A, const MatmulOperand& B, const Tensor& out, const Tensor& bias) {
  const int64_t r = out.dim();
  const int64_t M = out.size(r - 2), N = out.size(r - 1), K = A.t.size(r - 1);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  const T* pa = A.t.template data<T>();
  const T* pb = B.t.template data<T>();
  T* pc = out.template data<T>();
  const T* pbias = bias.defined() ? bias.template data<T>() : nullptr;  // (N) or none
  const Shape& shape = out.shape();
  // Small products, or at least one per thread: one product per thread; otherwise each product
  // is cut into `parts` blocks, one per thread.
  const int threads = omp_get_max_threads();
  const bool parallel_batches = batches > 1 && (M * N * K < (int64_t{1} << 21) || batches >= 2 * threads);
  // Within one product: blocks of at least kAlign rows/columns, and only when the product is large
  // enough (~8 MFLOP) that a parallel region's start-up is noise. Block edges fall on multiples of
  // kAlign so that the thread count does not change the bits: Eigen's kernel sums an element's K
  // products in an order that depends on where the element sits in its register blocks (panels
  // of up to 3 AVX-512 packets, 48 f32; the leftover rows or columns take narrower paths), and
  // edges at arbitrary offsets moved elements between paths: an f32 (128, 784) @ (784, 512)
  // differed in its last bits at 2, 3 and 8 threads from 1 (tests/test_matmul.cpp).
  constexpr int64_t kAlign = 48;
  const int64_t split_dim = std::max(M, N);
  const int64_t parts = parallel_batches || M * N * K < (int64_t{1} << 22)
                            ? 1
                            : std::max<int64_t>(1, std::min<int64_t>(threads, split_dim / kAlign));
  // Where block `part` starts: an even share, rounded down to a multiple of kAlign.
  auto edge = [&](int64_t part) { return part == parts ? split_dim : split_dim * part / parts / kAlign * kAlign; };
  const bool split_rows = M >= N;
  // One block of one product; the serial path calls it without entering OpenMP at all (an
  // `omp parallel if (false)` still costs a team set-up: kernels/cpu/parallel.h).
  auto block = [&](int64_t b, int64_t part) {
    int64_t oa, ob;
    matmul_batch_offsets(b, static_cast<int>(r - 2), shape.data(), A.t, B.t, oa, ob);
    OutMap<T> C(pc + b * M * N, M, N, Eigen::OuterStride<>(N));
    // This part's block: rows [lo, lo + n) of C and A, or columns [lo, lo + n) of C and B.
    const int64_t lo = edge(part), n = edge(part + 1) - lo;
    // c: a block of C whose first column is column col0 of C. With a bias, c starts as the bias
    // rows (bias[col0, col0 + cols)) and the product is accumulated onto them; no zero fill.
    auto gemm = [&](auto&& c, const auto& lhs, const auto& rhs, int64_t col0) {
      if (pbias) {
        // Row by row: each row of c is contiguous, a vectorised copy (a replicate() expression
        // computes a modulo per element, and showed up in profiles of the MLP step).
        const BiasMap<T> bias_row(pbias + col0, c.cols());
        for (Eigen::Index i = 0; i < c.rows(); ++i) c.row(i) = bias_row;
        c.noalias() += lhs * rhs;
      } else {
        c.noalias() = lhs * rhs;
      }
    };
    auto product = [&](const auto& lhs, const auto& rhs) {
      if (parts == 1) gemm(C, lhs, rhs, 0);
      else if (split_rows) gemm(C.middleRows(lo, n), lhs.middleRows(lo, n), rhs, 0);
      else gemm(C.middleCols(lo, n), lhs, rhs.middleCols(lo, n), lo);
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

#if defined(REEL_ONEDNN)
// One product shape on oneDNN: its primitive and memory objects (data handles set per call), or
// usable = false where oneDNN offers no brgemm kernel for it (onednn_matmul_f32 says why).
struct OnednnGemm {
  bool usable = false;
  dnnl::matmul prim;
  dnnl::memory src, wei, dst, bias;  // bias: a zero-size memory when the product has none
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

// oneDNN's dims and strides for one operand: batch dims where it is broadcast (stride 0) become 1
// (oneDNN broadcasts size-1 batch dims itself), the matrix dims as matmul_operand mapped them, and
// every size-1 dim gets the stride a dense tensor would have there (a size-1 dim's stride is
// arbitrary in reel, and oneDNN picks its implementation from the layout it sees).
void onednn_layout(const MatmulOperand& X, int64_t r, dnnl::memory::dims& dims, dnnl::memory::dims& strides) {
  dims.assign(r, 1);
  strides.assign(r, 0);
  const int64_t rows = X.t.size(r - 2), cols = X.t.size(r - 1);
  dims[r - 2] = rows;
  dims[r - 1] = cols;
  strides[r - 2] = X.col_major ? 1 : X.ld;
  strides[r - 1] = X.col_major ? X.ld : 1;
  int64_t extent = X.col_major ? X.ld * cols : X.ld * rows;  // elements the inner dims span
  for (int64_t d = r - 3; d >= 0; --d) {
    const int64_t s = X.t.stride(d);
    dims[d] = s == 0 ? 1 : X.t.size(d);
    strides[d] = dims[d] == 1 ? extent : s;
    extent = std::max(extent, dims[d] * strides[d]);
  }
}

// Primitive creation costs far more than a small product (it picks and JIT-compiles a kernel),
// so primitives are cached by everything they were made for: both operands' dims and strides and
// the thread count (oneDNN fixes its work split when it creates a primitive), and whether a bias
// is added (a primitive with a bias is a different kernel: its epilogue reads the bias). The cache is
// thread_local so that no lock is needed when several host threads run kernels, and a oneDNN
// primitive with its memory objects is never shared between threads. A training run uses a few
// dozen shapes; the cap only bounds a program that keeps changing them.
bool onednn_matmul_f32(const MatmulOperand& A, const MatmulOperand& B, const Tensor& out, const Tensor& bias) {
  thread_local dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  thread_local dnnl::stream stream(engine);
  thread_local std::unordered_map<std::vector<int64_t>, OnednnGemm, KeyHash> cache;
  const int64_t r = out.dim();
  dnnl::memory::dims a_dims, a_strides, b_dims, b_strides;
  onednn_layout(A, r, a_dims, a_strides);
  onednn_layout(B, r, b_dims, b_strides);
  std::vector<int64_t> key;
  key.reserve(4 * r + 2);
  key.push_back(omp_get_max_threads());
  key.push_back(bias.defined() ? 1 : 0);
  for (const auto* v : {&a_dims, &a_strides, &b_dims, &b_strides}) key.insert(key.end(), v->begin(), v->end());
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 512) cache.clear();
    OnednnGemm g;
    const dnnl::memory::dims c_dims(out.shape().begin(), out.shape().end());
    const dnnl::memory::dims c_strides(out.strides().begin(), out.strides().end());
    try {
      using dt = dnnl::memory::data_type;
      const dnnl::memory::desc a_md(a_dims, dt::f32, a_strides), b_md(b_dims, dt::f32, b_strides),
          c_md(c_dims, dt::f32, c_strides);
      // The bias as oneDNN broadcasts it: dims (1, ..., 1, N), dense.
      dnnl::memory::dims bias_dims(r, 1), bias_strides(r, c_dims[r - 1]);
      bias_dims[r - 1] = c_dims[r - 1];
      bias_strides[r - 1] = 1;
      const dnnl::memory::desc bias_md = bias.defined() ? dnnl::memory::desc(bias_dims, dt::f32, bias_strides)
                                                        : dnnl::memory::desc();
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), engine);
      // Only the brgemm kernels ("brg:avx512_core" etc.): they never split K across threads, so a
      // product is bit-identical at any thread count (tests/test_matmul.cpp). oneDNN's other
      // choices are its reference loops, slower than Eigen, and "gemm:jit" (taken e.g. for a
      // row stride larger than the row), whose driver splits K across threads for long-K
      // products: 16x8192x16 differed in its last bits at 8 threads from 1.
      if (std::strncmp(pd.impl_info_str(), "brg", 3) == 0) {
        g.prim = dnnl::matmul(pd);
        g.src = dnnl::memory(a_md, engine, DNNL_MEMORY_NONE);
        g.wei = dnnl::memory(b_md, engine, DNNL_MEMORY_NONE);
        g.dst = dnnl::memory(c_md, engine, DNNL_MEMORY_NONE);
        if (bias.defined()) g.bias = dnnl::memory(bias_md, engine, DNNL_MEMORY_NONE);
        g.usable = true;
      }
    } catch (const dnnl::error&) {
      g.usable = false;  // a layout oneDNN's matmul does not take: Eigen runs it
    }
    it = cache.emplace(std::move(key), std::move(g)).first;
  }
  OnednnGemm& g = it->second;
  if (!g.usable) return false;
  try {
    g.src.set_data_handle(const_cast<float*>(A.t.data<float>()));
    g.wei.set_data_handle(const_cast<float*>(B.t.data<float>()));
    g.dst.set_data_handle(out.data<float>());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, g.src}, {DNNL_ARG_WEIGHTS, g.wei}, {DNNL_ARG_DST, g.dst}};
    if (bias.defined()) {
      g.bias.set_data_handle(const_cast<float*>(bias.data<float>()));
      args.emplace(DNNL_ARG_BIAS, g.bias);
    }
    g.prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    REEL_FAIL("matmul: oneDNN failed on shapes ", A.t.shape(), " and ", B.t.shape(), ": ", e.what());
  }
  return true;
}
#endif  // REEL_ONEDNN

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias) {
  if (out.numel() == 0) return;
  static const bool eigen_single_threaded = [] {
    Eigen::setNbThreads(1);
    return true;
  }();
  (void)eigen_single_threaded;
  const int64_t K = a.size(-1);
  if (K == 0) {  // an empty inner dim: the product of nothing is zero, plus the bias
    if (!bias.defined()) {
      out.fill_(0.0);
      return;
    }
    const int64_t N = out.size(-1), rows = out.numel() / N;
    REEL_DISPATCH_FLOATING(out.dtype(), "matmul", {
      const scalar_t* pb = bias.data<scalar_t>();
      scalar_t* pc = out.data<scalar_t>();
      for (int64_t i = 0; i < rows; ++i) std::copy(pb, pb + N, pc + i * N);
    })
    return;
  }
  const MatmulOperand A = matmul_operand(a), B = matmul_operand(b);
#if defined(REEL_ONEDNN)
  if (out.dtype() == DType::f32 && out.is_contiguous() && onednn_matmul_f32(A, B, out, bias)) return;
#endif
  REEL_DISPATCH_FLOATING(out.dtype(), "matmul", {
    if (A.col_major && B.col_major) gemm_batches<scalar_t, true, true>(A, B, out, bias);
    else if (A.col_major) gemm_batches<scalar_t, true, false>(A, B, out, bias);
    else if (B.col_major) gemm_batches<scalar_t, false, true>(A, B, out, bias);
    else gemm_batches<scalar_t, false, false>(A, B, out, bias);
  })
}

}  // namespace reel::kernels::cpu
