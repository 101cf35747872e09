// Finite-difference gradient checks for kernel-level backward functions (no tape involved).
//
// The scalar under test is L = sum(out * weights) for fixed random weights; its gradient with
// respect to `out` is `weights`, so an analytic backward fed dout = weights must return dL/dinput.
// check_gradient perturbs every element of an f64 input by +h and -h in place, evaluates L both
// times and compares the central difference (L+ - L-) / 2h with the analytic gradient.
// In f64 with h = 1e-5 the truncation error is ~h^2 = 1e-10 relative and the rounding error
// ~1e-16 |L| / h, so a relative tolerance of 1e-6 has a wide margin and still catches any
// wrong term (those are O(1) relative).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "testing.h"

namespace reel::testing {

// A contiguous f64 CPU tensor of uniform values in [lo, hi), reproducible from `seed`.
inline Tensor uniform_f64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  std::vector<double> u = values(rand(shape, DType::f64, Device::cpu(), &g));
  for (double& x : u) x = lo + (hi - lo) * x;
  return from_vector<double>(u, shape);
}

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

// Bitwise equality of two tensors' values (same shape): determinism checks.
inline bool bit_identical(const Tensor& a, const Tensor& b) {
  if (shape_str(a.shape()) != shape_str(b.shape()) || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  return a.numel() == 0 || std::equal(pa, pa + ca.nbytes(), pb);
}

}  // namespace reel::testing
