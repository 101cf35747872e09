// tests/test_simt.cpp: tests of kernels/simt, the CPU emulator that runs the project's CUDA kernels
// without a GPU, and of its host cuBLAS. The kernels are in simt_test_kernels.cu. The same tests
// build against real CUDA (nvcc kernels, cudart, cuBLAS); those only the emulator can pass
// (scheduling orders, divergence aborts, NaN-filled shared memory) are under SIMT_EMULATE.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#if defined(SIMT_EMULATE)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "core/half.h"  // reel::bf16 / f16: conversions apart from the emulated cuBLAS's
#include "kernels/simt/cublas.h"
#include "simt_test_kernels.h"

namespace {

#define CUDA_REQUIRE(expr) REQUIRE((expr) == cudaSuccess)

// A cudaMalloc'ed array of n > 0 elements.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { CUDA_REQUIRE(cudaMalloc(&ptr_, n * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    CUDA_REQUIRE(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_REQUIRE(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

template <class T = float>
std::vector<T> random_values(size_t n, double lo, double hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = T(dist(rng));
  return v;
}

// Runs check() once per scheduling order in the emulator (a missing barrier may show in one
// order only), once on a GPU.
template <class F>
void in_every_order(F check) {
#if defined(SIMT_EMULATE)
  const simt::Order saved = simt::order();
  const struct {
    simt::Order order;
    const char* name;
  } orders[] = {{simt::Order::forward, "forward"}, {simt::Order::reverse, "reverse"}, {simt::Order::shuffle, "shuffle"}};
  for (const auto& o : orders) {
    INFO("scheduling order " << o.name);
    simt::set_order(o.order);
    check();
  }
  simt::set_order(saved);
#else
  check();
#endif
}

}  // namespace

// ---- kernels ----------------------------------------------------------------------------------------
TEST_CASE("simt: grid-stride axpy on awkward sizes") {
  in_every_order([] {
    for (int n : {1, 31, 257, 100003}) {
      INFO("n = " << n);
      const auto x = random_values(n, -1, 1, 1), y = random_values(n, -1, 1, 2);
      DeviceArray<float> dx(x), dy(y);
      CUDA_REQUIRE(simt_test::axpy(n, 1.75f, dx.get(), dy.get()));
      CUDA_REQUIRE(cudaDeviceSynchronize());
      const auto r = dy.download();
      int bad = 0;
      for (int i = 0; i < n; ++i) bad += std::fabs(r[i] - (1.75f * x[i] + y[i])) > 1e-6f;
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("simt: float4 loads and stores") {
  const int n = 100004;
  const auto x = random_values(n, -1, 1, 3);
  DeviceArray<float> dx(x), dy(n);
  CUDA_REQUIRE(simt_test::scale4(n, -2.5f, dx.get(), dy.get()));
  const auto r = dy.download();
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += r[i] != -2.5f * x[i];
  CHECK(bad == 0);
}

TEST_CASE("simt: 16x16 tiled shared-memory SGEMM") {
  in_every_order([] {
    for (const auto& s : std::vector<std::vector<int>>{{1, 1, 1}, {17, 33, 9}, {64, 64, 64}}) {
      const int m = s[0], n = s[1], k = s[2];
      INFO("m n k = " << m << " " << n << " " << k);
      const auto a = random_values(size_t(m) * k, -1, 1, 4), b = random_values(size_t(k) * n, -1, 1, 5);
      DeviceArray<float> da(a), db(b), dc(size_t(m) * n);
      CUDA_REQUIRE(simt_test::sgemm_tiled(m, n, k, da.get(), db.get(), dc.get()));
      const auto c = dc.download();
      double worst = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double ref = 0;
          for (int l = 0; l < k; ++l) ref += double(a[size_t(i) * k + l]) * b[size_t(l) * n + j];
          worst = std::max(worst, std::fabs(ref - c[size_t(i) * n + j]));
        }
      CHECK(worst <= 1e-5 * k);
    }
  });
}

TEST_CASE("simt: block reduction with shuffles, shared memory and atomicAdd") {
  in_every_order([] {
    for (const auto& s : std::vector<std::vector<int>>{{1, 256, 1}, {1000, 128, 3}, {100003, 256, 64}}) {
      const int n = s[0], block = s[1], grid = s[2];
      INFO("n block grid = " << n << " " << block << " " << grid);
      const auto x = random_values(n, 0, 1, 6);
      DeviceArray<float> dx(x), out(1);
      CUDA_REQUIRE(cudaMemset(out.get(), 0, sizeof(float)));
      CUDA_REQUIRE(simt_test::reduce_sum(n, dx.get(), out.get(), block, grid));
      double ref = 0;
      for (float v : x) ref += v;
      CHECK(out.download()[0] == doctest::Approx(ref).epsilon(1e-5));
    }
  });
}

TEST_CASE("simt: row softmax with dynamic shared memory") {
  in_every_order([] {
    for (const auto& s : std::vector<std::vector<int>>{{1, 1}, {5, 33}, {37, 1000}}) {
      const int rows = s[0], cols = s[1];
      INFO("rows cols = " << rows << " " << cols);
      const auto x = random_values(size_t(rows) * cols, -8, 8, 7);
      DeviceArray<float> dx(x), dy(x.size());
      CUDA_REQUIRE(simt_test::softmax_rows(rows, cols, dx.get(), dy.get()));
      const auto y = dy.download();
      int bad = 0;
      for (int r = 0; r < rows; ++r) {
        const float* xr = &x[size_t(r) * cols];
        double m = -INFINITY, sum = 0;
        for (int c = 0; c < cols; ++c) m = std::max(m, double(xr[c]));
        for (int c = 0; c < cols; ++c) sum += std::exp(xr[c] - m);
        for (int c = 0; c < cols; ++c) {
          const double ref = std::exp(xr[c] - m) / sum;
          bad += !(std::fabs(y[size_t(r) * cols + c] - ref) <= 1e-6 + 1e-4 * ref);
        }
      }
      CHECK(bad == 0);
    }
  });
}

TEST_CASE("simt: ballot, any and all") {
  in_every_order([] {
    DeviceArray<int> out(64 * 4);
    CUDA_REQUIRE(simt_test::warp_votes(out.get()));
    const auto o = out.download();
    unsigned every_third = 0;
    for (int lane = 0; lane < 32; lane += 3) every_third |= 1u << lane;
    for (int t = 0; t < 64; ++t) {
      INFO("thread " << t);
      const int lane = t % 32;
      CHECK(unsigned(o[4 * t]) == every_third);
      CHECK(o[4 * t + 1] == (t >= 32 ? 1 : 0));
      CHECK(o[4 * t + 2] == 1);
      CHECK(o[4 * t + 3] == (lane < 16 ? 0xaaaa : -1));
    }
  });
}

TEST_CASE("simt: __syncthreads_count, _and, _or") {
  in_every_order([] {
    DeviceArray<int> out(96 * 4);
    CUDA_REQUIRE(simt_test::block_votes(out.get()));
    const auto o = out.download();
    for (int t = 0; t < 96; ++t) {
      INFO("thread " << t);
      CHECK(o[4 * t] == 32);
      CHECK(o[4 * t + 1] == 1);
      CHECK(o[4 * t + 2] == 1);
      CHECK(o[4 * t + 3] == 0);
    }
  });
}

TEST_CASE("simt: shuffles (xor butterfly, broadcast, scan, sub-warp widths) and __syncwarp") {
  in_every_order([] {
    std::vector<int> in(64);
    for (int t = 0; t < 64; ++t) in[t] = 3 * t * t + 1;
    DeviceArray<int> din(in), dout(64 * simt_test::kShuffleOutputs);
    CUDA_REQUIRE(simt_test::warp_shuffles(din.get(), dout.get()));
    const auto o = dout.download();
    for (int t = 0; t < 64; ++t) {
      INFO("thread " << t);
      const int lane = t % 32, warp = t - lane;
      int sum = 0, scan = 0, group = 0;
      for (int l = 0; l < 32; ++l) sum += in[warp + l];
      for (int l = 0; l <= lane; ++l) scan += in[warp + l];
      for (int l = lane / 8 * 8; l < lane / 8 * 8 + 8; ++l) group += in[warp + l];
      const int* r = &o[simt_test::kShuffleOutputs * t];
      CHECK(r[0] == sum);
      CHECK(r[1] == in[warp + 7]);
      CHECK(r[2] == scan);
      CHECK(r[3] == group);
      CHECK(r[4] == in[warp + (lane & 16) + (lane + 1) % 16]);
      CHECK(r[5] == in[warp + 31 - lane]);
    }
  });
}

TEST_CASE("simt: atomics from many blocks") {
  const int blocks = 64, threads = 256, total = blocks * threads;
  DeviceArray<simt_test::AtomicCounters> c(1);
  CUDA_REQUIRE(cudaMemset(c.get(), 0, sizeof(simt_test::AtomicCounters)));
  CUDA_REQUIRE(simt_test::atomics(blocks, threads, c.get()));
  const simt_test::AtomicCounters r = c.download()[0];
  CHECK(r.count == total);
  CHECK(r.max == total - 1);
  CHECK(r.min == -(total - 1));
  CHECK(r.cas_count == unsigned(total));
  CHECK(r.bits == 0xffffffffu);
  CHECK(r.wrap == unsigned(total % 1000));
  CHECK(r.big == (unsigned long long)total << 33);
  CHECK(r.fsum == float(total));
  CHECK(r.dsum == 0.5 * total);
}

TEST_CASE("simt: 3D grid and block indices") {
  DeviceArray<int> out(simt_test::kIndexThreads);
  CUDA_REQUIRE(cudaMemset(out.get(), 0xff, simt_test::kIndexThreads * sizeof(int)));
  CUDA_REQUIRE(simt_test::indices_3d(out.get()));
  const auto o = out.download();
  int id = 0, bad = 0;
  for (int bz = 0; bz < 5; ++bz)
    for (int by = 0; by < 4; ++by)
      for (int bx = 0; bx < 3; ++bx)
        for (int tz = 0; tz < 2; ++tz)
          for (int ty = 0; ty < 3; ++ty)
            for (int tx = 0; tx < 4; ++tx) bad += o[id++] != simt_test::pack_index(bx, by, bz, tx, ty, tz);
  CHECK(bad == 0);
}

TEST_CASE("simt: shared-memory reverse is right in every order") {
  const int n = 4 * 256;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = 7 * i + 3;
  in_every_order([&] {
    DeviceArray<int> din(in), dout(n);
    CUDA_REQUIRE(simt_test::reverse_blocks(n, din.get(), dout.get()));
    const auto o = dout.download();
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += o[i] != in[i ^ 255];
    CHECK(bad == 0);
  });
}

// ---- runtime API ---------------------------------------------------------------------------------
TEST_CASE("simt: cudaMemcpy round trip, memset, streams") {
  const int n = 1000;
  const auto h = random_values(n, -1, 1, 8);
  DeviceArray<float> a(n), b(n);
  CUDA_REQUIRE(cudaMemcpy(a.get(), h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemcpy(b.get(), a.get(), n * sizeof(float), cudaMemcpyDeviceToDevice));
  CHECK(b.download() == h);
  CUDA_REQUIRE(cudaMemcpy(b.get(), h.data(), n * sizeof(float), cudaMemcpyDefault));
  CHECK(b.download() == h);

  cudaStream_t stream = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  std::vector<float> back(n, 0.f);
  CUDA_REQUIRE(cudaMemsetAsync(a.get(), 0, n * sizeof(float), stream));
  CUDA_REQUIRE(cudaMemcpyAsync(a.get(), h.data(), 10 * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA_REQUIRE(cudaMemcpyAsync(back.data(), a.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_REQUIRE(cudaStreamSynchronize(stream));
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  for (int i = 0; i < n; ++i) REQUIRE(back[i] == (i < 10 ? h[i] : 0.f));

  // 7: no enumerator, but inside the bit range of cudaMemcpyKind's values (0-4), which has no fixed
  // underlying type in CUDA's driver_types.h either; a larger value would be undefined behaviour.
  CHECK(cudaMemcpy(b.get(), a.get(), 4, static_cast<cudaMemcpyKind>(7)) == cudaErrorInvalidMemcpyDirection);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidMemcpyDirection);
  CHECK(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
  CHECK(cudaGetLastError() == cudaSuccess);  // read and cleared
  CHECK(cudaMemcpy(b.get(), a.get(), 0, static_cast<cudaMemcpyKind>(7)) == cudaSuccess);  // nothing to copy
  CHECK(cudaMemcpy(b.get(), nullptr, 4, cudaMemcpyDefault) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  void* none = &none;
  CUDA_REQUIRE(cudaMalloc(&none, 0));
  CHECK(none == nullptr);
}

TEST_CASE("simt: device queries") {
  int count = 0, device = -1;
  CUDA_REQUIRE(cudaGetDeviceCount(&count));
  CHECK(count >= 1);
  CUDA_REQUIRE(cudaSetDevice(0));
  CUDA_REQUIRE(cudaGetDevice(&device));
  CHECK(device == 0);
  cudaDeviceProp prop{};
  CUDA_REQUIRE(cudaGetDeviceProperties(&prop, 0));
  CHECK(prop.warpSize == 32);
  CHECK(prop.maxThreadsPerBlock == 1024);
  CHECK(prop.sharedMemPerBlock == 48 * 1024);
  CHECK(prop.multiProcessorCount >= 1);
  int sms = 0;
  CUDA_REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(sms == prop.multiProcessorCount);
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes));
  CHECK(total_bytes > 0);
  CHECK(free_bytes <= total_bytes);
#if defined(SIMT_EMULATE)
  CHECK(std::string(prop.name) == "simt (CPU emulation)");
  CHECK(unsigned(prop.multiProcessorCount) == simt::workers());
#endif
}

TEST_CASE("simt: events measure elapsed time") {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_REQUIRE(cudaEventCreate(&start));
  CUDA_REQUIRE(cudaEventCreate(&stop));
  float ms = -1.f;
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorInvalidResourceHandle);  // not recorded yet
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  const int n = 4096;
  DeviceArray<float> x(random_values(n, -1, 1, 9)), y(n);
  CUDA_REQUIRE(cudaEventRecord(start));
  CUDA_REQUIRE(simt_test::axpy(n, 2.f, x.get(), y.get()));
  CUDA_REQUIRE(cudaEventRecord(stop));
  CUDA_REQUIRE(cudaEventSynchronize(stop));
  CUDA_REQUIRE(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0.f);
  CUDA_REQUIRE(cudaEventDestroy(start));
  CUDA_REQUIRE(cudaEventDestroy(stop));
}

// CUDA 13 rejects an impossible block or grid with cudaErrorInvalidValue (older runtimes:
// cudaErrorInvalidConfiguration); the emulator answers like CUDA 13.
static bool rejected(cudaError_t e) {
#if defined(SIMT_EMULATE)
  return e == cudaErrorInvalidValue;
#else
  return e == cudaErrorInvalidValue || e == cudaErrorInvalidConfiguration;
#endif
}

TEST_CASE("simt: launch configuration errors come back as error codes") {
  CHECK(rejected(simt_test::launch_empty(dim3(1), dim3(2048), 0)));
  CHECK(rejected(simt_test::launch_empty(dim3(1), dim3(32, 32, 2), 0)));
  CHECK(rejected(simt_test::launch_empty(dim3(1), dim3(1, 1, 65), 0)));
  CHECK(rejected(simt_test::launch_empty(dim3(0), dim3(32), 0)));
  CHECK(rejected(simt_test::launch_empty(dim3(1, 65536), dim3(32), 0)));
  CHECK(rejected(simt_test::launch_empty(dim3(1), dim3(0), 0)));
  CHECK(simt_test::launch_empty(dim3(1), dim3(32), 64 * 1024) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);  // simt::launch returned (and cleared) each error
  CHECK(simt_test::launch_empty(dim3(2, 3, 4), dim3(1024), 48 * 1024) == cudaSuccess);

  const size_t bytes = 64 * 1024;  // 512 floats per thread
  DeviceArray<float> out(32);
  CHECK(simt_test::big_dynamic_shared(out.get(), bytes, false) == cudaErrorInvalidValue);
  CUDA_REQUIRE(simt_test::big_dynamic_shared(out.get(), bytes, true));
  for (float v : out.download()) CHECK(v == 511.f * 512.f / 2.f);
}

// ---- what only the emulator can show --------------------------------------------------------------
#if defined(SIMT_EMULATE)
TEST_CASE("simt: a missing __syncthreads shows in some scheduling order") {
  const int n = 4 * 256;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = 7 * i + 3;
  const simt::Order saved = simt::order();
  int wrong_total = 0;
  for (simt::Order order : {simt::Order::forward, simt::Order::reverse}) {
    simt::set_order(order);
    DeviceArray<int> din(in), dout(n);
    if (simt::check_available()) {
      simt::CheckScope checked(simt::check_race);  // SIMT_CHECK=race finds it in any order
      CHECK(simt_test::reverse_blocks_missing_sync(n, din.get(), dout.get()) == cudaErrorLaunchFailure);
    }
    simt::CheckScope unchecked(0);  // without it, the results show it in some orders only
    CUDA_REQUIRE(simt_test::reverse_blocks_missing_sync(n, din.get(), dout.get()));
    const auto o = dout.download();
    int wrong = 0;
    for (int i = 0; i < n; ++i) wrong += o[i] != in[i ^ 255];
    MESSAGE("missing __syncthreads, order " << (order == simt::Order::forward ? "forward" : "reverse") << ": "
                                            << wrong << " of " << n << " wrong");
    wrong_total += wrong;
  }
  simt::set_order(saved);
  CHECK(wrong_total > 0);
}

TEST_CASE("simt: unwritten dynamic shared memory reads as NaN") {
  DeviceArray<float> out(32);
  if (simt::check_available()) {
    simt::CheckScope checked(simt::check_uninit);  // SIMT_CHECK=uninit reports the read
    CHECK(simt_test::read_unwritten_dynamic_shared(out.get()) == cudaErrorLaunchFailure);
  }
  simt::CheckScope unchecked(0);  // without it, the results are NaN
  CUDA_REQUIRE(simt_test::read_unwritten_dynamic_shared(out.get()));
  for (float v : out.download()) CHECK(std::isnan(v));
}

namespace {
struct ChildResult {
  bool aborted;
  std::string stderr_text;
};

// Runs body in a fork()ed child with stderr captured through a pipe, so that an abort() leaves
// doctest (in the parent) alive.
template <class F>
ChildResult run_in_child(F body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) signal(sig, SIG_DFL);  // not doctest's report
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    body();
    _exit(0);  // not aborted: skip doctest's and the sanitizers' exit handlers
  }
  close(fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t got; (got = read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, size_t(got));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return {WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, text};
}

void expect_divergence_abort(cudaError_t (*bug)(float*), const char* where) {
  const ChildResult r = run_in_child([bug] {
    float* y = nullptr;
    if (cudaMalloc(&y, 1024 * sizeof(float)) == cudaSuccess) bug(y);
  });
  INFO("child stderr: " << r.stderr_text);
  CHECK(r.aborted);
  CHECK(r.stderr_text.find("simt: divergent barrier in block " + std::string(where) + " thread (") !=
        std::string::npos);
}

cudaError_t early_return_1000(float* y) { return simt_test::bug_early_return(1000, y); }
}  // namespace

TEST_CASE("simt: divergent barriers abort naming the block and thread") {
  in_every_order([] {
    expect_divergence_abort(early_return_1000, "(3,0,0)");  // the last block has 232 threads in range
    expect_divergence_abort(simt_test::bug_split_barrier, "(0,0,0)");
    expect_divergence_abort(simt_test::bug_shuffle_vs_barrier, "(0,0,0)");
    expect_divergence_abort(simt_test::bug_mixed_masks, "(0,0,0)");
  });
}
#endif  // SIMT_EMULATE

// ---- cuBLAS ------------------------------------------------------------------------------------------
namespace {

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta, float* c,
                    int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const double* alpha, const double* a, int lda, const double* b, int ldb, const double* beta,
                    double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const float* alpha, const float* a, int lda, long long sa, const float* b, int ldb,
                            long long sb, const float* beta, float* c, int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const double* alpha, const double* a, int lda, long long sa, const double* b, int ldb,
                            long long sb, const double* beta, double* c, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

// The textbook column-major loop, in double: C = alpha * op(A) op(B) + beta * C (C unread if beta == 0).
template <class T>
void reference_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha, const T* a,
                    int lda, const T* b, int ldb, double beta, T* c, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int l = 0; l < k; ++l) {
        const double x = ta == CUBLAS_OP_N ? a[i + size_t(l) * lda] : a[l + size_t(i) * lda];
        const double y = tb == CUBLAS_OP_N ? b[l + size_t(j) * ldb] : b[j + size_t(l) * ldb];
        sum += x * y;
      }
      T& out = c[i + size_t(j) * ldc];
      out = T(beta == 0 ? alpha * sum : alpha * sum + beta * out);
    }
}

const cublasOperation_t kOps[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
const char* op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C"; }

struct Handle {
  cublasHandle_t h = nullptr;
  Handle() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasDestroy(h); }
};

// One (strided batched, when batch > 1) gemm against the reference, every element of C's storage
// compared: the padding rows beyond m must be left alone.
template <class T>
void check_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, T beta, int batch,
                bool broadcast_a, bool nan_c) {
  INFO(op_name(ta) << op_name(tb) << " m n k " << m << " " << n << " " << k << " alpha " << alpha << " beta "
                   << beta << " batch " << batch);
  const int rows_a = ta == CUBLAS_OP_N ? m : k, cols_a = ta == CUBLAS_OP_N ? k : m;
  const int rows_b = tb == CUBLAS_OP_N ? k : n, cols_b = tb == CUBLAS_OP_N ? n : k;
  const int lda = rows_a + 3, ldb = rows_b + 1, ldc = m + 2;
  const long long sa = broadcast_a ? 0 : (long long)lda * cols_a + 5, sb = (long long)ldb * cols_b + 7,
                  sc = (long long)ldc * n + 3;
  const size_t size_a = size_t(sa * (batch - 1) + (long long)lda * cols_a);
  const size_t size_b = size_t(sb * (batch - 1) + (long long)ldb * cols_b);
  const size_t size_c = size_t(sc * (batch - 1) + (long long)ldc * n);
  const auto a = random_values<T>(size_a, -1, 1, 10), b = random_values<T>(size_b, -1, 1, 11);
  auto c = random_values<T>(size_c, -1, 1, 12);
  if (nan_c) std::fill(c.begin(), c.end(), std::numeric_limits<T>::quiet_NaN());
  auto expected = c;
  for (int i = 0; i < batch; ++i)
    reference_gemm(ta, tb, m, n, k, alpha, a.data() + i * sa, lda, b.data() + i * sb, ldb, beta,
                   expected.data() + i * sc, ldc);
  // Where no matrix lives (gaps between batch entries, padding rows), C must be unchanged.
  std::vector<bool> in_matrix(size_c, false);
  for (int i = 0; i < batch; ++i)
    for (int j = 0; j < n; ++j)
      for (int r = 0; r < m; ++r) in_matrix[size_t(i * sc + r + (long long)j * ldc)] = true;

  DeviceArray<T> da(a), db(b), dc(c);
  Handle handle;
  const cublasStatus_t status =
      batch == 1 && !broadcast_a
          ? gemm(handle.h, ta, tb, m, n, k, &alpha, da.get(), lda, db.get(), ldb, &beta, dc.get(), ldc)
          : gemm_batched(handle.h, ta, tb, m, n, k, &alpha, da.get(), lda, sa, db.get(), ldb, sb, &beta, dc.get(),
                         ldc, sc, batch);
  REQUIRE(status == CUBLAS_STATUS_SUCCESS);
  const auto got = dc.download();
  const double tol = std::is_same<T, float>::value ? 2e-5 : 1e-12;
  int bad = 0;
  for (size_t i = 0; i < size_c; ++i) {
    const bool ok = in_matrix[i] ? std::fabs(double(got[i]) - double(expected[i])) <= tol * (1 + std::fabs(double(expected[i])))
                                 : (std::isnan(double(got[i])) ? std::isnan(double(c[i])) : got[i] == c[i]);
    if (!ok && bad++ < 3) FAIL_CHECK("C[" << i << "] = " << got[i] << ", expected " << expected[i]);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("cublas: gemm matches a column-major loop for every op pair", T, float, double) {
  for (cublasOperation_t ta : kOps)
    for (cublasOperation_t tb : kOps) {
      check_gemm<T>(ta, tb, 13, 7, 9, T(1.5), T(-0.5), 1, false, false);
      check_gemm<T>(ta, tb, 1, 1, 1, T(1), T(1), 1, false, false);
    }
}

TEST_CASE_TEMPLATE("cublas: beta = 0 never reads C, alpha = 0 or k = 0 only scales C", T, float, double) {
  for (cublasOperation_t ta : kOps) check_gemm<T>(ta, CUBLAS_OP_N, 6, 5, 4, T(2), T(0), 1, false, true);
  check_gemm<T>(CUBLAS_OP_N, CUBLAS_OP_T, 6, 5, 4, T(0), T(3), 1, false, false);
  check_gemm<T>(CUBLAS_OP_N, CUBLAS_OP_N, 6, 5, 0, T(2), T(-1), 1, false, false);
  check_gemm<T>(CUBLAS_OP_T, CUBLAS_OP_N, 6, 5, 0, T(2), T(0), 1, false, true);

  // alpha = 0: A and B are not read either (NaN there does not reach C), as in BLAS and cuBLAS.
  const std::vector<T> nan(16, std::numeric_limits<T>::quiet_NaN()), twos(16, T(2));
  DeviceArray<T> a(nan), b(nan), c(twos);
  const T zero = 0, three = 3;
  Handle handle;
  REQUIRE(gemm(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &zero, a.get(), 4, b.get(), 4, &three, c.get(), 4) ==
          CUBLAS_STATUS_SUCCESS);
  for (T v : c.download()) CHECK(v == T(6));
}

TEST_CASE_TEMPLATE("cublas: strided batched gemm", T, float, double) {
  for (cublasOperation_t ta : kOps)
    for (cublasOperation_t tb : kOps) check_gemm<T>(ta, tb, 5, 6, 7, T(0.75), T(0.25), 3, false, false);
  check_gemm<T>(CUBLAS_OP_N, CUBLAS_OP_T, 5, 6, 7, T(1), T(0), 4, true, true);  // strideA = 0: one A for all
}

TEST_CASE("cublas: invalid arguments return CUBLAS_STATUS_INVALID_VALUE and leave C alone") {
  Handle handle;
  const std::vector<float> host(64, 1.f);
  DeviceArray<float> a(host), b(host), c(host);
  const float one = 1.f;
  const auto sgemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc) {
    return cublasSgemm(handle.h, ta, tb, m, n, k, &one, a.get(), lda, b.get(), ldb, &one, c.get(), ldc);
  };
  const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  CHECK(sgemm(N, N, 4, 4, 4, 4, 4, 4) == CUBLAS_STATUS_SUCCESS);
  c.upload(host);
  CHECK(sgemm(N, N, -1, 4, 4, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(N, N, 4, -1, 4, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(N, N, 4, 4, -1, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(N, N, 4, 4, 2, 3, 2, 4) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  CHECK(sgemm(T, N, 4, 4, 2, 1, 2, 4) == CUBLAS_STATUS_INVALID_VALUE);  // lda < k
  CHECK(sgemm(T, N, 2, 4, 4, 3, 4, 2) == CUBLAS_STATUS_INVALID_VALUE);  // lda < k
  CHECK(sgemm(N, N, 4, 4, 4, 4, 3, 4) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
  CHECK(sgemm(N, T, 4, 4, 2, 4, 3, 4) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < n
  CHECK(sgemm(N, N, 4, 4, 4, 4, 4, 3) == CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  CHECK(sgemm(N, N, 0, 4, 4, 0, 4, 1) == CUBLAS_STATUS_INVALID_VALUE);  // lda < max(1, m)
  CHECK(sgemm(N, N, 4, 4, 4, 4, 4, 4) != CUBLAS_STATUS_INVALID_VALUE);
  c.upload(host);
  // An op outside N/T/C. cuBLAS's enum has no fixed underlying type, so only its enumerators and
  // values in their bit range (0-3) may be cast into it: CONJG is the one unsupported value.
  CHECK(sgemm(CUBLAS_OP_CONJG, N, 4, 4, 4, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(N, CUBLAS_OP_CONJG, 4, 4, 4, 4, 4, 4) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(sgemm(N, N, 4, 4, 0, 4, 0, 4) == CUBLAS_STATUS_INVALID_VALUE);  // ldb < max(1, k)
  CHECK(cublasSgemm(handle.h, N, N, 4, 4, 4, nullptr, a.get(), 4, b.get(), 4, &one, c.get(), 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(nullptr, N, N, 4, 4, 4, &one, a.get(), 4, b.get(), 4, &one, c.get(), 4) ==
        CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(cublasSgemmStridedBatched(handle.h, N, N, 4, 4, 4, &one, a.get(), 4, 16, b.get(), 4, 16, &one, c.get(), 4,
                                  16, -1) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemmStridedBatched(handle.h, N, N, 4, 4, 4, &one, a.get(), 3, 16, b.get(), 4, 16, &one, c.get(), 4,
                                  16, 2) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(c.download() == host);  // nothing was written by the rejected calls
  // Nothing to do is not an error.
  CHECK(sgemm(N, N, 0, 4, 4, 1, 4, 1) == CUBLAS_STATUS_SUCCESS);
  CHECK(sgemm(N, N, 4, 0, 4, 4, 4, 4) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSgemmStridedBatched(handle.h, N, N, 4, 4, 4, &one, a.get(), 4, 16, b.get(), 4, 16, &one, c.get(), 4,
                                  16, 0) == CUBLAS_STATUS_SUCCESS);
  CHECK(c.download() == host);
}

// GemmEx with 16-bit A, B and C and f32 compute: on small integers every f32 sum is exact in any
// order, so C must be the exact alpha AB + beta C rounded once (to nearest even) to C's type, bit
// for bit: 257 -> 256 in bf16 (a tie, to even), 2049 -> 2048 in f16.
template <class H>
void check_gemm_ex_16(cudaDataType type) {
  const int m = 5, n = 4, k = 9;  // column-major A (m, k), B (k, n), C (m, n)
  std::vector<H> a, b, c;
  std::vector<double> av, bv, cv;
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> small(-16, 16);
  for (int i = 0; i < m * k; ++i) av.push_back(small(gen)), a.push_back(H(av.back()));
  for (int i = 0; i < k * n; ++i) bv.push_back(small(gen)), b.push_back(H(bv.back()));
  for (int i = 0; i < m * n; ++i) cv.push_back(small(gen)), c.push_back(H(cv.back()));
  av[0] = 128, a[0] = H(128.0), bv[0] = 2, b[0] = H(2.0);  // C(0, 0) near 256, where bf16 holds even integers only
  DeviceArray<H> da(a), db(b), dc(c);
  Handle handle;
  const float alpha = 1, beta = 1;
  REQUIRE(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.get(), type, m, db.get(), type, k,
                       &beta, dc.get(), type, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  const auto got = dc.download();
  int bad = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double exact = cv[i + j * m];
      for (int l = 0; l < k; ++l) exact += av[i + l * m] * bv[l + j * k];
      const H want(exact);
      if (std::memcmp(&got[i + j * m], &want, sizeof(H)) != 0 && bad++ < 3)
        FAIL_CHECK("C(" << i << ", " << j << ") = " << float(got[i + j * m]) << ", expected " << float(want)
                        << " (exact " << exact << ")");
    }
  CHECK(bad == 0);
  // Mixed 16-bit inputs are not a GemmEx combination.
  CHECK(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.get(), CUDA_R_16BF, m, db.get(),
                     CUDA_R_16F, k, &beta, dc.get(), type, m, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_CASE("cublas: GemmEx in bf16 and f16 with f32 compute rounds the exact result once") {
  check_gemm_ex_16<reel::bf16>(CUDA_R_16BF);
  check_gemm_ex_16<reel::f16>(CUDA_R_16F);
}

TEST_CASE("cublas: GemmEx with CUBLAS_COMPUTE_32F_FAST_TF32 drops what TF32 cannot hold") {
  // A (1, 64) all 1 + 2^-12, B (64, 1) all 1: TF32 (10 fraction bits) holds 1, not 1 + 2^-12 (below
  // half its ulp), so the product is 64 with TF32 and 64 + 1/64 without.
  const int k = 64;
  DeviceArray<float> da(std::vector<float>(k, 1.0f + 0x1p-12f)), db(std::vector<float>(k, 1.0f)), dc(1);
  Handle handle;
  const float alpha = 1, beta = 0;
  for (cublasComputeType_t compute : {CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F}) {
    REQUIRE(cublasGemmEx(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, k, &alpha, da.get(), CUDA_R_32F, 1, db.get(),
                         CUDA_R_32F, k, &beta, dc.get(), CUDA_R_32F, 1, compute,
                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    CHECK(dc.download()[0] == (compute == CUBLAS_COMPUTE_32F ? 64.0f + 1.0f / 64 : 64.0f));
  }
}

// GemmGroupedBatchedEx: each problem is GemmEx's, bit for bit (here: against GemmEx calls on copies);
// a group of two sharing its arguments and a group of one; the host arrays are read at the call, the
// pointer arrays are device memory; in the emulation the whole call is one piece of work.
template <class T>
void check_grouped(cudaDataType type, cublasComputeType_t compute) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // the scale type
  const auto vals = [](size_t n, unsigned seed) {
    std::vector<T> v;
    for (float f : random_values(n, -1, 1, seed)) v.push_back(T(f));
    return v;
  };
  // Group 0: two (5, 4) = (5, 7) (7, 4) products, A transposed (stored (7, 5)); group 1: (3, 6) =
  // (3, 2) (2, 6), B transposed (stored (6, 2)), beta = 1.
  DeviceArray<T> a0(vals(35, 1)), b0(vals(28, 2)), c0(vals(20, 3)), a1(vals(35, 4)), b1(vals(28, 5)), c1(vals(20, 6));
  DeviceArray<T> a2(vals(6, 7)), b2(vals(12, 8)), c2(vals(18, 9));
  DeviceArray<T> r0(c0.download()), r1(c1.download()), r2(c2.download());  // GemmEx's copies
  Handle handle;
  const S alpha[2] = {1, S(0.5)}, beta[2] = {0, 1};
  const cublasOperation_t ta[2] = {CUBLAS_OP_T, CUBLAS_OP_N}, tb[2] = {CUBLAS_OP_N, CUBLAS_OP_T};
  const int m[2] = {5, 3}, n[2] = {4, 6}, k[2] = {7, 2}, lda[2] = {7, 3}, ldb[2] = {7, 6}, ldc[2] = {5, 3},
            size[2] = {2, 1};
  DeviceArray<const void*> A(std::vector<const void*>{a0.get(), a1.get(), a2.get()});
  DeviceArray<const void*> B(std::vector<const void*>{b0.get(), b1.get(), b2.get()});
  DeviceArray<void*> C(std::vector<void*>{c0.get(), c1.get(), c2.get()});
#if defined(SIMT_EMULATE)
  const int64_t work = simt::work_issued();
#endif
  REQUIRE(cublasGemmGroupedBatchedEx(handle.h, ta, tb, m, n, k, alpha, A.get(), type, lda, B.get(), type, ldb, beta,
                                     C.get(), type, ldc, 2, size, compute) == CUBLAS_STATUS_SUCCESS);
#if defined(SIMT_EMULATE)
  CHECK(simt::work_issued() == work + 1);
#endif
  const auto ex = [&](int g, const DeviceArray<T>& a, const DeviceArray<T>& b, DeviceArray<T>& c) {
    REQUIRE(cublasGemmEx(handle.h, ta[g], tb[g], m[g], n[g], k[g], &alpha[g], a.get(), type, lda[g], b.get(), type,
                         ldb[g], &beta[g], c.get(), type, ldc[g], compute, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  };
  ex(0, a0, b0, r0), ex(0, a1, b1, r1), ex(1, a2, b2, r2);
  const auto same = [](const std::vector<T>& x, const std::vector<T>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
  };
  CHECK(same(c0.download(), r0.download()));
  CHECK(same(c1.download(), r1.download()));
  CHECK(same(c2.download(), r2.download()));
  // Refused without touching C: a short lda, a null array, a negative count, mixed types.
  const std::vector<T> before = c0.download();
  const int short_lda[2] = {4, 3};
  CHECK(cublasGemmGroupedBatchedEx(handle.h, ta, tb, m, n, k, alpha, A.get(), type, short_lda, B.get(), type, ldb,
                                   beta, C.get(), type, ldc, 2, size, compute) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmGroupedBatchedEx(handle.h, ta, tb, m, n, k, alpha, nullptr, type, lda, B.get(), type, ldb, beta,
                                   C.get(), type, ldc, 2, size, compute) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmGroupedBatchedEx(handle.h, ta, tb, m, n, k, alpha, A.get(), type, lda, B.get(), type, ldb, beta,
                                   C.get(), type, ldc, -1, size, compute) == CUBLAS_STATUS_INVALID_VALUE);
  if (type != CUDA_R_64F)
    CHECK(cublasGemmGroupedBatchedEx(handle.h, ta, tb, m, n, k, alpha, A.get(), CUDA_R_16BF, lda, B.get(), CUDA_R_16F,
                                     ldb, beta, C.get(), type, ldc, 2, size, compute) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(same(c0.download(), before));
}

TEST_CASE("cublas: GemmGroupedBatchedEx computes each problem as GemmEx, in one call") {
  check_grouped<float>(CUDA_R_32F, CUBLAS_COMPUTE_32F);
  check_grouped<float>(CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32);
  check_grouped<double>(CUDA_R_64F, CUBLAS_COMPUTE_64F);
  check_grouped<reel::bf16>(CUDA_R_16BF, CUBLAS_COMPUTE_32F);
  check_grouped<reel::f16>(CUDA_R_16F, CUBLAS_COMPUTE_32F);
}

TEST_CASE("cublas: handle, stream and pointer mode") {
  Handle handle;
  cudaStream_t stream = nullptr, got = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&stream));
  CHECK(cublasSetStream(handle.h, stream) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasGetStream(handle.h, &got) == CUBLAS_STATUS_SUCCESS);
  CHECK(got == stream);
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_DEVICE;
  CHECK(cublasGetPointerMode(handle.h, &mode) == CUBLAS_STATUS_SUCCESS);
  CHECK(mode == CUBLAS_POINTER_MODE_HOST);
  CHECK(cublasSetStream(handle.h, nullptr) == CUBLAS_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaStreamDestroy(stream));
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)) == "CUBLAS_STATUS_INVALID_VALUE");
  CHECK(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)) ==
        "an unsupported value or parameter was passed to the function");
}

// ---- timings (not a test: ./test_simt -tc='simt: timings' --no-skip) ------------------------------
TEST_CASE("simt: timings" * doctest::skip()) {
  const auto best_ms = [](auto&& run) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      REQUIRE(run() == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
#if defined(SIMT_EMULATE)
  std::printf("simt timings, SIMT_WORKERS=%u, best of 3:\n", simt::workers());
#endif
  const int n = 1 << 20, s = 256;
  DeviceArray<float> x(random_values(n, 0, 1, 13)), y(n), out(1);
  DeviceArray<float> a(random_values(s * s, -1, 1, 14)), b(random_values(s * s, -1, 1, 15)), c(s * s);
  std::printf("  axpy 1M (1024 blocks x 256, grid-stride)  %8.2f ms\n",
              best_ms([&] { return simt_test::axpy(n, 1.1f, x.get(), y.get()); }));
  std::printf("  sgemm 256^3 (16x16 tiles)                 %8.2f ms\n",
              best_ms([&] { return simt_test::sgemm_tiled(s, s, s, a.get(), b.get(), c.get()); }));
  std::printf("  reduce 1M (1024 blocks x 256)             %8.2f ms\n",
              best_ms([&] { return simt_test::reduce_sum(n, x.get(), out.get(), 256, 1024); }));
  std::printf("  softmax 1024 x 1024 (256 threads a row)   %8.2f ms\n",
              best_ms([&] { return simt_test::softmax_rows(1024, 1024, x.get(), y.get()); }));
}
