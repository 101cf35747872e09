// tests/test_kernel_lab.cpp: the kernel lab's LayerNorm forward kernels
// (examples/kernel_lab/layernorm_lab.h). v1, v2 and v3 must agree with an f64 reference to 1e-5
// (y, mean and rstd) on shapes with ragged tails: rows not a multiple of a block's rows (256 for
// v1, 8 for v2), columns below, between and above multiples of 32 and of v3's 256 threads; in every
// scheduling order of the emulator. v4, the planted race, must show: run with SIMT_CHECK=race, the
// race checker must stop its launch with a report naming layernorm_lab.cu; without the checker its
// answer must be wrong in the emulator's forward order. Every output starts as NaN, so an element
// a kernel never writes fails.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "examples/kernel_lab/layernorm_lab.h"
#include "testing.h"
#if defined(REEL_CUDA_EMULATED)
#include "kernels/simt/simt.h"  // simt::set_order, last: it defines the CUDA keywords as macros
#endif

using namespace reel;
using namespace reel::testing;

REEL_TEST_REQUIRES_CUDA();

namespace {

constexpr float kEps = 1e-5f;
constexpr double kTol = 1e-5;

struct Case {
  int64_t R, C;
};
// (R, C): one element; fewer columns than a warp; a ragged warp (C = 33) over two v1 blocks with
// one row in the second; C above v3's block of 256 with a ragged tail; wide rows.
const Case kCases[] = {{1, 1}, {3, 5}, {9, 31}, {257, 33}, {13, 300}, {6, 1000}};

struct Problem {
  int64_t R, C;
  std::vector<float> x, w, b;         // (R, C), (C), (C)
  std::vector<double> y, mean, rstd;  // the f64 reference: (R, C), (R), (R)
  Tensor dx, dw, db, dy, dmean, drstd;  // on cuda:0

  Problem(int64_t r, int64_t c) : R(r), C(c) {
    std::mt19937 gen(static_cast<unsigned>(R * 1000 + C));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t i = 0; i < R; ++i) {
      const float offset = 3.f * static_cast<float>(i % 5) - 6.f;  // rows away from 0
      for (int64_t j = 0; j < C; ++j) x.push_back(offset + normal(gen));
    }
    for (int64_t j = 0; j < C; ++j) {
      w.push_back(1.f + 0.5f * normal(gen));
      b.push_back(normal(gen));
    }
    for (int64_t i = 0; i < R; ++i) {
      const float* xr = x.data() + i * C;
      double s = 0, v = 0;
      for (int64_t j = 0; j < C; ++j) s += xr[j];
      const double m = s / static_cast<double>(C);
      for (int64_t j = 0; j < C; ++j) v += (xr[j] - m) * (xr[j] - m);
      const double rs = 1.0 / std::sqrt(v / static_cast<double>(C) + kEps);
      for (int64_t j = 0; j < C; ++j) y.push_back((xr[j] - m) * rs * w[static_cast<size_t>(j)] + b[static_cast<size_t>(j)]);
      mean.push_back(m);
      rstd.push_back(rs);
    }
    const Device cuda = Device::cuda(0);
    dx = from_vector(x, {R, C}, cuda);
    dw = from_vector(w, {C}, cuda);
    db = from_vector(b, {C}, cuda);
    dy = empty({R, C}, DType::f32, cuda);
    dmean = empty({R}, DType::f32, cuda);
    drstd = empty({R}, DType::f32, cuda);
  }

  void run(lab::Version v) const {
    for (const Tensor* t : {&dy, &dmean, &drstd}) t->fill_(std::numeric_limits<double>::quiet_NaN());
    lab::layernorm_forward(v, dx.data<float>(), dw.data<float>(), db.data<float>(), kEps, dy.data<float>(),
                           dmean.data<float>(), drstd.data<float>(), R, C);
  }
  void check() const {
    check_close(dy, y, kTol, kTol);
    check_close(dmean, mean, kTol, kTol);
    check_close(drstd, rstd, kTol, kTol);
  }
  // Whether every output is within kTol of the reference (no doctest assertion).
  bool agrees() const {
    auto close = [](const Tensor& got, const std::vector<double>& ref) {
      const std::vector<double> g = values(got);
      for (size_t i = 0; i < g.size(); ++i)
        if (!(std::fabs(g[i] - ref[i]) <= kTol * (1 + std::fabs(ref[i])))) return false;
      return true;
    };
    return close(dy, y) && close(dmean, mean) && close(drstd, rstd);
  }
};

// Runs fn once per scheduling order of the emulator (forward, reverse, shuffle), or once on a GPU.
void for_each_order(const std::function<void()>& fn) {
#if defined(REEL_CUDA_EMULATED)
  const simt::Order saved = simt::order();
  for (simt::Order o : {simt::Order::forward, simt::Order::reverse, simt::Order::shuffle}) {
    simt::set_order(o);
    CAPTURE(static_cast<int>(o));
    fn();
  }
  simt::set_order(saved);
#else
  fn();
#endif
}

}  // namespace

TEST_CASE("kernel lab: v1, v2 and v3 agree with the f64 reference to 1e-5 on ragged shapes") {
  for (const Case& c : kCases) {
    const Problem p(c.R, c.C);
    for (lab::Version v : {lab::Version::v1, lab::Version::v2, lab::Version::v3}) {
      CAPTURE(c.R);
      CAPTURE(c.C);
      CAPTURE(lab::version_name(v));
      for_each_order([&] {
        p.run(v);
        p.check();
      });
    }
  }
}

TEST_CASE("kernel lab: the timed launches run the kernel and return one time each") {
  const Problem p(37, 75);
  for (const Tensor* t : {&p.dy, &p.dmean, &p.drstd}) t->fill_(std::numeric_limits<double>::quiet_NaN());
  const std::vector<double> s =
      lab::time_launches(lab::Version::v2, p.dx.data<float>(), p.dw.data<float>(), p.db.data<float>(), kEps,
                         p.dy.data<float>(), p.dmean.data<float>(), p.drstd.data<float>(), p.R, p.C, 3);
  CHECK(s.size() == 3);
  for (double t : s) CHECK(t >= 0);
  p.check();
}

#if defined(REEL_CUDA_EMULATED)
// The race between lane 0 of each warp writing its partial and warp 0 reading them: with the race
// checker on, the launch raises reel::Error; without it, the forward order runs warp 0 ahead of the
// warps that write, and several rows of different means give a wrong answer.
TEST_CASE("kernel lab: v4's planted race is reported, or gives a wrong answer in forward order") {
  const Problem p(9, 300);
  const simt::Order saved = simt::order();
  simt::set_order(simt::Order::forward);
  const char* check = std::getenv("SIMT_CHECK");
  const bool checking = check && std::string(check).find("race") != std::string::npos;
  bool reported = false;
  try {
    p.run(lab::Version::v4);
  } catch (const Error& e) {
    reported = true;
    MESSAGE("the race checker reported: " << e.what());
    CHECK(std::string(e.what()).find("layernorm_lab.cu") != std::string::npos);  // it names the lines
  }
  simt::set_order(saved);
  if (checking) CHECK(reported);  // the race flavour (SIMT_CHECK=race) must catch it
  if (!reported) CHECK_FALSE(p.agrees());
}
#endif
