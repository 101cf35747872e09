// Helpers shared by the test suites: value comparison against references, error checks, and
// the list of devices every op test runs on.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

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

// got ≈ expected elementwise: |g - e| <= atol + rtol * |e|, shapes equal, NaN only where expected.
inline void check_close(const Tensor& got, const std::vector<double>& expected, double rtol = 1e-6,
                        double atol = 1e-6) {
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == expected.size());
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(expected[i]);
    const bool ok = both_nan || std::fabs(g[i] - expected[i]) <= atol + rtol * std::fabs(expected[i]);
    if (!ok && bad++ < 5) FAIL_CHECK("element " << i << ": got " << g[i] << ", expected " << expected[i]);
  }
  CHECK(bad == 0);
}

inline void check_close(const Tensor& got, const Tensor& expected, double rtol = 1e-6, double atol = 1e-6) {
  REQUIRE(shape_str(got.shape()) == shape_str(expected.shape()));
  check_close(got, values(expected), rtol, atol);
}

}  // namespace reel::testing

// The expression throws reel::Error whose message contains `text`.
#define CHECK_REEL_ERROR(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(text), ::reel::Error)
