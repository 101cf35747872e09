// Anomaly detection (autograd/anomaly.h): a NaN or Inf made by an op's forward, a checkpoint
// replay or a backward rule raises, naming the op, the phase and the tape position; off, nothing
// is checked; the accumulation window can skip a step whose gradients are not finite.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;

namespace {
Tensor leaf(const std::vector<double>& v, Device device) {
  Tensor t = from_vector(v, {static_cast<int64_t>(v.size())}, device);
  t.set_requires_grad();
  return t;
}
}  // namespace

TEST_CASE("DetectAnomaly: a non-finite forward output names the op, node and phase") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    const Tensor x = leaf({1.0, -1.0, 2.0}, device);
    {
      autograd::DetectAnomaly detect;
      CHECK(autograd::DetectAnomaly::enabled());
      const Tensor y = x * 2.0;  // node #0, finite
      CHECK_THROWS_WITH_AS(log(y), doctest::Contains("log: output 0 (3)"), Error);
      CHECK_THROWS_WITH_AS(log(y), doctest::Contains("of node #1 has non-finite values (NaN or Inf) in forward"),
                           Error);
      autograd::Tape::current().clear();
    }
    CHECK_FALSE(autograd::DetectAnomaly::enabled());
    const Tensor quiet = log(x * 2.0);  // off: nothing is checked
    CHECK(std::isnan(quiet.to(Device::cpu()).to_vector<double>()[1]));
    autograd::Tape::current().clear();
  }
}

TEST_CASE("DetectAnomaly: a non-finite gradient names the op's backward rule") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    const Tensor x = leaf({0.0, 4.0}, device);
    const Tensor loss = sum(sqrt(x));  // d sqrt / dx at 0 is Inf
    autograd::DetectAnomaly detect;
    const std::string expected = "sqrt: input gradient 0 (2) on " + device.str() + " of node #0";
    CHECK_THROWS_WITH_AS(autograd::backward(loss), doctest::Contains(expected.c_str()), Error);
  }
}

TEST_CASE("DetectAnomaly: a NaN made again by a checkpoint replay is reported in phase replay") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    const Tensor x = leaf({1.0, -1.0}, device);
    Tensor y;
    {
      autograd::Checkpoint segment;
      y = log(x) * 0.0;  // NaN * 0 is NaN: forward is not checked (no DetectAnomaly yet)
    }
    const Tensor loss = sum(y);
    autograd::DetectAnomaly detect;  // on for the backward only: the replay of log is checked
    CHECK_THROWS_WITH_AS(autograd::backward(loss), doctest::Contains("log: output 0 (2)"), Error);
    autograd::Tape::current().clear();
    Tensor z;
    {
      autograd::Checkpoint segment;
      z = log(abs(x) + 1.0) * 0.0;  // finite: the scope and the replay pass
    }
    const Tensor fine = sum(z);
    autograd::backward(fine);
    CHECK(x.grad().defined());
  }
}

TEST_CASE("DetectAnomaly: the replay's message names the phase") {
  const Tensor x = leaf({-1.0}, Device::cpu());
  Tensor y;
  {
    autograd::Checkpoint segment;
    y = log(x);
  }
  const Tensor loss = sum(y * 0.0);
  autograd::DetectAnomaly detect;
  CHECK_THROWS_WITH_AS(autograd::backward(loss), doctest::Contains("node #0 has non-finite values (NaN or Inf) in replay"),
                       Error);
  autograd::Tape::current().clear();
}

TEST_CASE("Accumulator skip_nonfinite: a window with an Inf gradient takes no step and is counted") {
  Tensor w = from_vector(std::vector<double>{1.0, 2.0}, {2});
  w.set_requires_grad();
  optim::SGD opt({w}, 0.1);
  optim::Accumulator acc(opt, {0.0, nullptr, /*skip_nonfinite*/ true});
  const auto count = [](const double&) { return int64_t{1}; };
  // sqrt(w * scale): scale 0 puts w * 0 at sqrt's infinite slope.
  const auto loss = [&](const double& scale) { return sum(sqrt(w * scale)); };
  const optim::WindowResult bad = acc.step<double>({0.0}, count, loss);
  CHECK(bad.skipped_nonfinite);
  CHECK_FALSE(bad.stepped);
  CHECK(acc.skipped_steps() == 1);
  CHECK(opt.steps() == 0);
  CHECK(w.to_vector<double>() == std::vector<double>{1.0, 2.0});   // untouched
  CHECK(w.grad().to_vector<double>() == std::vector<double>{0.0, 0.0});  // zeroed for the next window
  const optim::WindowResult good = acc.step<double>({1.0}, count, loss);
  CHECK(good.stepped);
  CHECK_FALSE(good.skipped_nonfinite);
  CHECK(acc.skipped_steps() == 1);
  CHECK(w.to_vector<double>()[0] < 1.0);
}
