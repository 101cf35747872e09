// The one header of helpers shared by the test suites: the devices every op test runs on, value
// comparison against references, reproducible f64 inputs, finite-difference gradient checks of
// kernel-level backward functions, the f64 reference GEMM, bit-identity and thread-count loops for the determinism checks,
// poisoned allocations, and the reel::Error check.
#pragma once
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/allocator.h"

#include "core/random.h"
#include "core/tensor.h"

namespace reel::testing {

// Every device this build and machine offer: cpu, then cuda:0 when available.
inline std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_available()) d.push_back(Device::cuda(0));
  return d;
}

// A suite whose every case needs a CUDA device says so once, at namespace scope:
//   REEL_TEST_REQUIRES_CUDA();
// test_main.cpp then exits 77 (CTest: skipped) with a message when no CUDA device answers.
inline bool& requires_cuda_flag() {
  static bool flag = false;
  return flag;
}
#define REEL_TEST_REQUIRES_CUDA() \
  static const bool reel_test_requires_cuda_ = (::reel::testing::requires_cuda_flag() = true)

// The values of any tensor as doubles, in row-major order.
inline std::vector<double> values(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).to_vector<double>();  // to_vector records nothing
}

// got ≈ expected elementwise: |g - e| <= atol + rtol * |e|, shapes equal, NaN only where expected,
// an infinity only where the same one is expected.
inline void check_close(const Tensor& got, const std::vector<double>& expected, double rtol = 1e-6,
                        double atol = 1e-6) {
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == expected.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(expected[i]);
    const bool ok = both_nan || g[i] == expected[i] || std::fabs(g[i] - expected[i]) <= atol + rtol * std::fabs(expected[i]);
    if (!ok && bad++ < 5) FAIL_CHECK("element " << i << ": got " << g[i] << ", expected " << expected[i]);
  }
  CHECK(bad == 0);
}

inline void check_close(const Tensor& got, const Tensor& expected, double rtol = 1e-6, double atol = 1e-6) {
  REQUIRE(shape_str(got.shape()) == shape_str(expected.shape()));
  check_close(got, values(expected), rtol, atol);
}

// ---- reproducible f64 inputs (contiguous, on the CPU) -------------------------------------------
// Uniform values in [lo, hi) drawn from `g`, or from a fresh generator of `seed`.
// Whether two lists of f32 buffers (e.g. every parameter's gradient) are equal to the bit.
// The f64 reference GEMM: a (M, K) @ b (K, N), given as contiguous values; (M, N) out.
inline std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t M,
                                      int64_t K, int64_t N) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}

inline bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

inline Tensor uniform_f64(Generator& g, const Shape& shape, double lo = -1.0, double hi = 1.0) {
  std::vector<double> u = values(rand(shape, DType::f64, Device::cpu(), &g));
  for (double& x : u) x = lo + (hi - lo) * x;
  return from_vector<double>(u, shape);
}
inline Tensor uniform_f64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  return uniform_f64(g, shape, lo, hi);
}
// (B, T) i64 token ids uniform in [0, V), drawn on the host from `seed`, then put on `device`: the
// same ids on every device.
inline Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed, Device device = Device::cpu()) {
  Generator g(seed);
  std::vector<int64_t> ids;
  for (double u : values(rand({B, T}, DType::f64, Device::cpu(), &g)))
    ids.push_back(static_cast<int64_t>(u * static_cast<double>(V)));
  return from_vector(ids, {B, T}, device);
}
// N(0, 1) values drawn from `g`.
inline Tensor normal_f64(Generator& g, const Shape& shape) { return randn(shape, DType::f64, Device::cpu(), &g); }

// ---- finite differences of kernel-level backward functions (no tape involved) ----------------
// The scalar under test is L = sum(out * weights) for fixed random weights; its gradient with
// respect to `out` is `weights`, so an analytic backward fed dout = weights must return dL/dinput.
// check_gradient perturbs every element of an f64 input by +h and -h in place, evaluates L both
// times and compares the central difference (L+ - L-) / 2h with the analytic gradient.
// In f64 with h = 1e-5 the truncation error is ~h^2 = 1e-10 relative and the rounding error
// ~1e-16 |L| / h, so a relative tolerance of 1e-6 has a wide margin and still catches any
// wrong term (those are O(1) relative).
// sum(out * weights) in f64; weights has out's shape.
inline double weighted_sum(const Tensor& out, const Tensor& weights) {
  const std::vector<double> o = values(out), w = values(weights);
  REQUIRE(o.size() == w.size());
  double s = 0;
  for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
  return s;
}

// Compares `analytic` (input's shape) with central differences of loss() w.r.t. every element of
// `input` (contiguous f64 on the CPU, perturbed in place and restored). An element passes when
// |numeric - analytic| <= rtol * (|analytic| + 1e-3 * max|analytic|) + 1e-12: relative, with a
// floor for elements whose true gradient is ~0.
template <typename Loss>
void check_gradient(const char* what, const Tensor& input, const Tensor& analytic, Loss&& loss, double rtol = 1e-6,
                    double h = 1e-5) {
  const std::string name = what;  // doctest prints a const char* as a pointer
  CAPTURE(name);
  REQUIRE(input.dtype() == DType::f64);
  REQUIRE(input.is_contiguous());
  REQUIRE(shape_str(input.shape()) == shape_str(analytic.shape()));
  const std::vector<double> a = values(analytic);
  double amax = 0;
  for (double v : a) amax = std::max(amax, std::fabs(v));
  double* p = input.data<double>();
  int bad = 0;
  for (int64_t i = 0; i < input.numel(); ++i) {
    const double x0 = p[i];
    p[i] = x0 + h;
    const double lp = loss();
    p[i] = x0 - h;
    const double lm = loss();
    p[i] = x0;
    const double numeric = (lp - lm) / (2 * h);
    const double err = std::fabs(numeric - a[static_cast<size_t>(i)]);
    if (err > rtol * (std::fabs(a[static_cast<size_t>(i)]) + 1e-3 * amax) + 1e-12 && bad++ < 5)
      FAIL_CHECK(name << " element " << i << ": finite difference " << numeric << ", analytic "
                      << a[static_cast<size_t>(i)]);
  }
  CHECK(bad == 0);
}

// Bitwise equality of two tensors' values (same shape and dtype, on any devices): determinism checks.
inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (shape_str(a.shape()) != shape_str(b.shape()) || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.to(Device::cpu()).contiguous(), cb = b.to(Device::cpu()).contiguous();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  return a.numel() == 0 || std::equal(pa, pa + ca.nbytes(), pb);
}

// Runs fn once with each OpenMP thread count of `counts`, in order, and restores the previous
// count afterwards (also when a check throws): the determinism tests compare those runs' results.
inline void for_thread_counts(std::initializer_list<int> counts, const std::function<void()>& fn) {
  struct Restore {
    int threads;
    ~Restore() { omp_set_num_threads(threads); }
  } restore{omp_get_max_threads()};
  for (int threads : counts) {
    omp_set_num_threads(threads);
    fn();
  }
}

// Poisoned allocations (0xFF bytes: NaN, -1) for the scope of a test case, so an output element a
// kernel forgets to write fails the comparison.
struct Poisoned {
  Poisoned() { set_poison_allocations(true); }
  ~Poisoned() { set_poison_allocations(false); }
};

}  // namespace reel::testing

// The expression throws reel::Error whose message contains `text`.
#define CHECK_REEL_ERROR(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), ::reel::Error)
