// bench_gemm_engines: which CPU GEMM should reel's matmul call? Times, on the f32 row-major
// products reel's models actually run (MLP 784-512-512-10, the char GPT's Linear layers, a
// Linear(1024) chain; each forward and both backward products), reel's own kernels::matmul
// against Eigen called directly, OpenBLAS, BLIS, oneDNN and libxsmm, at 1 and 2 threads, and
// prints GFLOP/s, the ratio to reel's kernel, and a per-shape-class summary of the winners. A
// second table times the forward products with the Linear bias: reel's GEMM then its bias add,
// against oneDNN's bias fused into the GEMM and a BLAS GEMM accumulating onto bias rows.
//
//   ./bench_gemm_engines [--quick] [--rounds N] [--threads 1,2] [--ms T] [--wall] [--min] [--blis-arch NAME] [filter]
//   filter: only products whose "class product" name contains it (e.g. "mlp b16", "gpt C256", "dW")
//   --quick: 3 rounds of shorter timings (about a third of the default's time)
//   --wall: time 1-thread cells on the wall clock too (see time_calls)
//   --min: a cell is its fastest round, not the median: on a loaded machine, the round the
//          neighbours disturbed least (2 threads need both cores: a busy one stalls a parallel
//          region for a whole scheduler slice); pair it with many short rounds
//   --blis-arch skx|zen3|haswell|...: BLIS's kernels, when it detects none for the CPU ("generic")
//   OPENBLAS_CORETYPE=SkylakeX (environment): OpenBLAS's kernels, chosen when it is loaded
// The header says which kernels each library runs; with a CPU newer than the library (Zen 5 for
// Debian's OpenBLAS 0.3.21 and BLIS 0.9), the defaults are AVX2 or reference kernels.
//
// Each engine is optional at build time (bench/CMakeLists.txt; tools/setup_bench.sh installs
// them all): a missing one is a missing column. Every engine's result is checked against Eigen's
// (max |C - C_eigen| / max |C_eigen|); a result off by more than kTolerance is flagged and never
// wins, so a wrong call cannot look fast.
//
// Timing: per thread count and product, every engine runs twice untimed (JIT, primitive
// scratchpads, thread pools), then `rounds` rounds each time every engine once, in an order that
// rotates from round to round, so that a slow spell of this shared machine falls on all engines
// alike; a cell is the median of its rounds. One timing is `reps` back-to-back calls, reps chosen
// so that reel's call takes at least --ms milliseconds. 1-thread cells use the calling thread's
// CPU time, 2-thread cells wall time (time_calls says why).
#include <dlfcn.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <Eigen/Core>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"

// OpenBLAS's cblas.h and BLIS's blis.h come by full path (both libraries install a cblas.h; see
// bench/CMakeLists.txt), so the compiler does not know them as system headers and would hold
// blis.h's own warnings against this file: they are silenced for these two includes only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wtype-limits"
#if defined(REEL_BENCH_HAVE_OPENBLAS)
#include REEL_BENCH_OPENBLAS_CBLAS_H
#endif
#if defined(REEL_BENCH_HAVE_BLIS)
// Only BLIS's native API: its BLAS and CBLAS prototypes would clash with OpenBLAS's cblas.h (the
// same enums), and its cblas_sgemm symbol is shadowed by OpenBLAS's anyway (bench/CMakeLists.txt).
#define BLIS_DISABLE_BLAS
#define BLIS_DISABLE_CBLAS
#include REEL_BENCH_BLIS_H
#endif
#pragma GCC diagnostic pop
#if defined(REEL_BENCH_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif
#if defined(REEL_BENCH_HAVE_LIBXSMM)
#include <libxsmm.h>
#endif

using namespace reel;

namespace {

// Beyond this relative error a result is wrong, not rounded: f32 sums of up to 2048 products of
// N(0, 1) numbers stay near 1e-6 of the largest output.
constexpr double kTolerance = 1e-4;

// ---- the products --------------------------------------------------------------------------

// C (M, N) = op(A) op(B), row-major; op(A) is A^T when ta (A stored (K, M)), op(B) is B^T when
// tb (B stored (N, K)). reel's Linear runs forward Y = X W^T (NT), dX = G W (NN), dW = G^T X (TN).
struct Gemm {
  std::string cls;      // the shape class the summary groups by ("mlp b16", "gpt C256", ...)
  std::string product;  // which layer and which product ("fc1 fwd", "qkv dW")
  int64_t M, N, K;
  bool ta, tb;
  bool bias;  // a Linear forward with a bias: also timed in the bias table
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
  std::string name() const { return cls + " " + product; }
  const char* op() const { return ta ? "TN" : tb ? "NT" : "NN"; }
};

// The three products of a Linear(n_in -> n_out) on `rows` rows; dX only when the layer's input
// needs a gradient (not the first layer of an MLP fed with data), as reel's Linear does.
void add_linear(std::vector<Gemm>& out, const std::string& cls, const std::string& layer, int64_t rows, int64_t n_in,
                int64_t n_out, bool bias, bool needs_dx) {
  out.push_back({cls, layer + " fwd", rows, n_out, n_in, false, true, bias});
  if (needs_dx) out.push_back({cls, layer + " dX", rows, n_in, n_out, false, false, false});
  out.push_back({cls, layer + " dW", n_out, n_in, rows, true, false, false});
}

std::vector<Gemm> reel_products() {
  std::vector<Gemm> g;
  // examples/fashion_mnist_mlp's MLP 784-512-512-10 (with biases) at three batch sizes (128 is its default).
  for (int64_t b : {16, 128, 512}) {
    const std::string cls = "mlp b" + std::to_string(b);
    add_linear(g, cls, "fc1", b, 784, 512, true, false);
    add_linear(g, cls, "fc2", b, 512, 512, true, true);
    add_linear(g, cls, "fc3", b, 512, 10, true, true);
  }
  // examples/char_gpt: 32 sequences of 64 characters = 2048 rows; 114 characters in Debian's
  // fortunes; the LM head is tied to the token embedding (no bias). C96 is the example's default
  // model (3 blocks of width 96), C256 the 4-block, 4-head width-256 model; the layer count only
  // repeats the same products.
  for (int64_t C : {96, 256}) {
    const std::string cls = "gpt C" + std::to_string(C);
    const int64_t rows = 32 * 64, vocab = 114;
    add_linear(g, cls, "qkv", rows, C, 3 * C, true, true);
    add_linear(g, cls, "attn.proj", rows, C, C, true, true);
    add_linear(g, cls, "fc", rows, C, 4 * C, true, true);
    add_linear(g, cls, "fc.proj", rows, 4 * C, C, true, true);
    add_linear(g, cls, "lm_head", rows, C, vocab, false, true);
  }
  // bench_memory_plan's N x [Linear(1024) + GELU] blocks at batch 256 (a block inside the chain: dX too).
  add_linear(g, "chain b256", "lin1024", 256, 1024, 1024, true, true);
  return g;
}

// ---- one product's operands and what each engine runs on them -------------------------------

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Problem {
  Gemm g;
  int threads;
  Tensor a, b, bias;  // reel tensors; the other engines read their buffers
  const float *pa, *pb, *pbias;
  int64_t lda, ldb;      // row-major leading dims of the stored A and B
  RowMat ref, ref_bias;  // Eigen's result (1 thread), and with the bias added
};

// A runnable engine on one problem: `run` computes C into `out()`; `skip` (instead) says why this
// engine has no number for the problem.
struct Runner {
  std::function<void()> run;
  std::function<const float*()> out;
  std::string skip;
  std::string impl;  // what the library chose, when it says (oneDNN)
};

struct Engine {
  std::string name;
  bool bias_table;  // a forward-with-bias engine (the second table)
  std::function<Runner(Problem&)> make;
};

Runner skipped(std::string why) {
  Runner r;
  r.skip = std::move(why);
  return r;
}

template <typename A, typename B>
void eigen_product(Eigen::Map<RowMat>& C, const A& a, const B& b) {
  C.noalias() = a * b;
}

// Eigen's product into a preallocated map, no zero-fill; op() views as transposes of row-major maps.
void eigen_gemm(const Problem& p, float* c) {
  using CMap = Eigen::Map<const RowMat>;
  const Gemm& g = p.g;
  Eigen::Map<RowMat> C(c, g.M, g.N);
  if (g.ta)
    eigen_product(C, CMap(p.pa, g.K, g.M).transpose(), CMap(p.pb, g.K, g.N));
  else if (g.tb)
    eigen_product(C, CMap(p.pa, g.M, g.K), CMap(p.pb, g.N, g.K).transpose());
  else
    eigen_product(C, CMap(p.pa, g.M, g.K), CMap(p.pb, g.K, g.N));
}

std::vector<Engine> make_engines() {
  std::vector<Engine> e;
  // reel today: the entry point Linear calls, a fresh output tensor per call (as in training).
  // Eigen::setNbThreads(1) is what reel's kernel sets once at its first call; the Eigen column
  // below changes it, so it is set back before every reel call.
  e.push_back({"reel", false, [](Problem& p) {
                 auto y = std::make_shared<Tensor>();
                 Runner r;
                 r.run = [&p, y] {
                   Eigen::setNbThreads(1);
                   *y = kernels::matmul(p.a, p.b, p.g.ta, p.g.tb);
                 };
                 r.out = [y] { return y->data<float>(); };
                 return r;
               }});
  // Eigen called directly; at 2 threads, Eigen's own OpenMP threading of the one product.
  e.push_back({"Eigen", false, [](Problem& p) {
                 auto c = std::make_shared<std::vector<float>>(p.g.M * p.g.N);
                 Runner r;
                 r.run = [&p, c] {
                   Eigen::setNbThreads(p.threads);
                   eigen_gemm(p, c->data());
                 };
                 r.out = [c] { return c->data(); };
                 return r;
               }});
#if defined(REEL_BENCH_HAVE_OPENBLAS)
  e.push_back({"OpenBLAS", false, [](Problem& p) {
                 auto c = std::make_shared<std::vector<float>>(p.g.M * p.g.N);
                 Runner r;
                 r.run = [&p, c] {
                   const Gemm& g = p.g;
                   cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                               static_cast<blasint>(g.M), static_cast<blasint>(g.N), static_cast<blasint>(g.K), 1.0f,
                               p.pa, static_cast<blasint>(p.lda), p.pb, static_cast<blasint>(p.ldb), 0.0f, c->data(),
                               static_cast<blasint>(g.N));
                 };
                 r.out = [c] { return c->data(); };
                 return r;
               }});
#endif
#if defined(REEL_BENCH_HAVE_BLIS)
  // bli_sgemm takes a row and a column stride per operand: a transposed operand is its stored
  // matrix with the two strides swapped, no transpose flag needed.
  e.push_back({"BLIS", false, [](Problem& p) {
                 auto c = std::make_shared<std::vector<float>>(p.g.M * p.g.N);
                 Runner r;
                 r.run = [&p, c] {
                   const Gemm& g = p.g;
                   float one = 1.0f, zero = 0.0f;
                   const inc_t rsa = g.ta ? 1 : p.lda, csa = g.ta ? p.lda : 1;
                   const inc_t rsb = g.tb ? 1 : p.ldb, csb = g.tb ? p.ldb : 1;
                   bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, g.M, g.N, g.K, &one, const_cast<float*>(p.pa), rsa,
                             csa, const_cast<float*>(p.pb), rsb, csb, &zero, c->data(), g.N, 1);
                 };
                 r.out = [c] { return c->data(); };
                 return r;
               }});
#endif
#if defined(REEL_BENCH_HAVE_ONEDNN)
  // The matmul primitive, created once per product and thread count (its kernel choice and
  // blocking depend on the thread count) and reused; transposed operands are strided memory
  // descriptors, as reel's operands are strided views.
  struct OneDnn {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream strm{eng};
  };
  static OneDnn* dnn = new OneDnn;  // one engine and stream for the program's life
  auto onednn = [](Problem& p, bool with_bias, bool reel_add) {
    using dt = dnnl::memory::data_type;
    const Gemm& g = p.g;
    const dnnl::memory::desc src({g.M, g.K}, dt::f32, g.ta ? dnnl::memory::dims{1, g.M} : dnnl::memory::dims{g.K, 1});
    const dnnl::memory::desc wei({g.K, g.N}, dt::f32, g.tb ? dnnl::memory::dims{1, g.K} : dnnl::memory::dims{g.N, 1});
    const dnnl::memory::desc dst({g.M, g.N}, dt::f32, dnnl::memory::dims{g.N, 1});
    const dnnl::memory::desc bia({1, g.N}, dt::f32, dnnl::memory::dims{g.N, 1});
    const dnnl::matmul::desc desc =
        with_bias ? dnnl::matmul::desc(src, wei, bia, dst) : dnnl::matmul::desc(src, wei, dst);
    const dnnl::matmul::primitive_desc pd(desc, dnn->eng);
    auto prim = std::make_shared<dnnl::matmul>(pd);
    // The output is a reel tensor so that reel's bias add can run on it (the "then reel add" column).
    auto y = std::make_shared<Tensor>(empty({g.M, g.N}));
    auto args = std::make_shared<std::unordered_map<int, dnnl::memory>>();
    (*args)[DNNL_ARG_SRC] = dnnl::memory(src, dnn->eng, const_cast<float*>(p.pa));
    (*args)[DNNL_ARG_WEIGHTS] = dnnl::memory(wei, dnn->eng, const_cast<float*>(p.pb));
    (*args)[DNNL_ARG_DST] = dnnl::memory(dst, dnn->eng, y->data<float>());
    if (with_bias) (*args)[DNNL_ARG_BIAS] = dnnl::memory(bia, dnn->eng, const_cast<float*>(p.pbias));
    Runner r;
    r.run = [&p, prim, args, y, reel_add] {
      prim->execute(dnn->strm, *args);
      dnn->strm.wait();
      if (reel_add) kernels::binary_(kernels::BinaryOp::Add, *y, p.bias);
    };
    r.out = [y] { return y->data<float>(); };
    r.impl = pd.impl_info_str();
    return r;
  };
  e.push_back({"oneDNN", false, [onednn](Problem& p) { return onednn(p, false, false); }});
#endif
#if defined(REEL_BENCH_HAVE_LIBXSMM)
  // libxsmm's JIT kernels are column-major: the row-major C = op(A) op(B) is the column-major
  // C^T = op(B)^T op(A)^T, so B's buffer is the kernel's first operand and A's the second, each
  // transposed when the row-major one is. The JIT has no kernel for a transposed first operand
  // (dispatch returns null), which is the forward X W^T. A kernel is one thread; at 2 threads the
  // output's longer dim is cut in two, one kernel call per thread, as reel cuts Eigen's products.
  // libxsmm is a small-matrix library (its kernels do no cache blocking), but it runs here on every
  // product it dispatches a kernel for: reel's largest operand is 8 MB, and where its speed falls
  // off is part of the answer.
  e.push_back({"libxsmm", false, [](Problem& p) {
                 const Gemm& g = p.g;
                 if (g.tb) return skipped("no JIT");
                 struct Part {
                   int64_t lo, n;
                   libxsmm_smmfunction fn;
                 };
                 const bool split_rows = g.M >= g.N;
                 const int64_t split = split_rows ? g.M : g.N;
                 const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(p.threads, split / 16));
                 auto plan = std::make_shared<std::vector<Part>>();
                 for (int64_t i = 0; i < parts; ++i) {
                   const int64_t lo = split * i / parts, n = split * (i + 1) / parts - lo;
                   // column-major: m = N (or this part's columns), n = M (or this part's rows), k = K
                   const libxsmm_blasint m = split_rows ? g.N : n, nn = split_rows ? n : g.M, k = g.K;
                   const libxsmm_blasint lda = p.ldb, ldb = p.lda, ldc = g.N;
                   const float alpha = 1, beta = 0;
                   const int flags = g.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
                   const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
                   libxsmm_smmfunction fn =
                       libxsmm_smmdispatch(m, nn, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
                   if (!fn) return skipped("no JIT");
                   plan->push_back({lo, n, fn});
                 }
                 auto c = std::make_shared<std::vector<float>>(g.M * g.N);
                 Runner r;
                 r.run = [&p, c, plan, split_rows] {
                   const Gemm& g = p.g;
                   const int64_t np = static_cast<int64_t>(plan->size());
#pragma omp parallel for num_threads(static_cast<int>(np)) if (np > 1)
                   for (int64_t i = 0; i < np; ++i) {
                     const Part& part = (*plan)[static_cast<size_t>(i)];
                     // This part's rows of A (and C), or columns of B (and C).
                     const float* a = split_rows ? p.pa + (g.ta ? part.lo : part.lo * p.lda) : p.pa;
                     const float* b = split_rows ? p.pb : p.pb + part.lo;
                     float* cc = c->data() + (split_rows ? part.lo * g.N : part.lo);
                     part.fn(b, a, cc);
                   }
                 };
                 r.out = [c] { return c->data(); };
                 return r;
               }});
#endif

  // ---- the bias table: Linear's forward, Y = X W^T + b ----
  e.push_back({"reel+add", true, [](Problem& p) {
                 auto y = std::make_shared<Tensor>();
                 Runner r;
                 r.run = [&p, y] {  // what reel's Linear forward runs (autograd/ops/linear.h)
                   Eigen::setNbThreads(1);
                   *y = kernels::matmul(p.a, p.b, p.g.ta, p.g.tb);
                   kernels::binary_(kernels::BinaryOp::Add, *y, p.bias);
                 };
                 r.out = [y] { return y->data<float>(); };
                 return r;
               }});
#if defined(REEL_BENCH_HAVE_OPENBLAS)
  // The BLAS way to a bias: C starts as the bias rows and the GEMM accumulates onto it (beta = 1).
  e.push_back({"OpenBLAS b=1", true, [](Problem& p) {
                 auto c = std::make_shared<std::vector<float>>(p.g.M * p.g.N);
                 Runner r;
                 r.run = [&p, c] {
                   const Gemm& g = p.g;
                   float* cc = c->data();
#pragma omp parallel for if (g.M * g.N >= (int64_t{1} << 16))
                   for (int64_t i = 0; i < g.M; ++i) std::memcpy(cc + i * g.N, p.pbias, sizeof(float) * g.N);
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(g.M),
                               static_cast<blasint>(g.N), static_cast<blasint>(g.K), 1.0f, p.pa,
                               static_cast<blasint>(p.lda), p.pb, static_cast<blasint>(p.ldb), 1.0f, cc,
                               static_cast<blasint>(g.N));
                 };
                 r.out = [c] { return c->data(); };
                 return r;
               }});
#endif
#if defined(REEL_BENCH_HAVE_ONEDNN)
  e.push_back({"oneDNN+add", true, [onednn](Problem& p) { return onednn(p, false, true); }});
  e.push_back({"oneDNN bias", true, [onednn](Problem& p) { return onednn(p, true, false); }});
#endif
  return e;
}

// ---- measuring ------------------------------------------------------------------------------

struct Cell {
  bool ran = false;
  std::string skip;        // why there is no number
  double ms = 0;           // median per call
  double err = 0;          // max |C - C_eigen| / max |C_eigen|
  int wall_fallbacks = 0;  // timings meant for the CPU clock that had to use wall time
  bool bad() const { return ran && !(err <= kTolerance); }
  bool ok() const { return ran && !bad(); }
};

// max |c - ref| / max |ref|; infinite when c holds a NaN or an infinity (std::max would drop a NaN).
// 0 is a fair outcome: when K fits one of their k-blocks, GEMM kernels sum each output's K products
// in order with FMAs, and different libraries then agree to the bit.
double rel_error(const float* c, const RowMat& ref) {
  double diff = 0, scale = 0;
  const float* r = ref.data();
  for (int64_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(c[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::fabs(static_cast<double>(c[i]) - static_cast<double>(r[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(r[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double clock_ms(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// One timing of `reps` calls, in ms per call. At 1 thread every engine computes on the calling
// thread, so its CPU time is the call's time without the slices the scheduler gave other
// processes: on this shared 2-core machine wall time at 1 thread measures the neighbours' builds
// as much as the GEMM. The process's CPU time must match the thread's (no other thread worked),
// else the timing falls back to wall time. At 2 threads only wall time means anything.
struct Timing {
  double ms;
  bool cpu;  // measured as the calling thread's CPU time
};
Timing time_calls(const Runner& r, int reps, bool cpu_clock) {
  const double wall0 = now_ms(), thread0 = clock_ms(CLOCK_THREAD_CPUTIME_ID),
               proc0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
  for (int rep = 0; rep < reps; ++rep) r.run();
  const double thread = clock_ms(CLOCK_THREAD_CPUTIME_ID) - thread0, proc = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - proc0;
  const double wall = now_ms() - wall0;
  if (cpu_clock && proc <= thread * 1.02 + 0.05) return {thread / reps, true};
  return {wall / reps, false};
}

void set_threads(int t) {
  omp_set_num_threads(t);
#if defined(REEL_BENCH_HAVE_OPENBLAS)
  openblas_set_num_threads(t);
#endif
#if defined(REEL_BENCH_HAVE_BLIS)
  bli_thread_set_num_threads(t);
#endif
  // oneDNN (OpenMP runtime) follows omp_set_num_threads; Eigen's column sets its own per call.
}

struct Options {
  int rounds = 5;
  double target_ms = 4;
  std::vector<int> threads = {1, 2};
  bool cpu_clock = true;  // 1-thread cells on the calling thread's CPU time (time_calls)
  bool fastest = false;   // a cell is its fastest round instead of the median (--min)
  std::string blis_arch;  // BLIS configuration to use instead of the detected one
  std::string filter;
};

// results[product][threads index][engine]
using Results = std::vector<std::vector<std::vector<Cell>>>;

void measure(const std::vector<Gemm>& gemms, const std::vector<Engine>& engines, const Options& o, Results& results,
             std::map<std::string, int>& onednn_impls) {
  results.assign(gemms.size(), std::vector<std::vector<Cell>>(o.threads.size(), std::vector<Cell>(engines.size())));
  // Thread counts outermost: a 1-thread cell never runs while the OpenMP workers of a 2-thread
  // one still spin (they would share the 2 cores, and their CPU time would void the CPU clock).
  for (size_t ti = 0; ti < o.threads.size(); ++ti) {
    set_threads(o.threads[ti]);
    for (size_t gi = 0; gi < gemms.size(); ++gi) {
      const Gemm& g = gemms[gi];
      Problem p;
      p.g = g;
      p.a = randn(g.ta ? Shape{g.K, g.M} : Shape{g.M, g.K});
      p.b = randn(g.tb ? Shape{g.N, g.K} : Shape{g.K, g.N});
      p.bias = randn({g.N});
      p.pa = p.a.data<float>();
      p.pb = p.b.data<float>();
      p.pbias = p.bias.data<float>();
      p.lda = g.ta ? g.M : g.K;
      p.ldb = g.tb ? g.K : g.N;
      p.threads = 1;  // the reference: Eigen on one thread
      Eigen::setNbThreads(1);
      p.ref.resize(g.M, g.N);
      eigen_gemm(p, p.ref.data());
      p.ref_bias = p.ref;
      for (int64_t i = 0; i < g.M; ++i)
        for (int64_t j = 0; j < g.N; ++j) p.ref_bias(i, j) += p.pbias[j];
      p.threads = o.threads[ti];
      std::vector<Cell>& cells = results[gi][ti];
      std::vector<Runner> runners;
      std::vector<size_t> active;  // engines with a runner
      for (size_t ei = 0; ei < engines.size(); ++ei) {
        Runner r;
        if (engines[ei].bias_table && !g.bias)
          r = skipped("");
        else {
          try {
            r = engines[ei].make(p);
          } catch (const std::exception& e) {
            r = skipped(std::string("error: ") + e.what());
          }
        }
        if (!r.skip.empty() || !r.run)
          cells[ei].skip = r.skip;
        else
          active.push_back(ei);
        if (!r.impl.empty() && engines[ei].name == "oneDNN") ++onednn_impls[r.impl];
        runners.push_back(std::move(r));
      }
      auto check = [&](size_t ei) {
        const RowMat& ref = engines[ei].bias_table ? p.ref_bias : p.ref;
        cells[ei].err = std::max(cells[ei].err, rel_error(runners[ei].out(), ref));
      };
      // Warm-up and the first check; an engine that throws is reported in its cell.
      std::vector<size_t> live;
      for (size_t ei : active) {
        try {
          runners[ei].run();
          runners[ei].run();
          cells[ei].ran = true;
          check(ei);
          live.push_back(ei);
        } catch (const std::exception& e) {
          cells[ei].skip = std::string("error: ") + e.what();
        }
      }
      if (live.empty()) continue;
      // reps: enough back-to-back calls that the first engine (reel) takes target_ms per timing.
      const bool cpu_clock = p.threads == 1 && o.cpu_clock;
      const double one = std::max(time_calls(runners[live[0]], 1, cpu_clock).ms, 1e-3);
      const int reps = std::max(1, static_cast<int>(std::ceil(o.target_ms / one)));
      std::vector<std::vector<double>> samples(engines.size());
      for (int round = 0; round < o.rounds; ++round) {
        for (size_t k = 0; k < live.size(); ++k) {
          const size_t ei = live[(k + static_cast<size_t>(round)) % live.size()];
          const Timing t = time_calls(runners[ei], reps, cpu_clock);
          samples[ei].push_back(t.ms);
          if (cpu_clock && !t.cpu) ++cells[ei].wall_fallbacks;
        }
      }
      for (size_t ei : live) {
        check(ei);  // the last timed call's result too
        std::vector<double>& s = samples[ei];
        std::sort(s.begin(), s.end());
        cells[ei].ms = o.fastest ? s.front() : s[s.size() / 2];
      }
    }
  }
}

// ---- printing -------------------------------------------------------------------------------

double gflops(const Gemm& g, const Cell& c) { return g.flops() / (c.ms * 1e6); }

std::string cell_text(const Gemm& g, const Cell& c, const Cell& base) {
  char buf[64];
  if (!c.ran) {
    std::snprintf(buf, sizeof buf, "%s", c.skip.empty() ? "-" : c.skip.c_str());
  } else if (c.bad()) {
    std::snprintf(buf, sizeof buf, "WRONG %.0e", c.err);
  } else if (base.ok()) {
    std::snprintf(buf, sizeof buf, "%6.1f %5.2fx", gflops(g, c), base.ms / c.ms);
  } else {
    std::snprintf(buf, sizeof buf, "%6.1f", gflops(g, c));
  }
  return buf;
}

void print_table(const std::vector<Gemm>& gemms, const std::vector<Engine>& engines, const Results& results, size_t ti,
                 bool bias_table, size_t base_engine) {
  std::printf("%-31s %-2s %-14s", "product", "op", "M x N x K");
  for (const Engine& e : engines)
    if (e.bias_table == bias_table) std::printf(" %13s", e.name.c_str());
  std::printf("  %-20s %9s\n", "best (vs first col.)", "max err");
  for (size_t gi = 0; gi < gemms.size(); ++gi) {
    const Gemm& g = gemms[gi];
    if (bias_table && !g.bias) continue;
    const std::vector<Cell>& cells = results[gi][ti];
    char shape[40];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(g.M), static_cast<long long>(g.N),
                  static_cast<long long>(g.K));
    std::printf("%-31s %-2s %-14s", g.name().c_str(), g.op(), shape);
    size_t best = engines.size();
    double max_err = 0;
    for (size_t ei = 0; ei < engines.size(); ++ei) {
      if (engines[ei].bias_table != bias_table) continue;
      std::printf(" %13s", cell_text(g, cells[ei], cells[base_engine]).c_str());
      if (cells[ei].ran) max_err = std::max(max_err, cells[ei].err);
      if (cells[ei].ok() && (best == engines.size() || cells[ei].ms < cells[best].ms)) best = ei;
    }
    char best_text[64] = "-";
    if (best < engines.size() && cells[base_engine].ok())
      std::snprintf(best_text, sizeof best_text, "%s %.2fx", engines[best].name.c_str(),
                    cells[base_engine].ms / cells[best].ms);
    std::printf("  %-20s %9.1e\n", best_text, max_err);
  }
}

// Per shape class: each engine's time summed over the class's products (the class's share of a
// training step), its speedup over reel, the single engine that wins, and what choosing the best
// engine per product would give.
void print_summary(const std::vector<Gemm>& gemms, const std::vector<Engine>& engines, const Results& results,
                   size_t ti, bool bias_table, size_t base_engine) {
  std::vector<std::string> classes;
  for (const Gemm& g : gemms)
    if (std::find(classes.begin(), classes.end(), g.cls) == classes.end()) classes.push_back(g.cls);
  std::printf("%-11s %9s", "class", "ms");
  for (const Engine& e : engines)
    if (e.bias_table == bias_table && &e != &engines[base_engine]) std::printf(" %12s", e.name.c_str());
  std::printf("  %-22s %s\n", "winner (all products)", "best per product");
  for (const std::string& cls : classes) {
    std::vector<double> total(engines.size(), 0);
    std::vector<bool> complete(engines.size(), true);     // ran (right) on every product of the class
    std::vector<double> covered_base(engines.size(), 0);  // reel's time on the products an engine ran
    double best_mix = 0;
    std::map<std::string, int> mix;
    bool any = false;
    for (size_t gi = 0; gi < gemms.size(); ++gi) {
      const Gemm& g = gemms[gi];
      if (g.cls != cls || (bias_table && !g.bias)) continue;
      const std::vector<Cell>& cells = results[gi][ti];
      if (!cells[base_engine].ok()) continue;
      any = true;
      size_t best = base_engine;
      for (size_t ei = 0; ei < engines.size(); ++ei) {
        if (engines[ei].bias_table != bias_table) continue;
        if (!cells[ei].ok()) {
          complete[ei] = false;
          continue;
        }
        total[ei] += cells[ei].ms;
        covered_base[ei] += cells[base_engine].ms;
        if (cells[ei].ms < cells[best].ms) best = ei;
      }
      best_mix += cells[best].ms;
      ++mix[engines[best].name];
    }
    if (!any) continue;
    std::printf("%-11s %9.3f", cls.c_str(), total[base_engine]);
    size_t winner = base_engine;
    for (size_t ei = 0; ei < engines.size(); ++ei) {
      if (engines[ei].bias_table != bias_table || ei == base_engine) continue;
      char buf[32] = "-";
      if (total[ei] > 0)  // a partial engine's speedup is over reel on the products it ran: marked *
        std::snprintf(buf, sizeof buf, "%.2fx%s", covered_base[ei] / total[ei], complete[ei] ? "" : "*");
      std::printf(" %12s", buf);
      if (complete[ei] && total[ei] < total[winner]) winner = ei;
    }
    char win[64];
    std::snprintf(win, sizeof win, "%s %.2fx", engines[winner].name.c_str(), total[base_engine] / total[winner]);
    std::string mix_text;
    for (const auto& [name, n] : mix) mix_text += (mix_text.empty() ? "" : ", ") + name + " " + std::to_string(n);
    std::printf("  %-22s %.2fx (%s)\n", win, total[base_engine] / best_mix, mix_text.c_str());
  }
}

// The load this shared machine carries: "1-min load, runnable/total tasks" from /proc/loadavg.
std::string load_text() {
  char buf[128] = "";
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    double l1 = 0;
    char tasks[32] = "";
    if (std::fscanf(f, "%lf %*f %*f %31s", &l1, tasks) == 2)
      std::snprintf(buf, sizeof buf, "load %.2f, tasks %s", l1, tasks);
    std::fclose(f);
  }
  return buf;
}

// Before BLIS's first call: BLIS_ARCH_TYPE takes an arch_t number; this takes its name.
void select_blis_arch(const std::string& name) {
  if (name.empty()) return;
#if defined(REEL_BENCH_HAVE_BLIS)
  for (int id = 0; id < BLIS_NUM_ARCHS; ++id)
    if (name == bli_arch_string(static_cast<arch_t>(id))) {
      setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 1);
      return;
    }
  REEL_FAIL("--blis-arch: no BLIS configuration named '", name, "'");
#else
  REEL_FAIL("--blis-arch: this build has no BLIS");
#endif
}

// One line per engine: its version and which of its kernels run on this CPU.
void print_versions() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  std::printf("Eigen %d.%d.%d, compiled with reel's flags%s\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
              EIGEN_MINOR_VERSION, avx512 ? " (AVX-512 when -march=native)" : "");
#if defined(REEL_BENCH_HAVE_OPENBLAS)
  std::printf("%s, %s kernels", openblas_get_config(), openblas_get_corename());
  // Both OpenBLAS and BLIS export cblas_sgemm: say whose this program's calls reach.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) && info.dli_fname)
    std::printf("; cblas_sgemm from %s", info.dli_fname);
  std::printf("\n");
  // OpenBLAS picks its kernels when it is loaded, before main: only the environment can change it.
  const std::string core = openblas_get_corename();
  if (avx512 && core.find("kylake") == std::string::npos && core.find("ooperlake") == std::string::npos &&
      core.find("apphire") == std::string::npos)
    std::printf("  note: this CPU has AVX-512, OpenBLAS runs its %s kernels; OPENBLAS_CORETYPE=SkylakeX selects "
                "its AVX-512 ones\n",
                core.c_str());
#endif
#if defined(REEL_BENCH_HAVE_BLIS)
  // Initialised before asking which kernels it runs: the query checks a BLIS_ARCH_TYPE override
  // against the registered configurations, which only bli_init registers.
  bli_init();
  const std::string blis_arch = bli_arch_string(bli_arch_query_id());
  std::printf("BLIS %s, %s kernels%s\n", bli_info_get_version_str(), blis_arch.c_str(),
              getenv("BLIS_ARCH_TYPE") ? " (chosen by BLIS_ARCH_TYPE or --blis-arch)" : "");
  if (blis_arch == "generic")
    std::printf("  note: BLIS has no configuration for this CPU and runs its reference kernels; --blis-arch %s "
                "selects optimised ones\n",
                avx512 ? "skx (AVX-512) or zen3 (AVX2)" : "zen3 or haswell (AVX2)");
#endif
#if defined(REEL_BENCH_HAVE_ONEDNN)
  const dnnl_version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d, %s runtime (its kernel per product: the list at the end)\n", v->major, v->minor,
              v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
#endif
#if defined(REEL_BENCH_HAVE_LIBXSMM)
  libxsmm_init();
  std::printf("libxsmm %s, %s kernels\n", LIBXSMM_CONFIG_VERSION, libxsmm_get_target_arch());
#endif
}

std::vector<int> parse_threads(const std::string& s) {
  std::vector<int> t;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const int n = std::atoi(part.c_str());
    REEL_CHECK(n >= 1, "--threads: '", s, "': a comma-separated list of thread counts expected");
    t.push_back(n);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        REEL_CHECK(i + 1 < argc, arg, ": a value expected");
        return argv[++i];
      };
      if (arg == "--quick") {
        o.rounds = 3;
        o.target_ms = 1.5;
      } else if (arg == "--rounds") {
        o.rounds = std::atoi(value().c_str());
        REEL_CHECK(o.rounds >= 1, "--rounds: at least 1");
      } else if (arg == "--ms") {
        o.target_ms = std::atof(value().c_str());
      } else if (arg == "--threads") {
        o.threads = parse_threads(value());
      } else if (arg == "--min") {
        o.fastest = true;
      } else if (arg == "--wall") {
        o.cpu_clock = false;
      } else if (arg == "--blis-arch") {
        o.blis_arch = value();
      } else if (arg == "-h" || arg == "--help") {
        std::printf(
            "usage: %s [--quick] [--rounds N] [--threads 1,2] [--ms T] [--wall] [--min] [--blis-arch NAME] [filter]\n",
                    argv[0]);
        return 0;
      } else {
        o.filter = arg;
      }
    }
    std::vector<Gemm> gemms;
    for (const Gemm& g : reel_products())
      if (g.name().find(o.filter) != std::string::npos) gemms.push_back(g);
    REEL_CHECK(!gemms.empty(), "no product's name contains '", o.filter, "'");
    const std::vector<Engine> engines = make_engines();
    size_t reel_add = 0;
    for (size_t ei = 0; ei < engines.size(); ++ei)
      if (engines[ei].name == "reel+add") reel_add = ei;

    select_blis_arch(o.blis_arch);
    std::printf("GEMM engines for reel's CPU matmul: f32, row-major; %zu products, %s of %d rounds; %s\n",
                gemms.size(), o.fastest ? "fastest" : "median", o.rounds, load_text().c_str());
    print_versions();
    const double start = now_ms();
    Results results;
    std::map<std::string, int> impls;
    measure(gemms, engines, o, results, impls);

    for (size_t ti = 0; ti < o.threads.size(); ++ti) {
      const char* clock = o.threads[ti] == 1 && o.cpu_clock ? "CPU time of the calling thread" : "wall time";
      std::printf("\n== %d thread%s (%s): GFLOP/s and speedup over reel (kernels::matmul) ==\n", o.threads[ti],
                  o.threads[ti] > 1 ? "s" : "", clock);
      print_table(gemms, engines, results, ti, false, 0);
      std::printf("\n-- %d thread%s, Linear forward with bias: GFLOP/s (of the GEMM) and speedup over reel+add --\n",
                  o.threads[ti], o.threads[ti] > 1 ? "s" : "");
      print_table(gemms, engines, results, ti, true, reel_add);
    }
    for (size_t ti = 0; ti < o.threads.size(); ++ti) {
      std::printf(
          "\n== summary, %d thread%s: ms = reel's time summed over the class's products; engines: "
          "speedup over it ==\n",
          o.threads[ti], o.threads[ti] > 1 ? "s" : "");
      print_summary(gemms, engines, results, ti, false, 0);
      std::printf("-- forward with bias (ms = reel+add) --\n");
      print_summary(gemms, engines, results, ti, true, reel_add);
    }
    std::printf(
        "\nnotes: op NT = forward X W^T, NN = dX = G W, TN = dW = G^T X (reel's Linear). A cell: GFLOP/s "
        "and speedup over the first column;\n"
        "  \"WRONG e\": the result is off Eigen's by e (relative), never a winner; \"no JIT\": libxsmm "
        "dispatched no kernel (transposed first\n"
        "  operand); x* in a summary: speedup over reel on the products that engine ran.\n"
        "  Eigen at 2 threads is Eigen's own OpenMP threading; reel's kernel cuts the output itself "
        "(kernels/cpu/matmul.cpp).\n");
    if (!impls.empty()) {
      std::printf("oneDNN implementations chosen:");
      for (const auto& [name, n] : impls) std::printf(" %s (%d)", name.c_str(), n);
      std::printf("\n");
    }
    int fallbacks = 0;
    for (const auto& per_product : results)
      for (const auto& per_threads : per_product)
        for (const Cell& c : per_threads) fallbacks += c.wall_fallbacks;
    if (fallbacks > 0)
      std::printf("%d 1-thread timings used wall time: another thread worked during them (time_calls)\n", fallbacks);
    std::printf("total %.1f s; %s\n", (now_ms() - start) / 1000, load_text().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_engines: %s\n", e.what());
    return 1;
  }
}
