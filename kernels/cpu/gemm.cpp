// kernels/cpu/gemm.h: one row-major GEMM on the calling thread, on oneDNN's sgemm (f32, when built
// with it) or Eigen; bf16 / f16 through oneDNN's matmul primitive or converted to f32 (the path
// chosen once per process, gemm16_path()).
#include "kernels/cpu/gemm.h"

#include <omp.h>

#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#if defined(REEL_ONEDNN)
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>

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
// walks down into the same few cache sets, so a block such as (256, 1024) @ (1024, 256)^T runs
// far below its rate with lda = 256 and at its rate with lda = 272. Such an operand is copied into
// a buffer with 16 floats more per row first (its copy costs one pass over the operand, the GEMM
// reads it n times); oneDNN's results do not depend on the leading dimension, so the bits stay
// the same. Not when the GEMM reads the operand fewer than kMinReuse times (the other operand's
// outer dim: a batch of 16 rows, a layer of 10 outputs): then the copy is most of the work, and
// the MLP's (16, 512) @ (512, 512)^T and (512, 512) @ (512, 10) ran faster without it. The table
// "CPU GEMM engines" of docs/benchmarks.md times reel's matmul, with this copy, against oneDNN's
// sgemm called directly on the same operands.
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

#if defined(REEL_ONEDNN)
// ---- bf16 / f16 through oneDNN's matmul primitive -----------------------------------------------
// C (m, n) = op(A) @ op(B) with 16-bit A and B, [+ bias] [+ C] (a sum post-op), summed in f32 and
// written as f32 (gemm_serial) or rounded once to the 16-bit type (gemm16_rounded). A primitive is
// made per shape and layout, on the calling thread under OneThread (its blocking is chosen for one
// thread) and kept, with its memory objects, in a per-thread cache: a GPT step has a few dozen shapes.
using MatmulKey = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  return *engine;
}

dnnl::memory::data_type dnnl_type(DType t) {
  return t == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f16;
}

// The matmul primitive descriptor for op(A) (m, k) @ op(B) (k, n) -> C (m, n) with these leading
// dimensions, C f32 or (rounded) the inputs' 16-bit type; bias adds a (1, n) bias of the inputs'
// type, accumulate a sum post-op (C += product); both are added to the f32 sum before any rounding.
dnnl::matmul::primitive_desc matmul16_pd(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                                         int64_t ldb, int64_t ldc, bool rounded, bool bias, bool accumulate) {
  using md = dnnl::memory::desc;
  const md a_md({m, k}, dnnl_type(t), ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  const md b_md({k, n}, dnnl_type(t), tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const md c_md({m, n}, rounded ? dnnl_type(t) : dnnl::memory::data_type::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  if (bias) {
    const md bias_md({1, n}, dnnl_type(t), dnnl::memory::dims{n, 1});
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, cpu_engine());
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, cpu_engine());
}

// One product on oneDNN's 16-bit matmul, C of type Out (f32, or T: rounded once), with an optional
// (n) bias of T.
template <typename T, typename Out>
void onednn_matmul16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                     int64_t ldb, const T* bias, bool accumulate, Out* c, int64_t ldc) {
  constexpr DType t = dtype_of<T>::value;
  constexpr bool rounded = std::is_same_v<Out, T>;
  OneThread one;
  // The primitive with its memory objects and argument map, made once: a call only points the
  // memories at its operands (set_data_handle). Making three dnnl::memory objects and the map per
  // call is a fixed cost of the size of a tiny product's whole call, a visible share of a block of
  // char_gpt's forward products (the table "CPU GEMM in 16 bits against f32" of
  // docs/benchmarks.md has those products' rates).
  struct Primitive {
    dnnl::matmul matmul;
    dnnl::memory a, b, bias, c;
    std::unordered_map<int, dnnl::memory> args;
  };
  thread_local std::map<MatmulKey, Primitive> cache;
  thread_local dnnl::stream stream(cpu_engine());
  const MatmulKey key{static_cast<int>(t), ta, tb, m, n, k, lda, ldb, ldc, accumulate, rounded, bias != nullptr};
  auto it = cache.find(key);
  try {
    if (it == cache.end()) {
      const auto pd = matmul16_pd(t, ta, tb, m, n, k, lda, ldb, ldc, rounded, bias != nullptr, accumulate);
      const dnnl::engine& e = cpu_engine();
      Primitive p{dnnl::matmul(pd), dnnl::memory(pd.src_desc(), e, DNNL_MEMORY_NONE),
                  dnnl::memory(pd.weights_desc(), e, DNNL_MEMORY_NONE), dnnl::memory(),
                  dnnl::memory(pd.dst_desc(), e, DNNL_MEMORY_NONE), {}};
      p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
      if (bias) {
        p.bias = dnnl::memory(pd.bias_desc(), e, DNNL_MEMORY_NONE);
        p.args.emplace(DNNL_ARG_BIAS, p.bias);
      }
      it = cache.emplace(key, std::move(p)).first;
    }
    const Primitive& p = it->second;
    p.a.set_data_handle(const_cast<T*>(a));
    p.b.set_data_handle(const_cast<T*>(b));
    p.c.set_data_handle(c);
    if (bias) p.bias.set_data_handle(const_cast<T*>(bias));
    p.matmul.execute(stream, p.args);
    stream.wait();
  } catch (const dnnl::error& e) {
    REEL_FAIL("matmul: oneDNN ", dtype_name(t), " matmul failed (", e.what(), ") on (", m, ", ", k, ") @ (", k, ", ",
              n, ")");
  }
}

// Whether the effective ISA includes `level` (oneDNN's ISA values are nested bit masks).
bool isa_has(dnnl::cpu_isa isa, dnnl::cpu_isa level) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(level)) == static_cast<unsigned>(level);
}

// The implementation oneDNN picks for a (256, 256) @ (256, 256) matmul in t on one thread, or ""
// where it offers none.
std::string probe_matmul16(DType t) {
  OneThread one;
  try {
    // The f32 destination's kernel is the one reported; a 16-bit destination (gemm16_rounded) must
    // get a kernel of the same family, not a reference one.
    const std::string impl = matmul16_pd(t, false, false, 256, 256, 256, 256, 256, 256, false, false, false).impl_info_str();
    const std::string rounded =
        matmul16_pd(t, false, true, 256, 256, 256, 256, 256, 256, true, true, true).impl_info_str();
    return rounded == impl ? impl : "";
  } catch (const dnnl::error&) {
    return "";
  }
}
#endif

// The 16-bit path of this process, chosen on first use (gemm16_path()).
struct Gemm16Path {
  bool onednn[2] = {false, false};  // bf16, f16: oneDNN's matmul (else converted to f32)
  std::string text;
};

const Gemm16Path& gemm16() {
  static const Gemm16Path path = [] {
    Gemm16Path p;
#if defined(REEL_ONEDNN)
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const bool bf16_isa = isa_has(isa, dnnl::cpu_isa::avx512_core_bf16) || isa_has(isa, dnnl::cpu_isa::avx512_core_amx);
    const DType types[2] = {DType::bf16, DType::f16};
    for (int i = 0; i < 2; ++i) {
      const std::string impl = probe_matmul16(types[i]);
      // A reference kernel (ref:any) or bf16 emulated on AVX-512 without BF16 instructions runs
      // slower than converting to f32; only native instructions are worth it.
      const bool native = !impl.empty() && impl.rfind("ref", 0) != 0 && (i == 1 || bf16_isa);
      p.onednn[i] = native;
      if (i) p.text += "; ";
      p.text += std::string(dtype_name(types[i])) + ": ";
      p.text += native ? "oneDNN matmul (" + impl + ")"
                       : "converted to f32, then oneDNN sgemm (oneDNN's " + std::string(dtype_name(types[i])) +
                             " matmul: " + (impl.empty() ? std::string("none") : impl) +
                             (i == 0 && !bf16_isa ? ", no AVX512-BF16 / AMX" : "") + ")";
    }
#else
    p.text = "bf16: converted to f32, then Eigen; f16: converted to f32, then Eigen (built without oneDNN)";
#endif
    return p;
  }();
  return path;
}

// op's storage (rows, cols) with row stride ld, converted to a dense f32 (rows, cols) in buffer.
template <typename T>
const float* widened(const T* x, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buffer) {
  buffer.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) buffer[i * cols + j] = static_cast<float>(x[i * ld + j]);
  return buffer.data();
}

}  // namespace

template <typename T>
void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                 int64_t ldb, bool accumulate, acc_type_t<T>* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (is_16bit_floating(dtype_of<T>::value)) {
#if defined(REEL_ONEDNN)
    if (k > 0 && gemm16().onednn[std::is_same_v<T, f16> ? 1 : 0])
      return onednn_matmul16<T, float>(ta, tb, m, n, k, a, lda, b, ldb, nullptr, accumulate, c, ldc);
#endif
    // Exact widening to f32, then the f32 GEMM: the same f32 sums of exact products.
    thread_local std::vector<float> a32, b32;
    const float* wa = widened(a, ta ? k : m, ta ? m : k, lda, a32);  // stored (rows, cols)
    const float* wb = widened(b, tb ? n : k, tb ? k : n, ldb, b32);
    return gemm_serial<float>(ta, tb, m, n, k, wa, ta ? m : k, wb, tb ? k : n, accumulate, c, ldc);
  } else {
#if defined(REEL_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0) return onednn_sgemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
#endif
    eigen_gemm(ta, tb, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
}

template void gemm_serial<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                                 bool, float*, int64_t);
template void gemm_serial<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                                  int64_t, bool, double*, int64_t);
template void gemm_serial<bf16>(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*, int64_t,
                                bool, float*, int64_t);
template void gemm_serial<f16>(bool, bool, int64_t, int64_t, int64_t, const f16*, int64_t, const f16*, int64_t, bool,
                               float*, int64_t);

template <typename T>
void gemm16_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                    int64_t ldb, const T* bias, bool accumulate, T* c, int64_t ldc) {
  REEL_CHECK(k > 0 && gemm16_native(dtype_of<T>::value), "matmul: gemm16_rounded needs oneDNN's ",
             dtype_of<T>::value, " matmul and k > 0 (k = ", k, ")");
  if (m == 0 || n == 0) return;
#if defined(REEL_ONEDNN)
  onednn_matmul16<T, T>(ta, tb, m, n, k, a, lda, b, ldb, bias, accumulate, c, ldc);
#else
  (void)ta, (void)tb, (void)a, (void)lda, (void)b, (void)ldb, (void)bias, (void)accumulate, (void)c, (void)ldc;
#endif
}

template void gemm16_rounded<bf16>(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*, int64_t,
                                   const bf16*, bool, bf16*, int64_t);
template void gemm16_rounded<f16>(bool, bool, int64_t, int64_t, int64_t, const f16*, int64_t, const f16*, int64_t,
                                  const f16*, bool, f16*, int64_t);

const char* gemm_engine_f32() {
#if defined(REEL_ONEDNN)
  return "oneDNN sgemm";
#else
  return "Eigen";
#endif
}

const char* gemm16_path() { return gemm16().text.c_str(); }
bool gemm16_native(DType t) { return gemm16().onednn[t == DType::f16 ? 1 : 0]; }

}  // namespace reel::kernels::cpu
