// Philox4x32-10 against the published known-answer vectors, and the random factories:
// determinism per (seed, offset), independence of successive calls, distribution moments.
#include <cmath>

#include "core/philox.h"
#include "core/random.h"
#include "testing.h"

using namespace reel;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  PhiloxBlock z = philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(z.v[0] == 0x6627e8d5u);
  CHECK(z.v[1] == 0xe169c58du);
  CHECK(z.v[2] == 0xbc57ac4cu);
  CHECK(z.v[3] == 0x9b00dbd8u);
  PhiloxBlock f = philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  CHECK(f.v[0] == 0x408f276du);
  CHECK(f.v[1] == 0x41c83b0eu);
  CHECK(f.v[2] == 0xa20bc7c6u);
  CHECK(f.v[3] == 0x6d5451fdu);
  PhiloxBlock p = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(p.v[0] == 0xd16cfe09u);
  CHECK(p.v[1] == 0x94fdccebu);
  CHECK(p.v[2] == 0x5001e420u);
  CHECK(p.v[3] == 0x24126ea1u);
}

TEST_CASE("the same seed gives the same numbers; successive calls differ") {
  Generator g1(123), g2(123);
  Tensor a = randn({1000}, DType::f32, Device::cpu(), &g1);
  Tensor b = randn({1000}, DType::f32, Device::cpu(), &g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  Tensor c = randn({1000}, DType::f32, Device::cpu(), &g1);
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  // f64 and f32 draw the same underlying numbers.
  Generator g3(123);
  Tensor d = randn({1000}, DType::f64, Device::cpu(), &g3);
  reel::testing::check_close(a, d, 1e-6, 1e-6);
  g1.manual_seed(123);
  CHECK(randn({1000}, DType::f32, Device::cpu(), &g1).to_vector<float>() == a.to_vector<float>());
}

TEST_CASE("uniform and normal moments") {
  Generator g(7);
  const std::vector<double> u = reel::testing::values(rand({200000}, DType::f64, Device::cpu(), &g));
  const std::vector<double> n = reel::testing::values(randn({200000}, DType::f64, Device::cpu(), &g));
  double su = 0, mn = 1, mx = 0, sn = 0, sn2 = 0;
  for (double v : u) {
    su += v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  for (double v : n) {
    sn += v;
    sn2 += v * v;
  }
  CHECK(mn >= 0.0);
  CHECK(mx < 1.0);
  CHECK(std::fabs(su / u.size() - 0.5) < 0.005);
  CHECK(std::fabs(sn / n.size()) < 0.01);
  CHECK(std::fabs(sn2 / n.size() - 1.0) < 0.02);
}

TEST_CASE("random tensors are the same on every device") {
  for (Device dev : reel::testing::devices()) {
    Generator g1(99), g2(99);
    Tensor cpu = rand({257}, DType::f32, Device::cpu(), &g1);
    Tensor other = rand({257}, DType::f32, dev, &g2);
    CHECK(cpu.to_vector<float>() == other.to(Device::cpu()).to_vector<float>());
    Tensor ncpu = randn({257}, DType::f32, Device::cpu(), &g1);
    Tensor nother = randn({257}, DType::f32, dev, &g2);
    reel::testing::check_close(nother, ncpu, 1e-6, 1e-6);
  }
}
