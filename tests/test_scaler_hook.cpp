// The loss scaler and skip_nonfinite decide on what the optimizer will read (optim/accumulator.h):
// a gradient hook that plants an inf or a NaN (in place, or with set_grad) after the unscale makes
// the window skip, with the scaler alone, skip_nonfinite alone, or both: parameters and AdamW's
// moments and step bit for bit untouched, gradients zeroed, the scale backed off once, and
// WindowResult, skipped_steps() and the scaler's counters agreeing; the next clean window steps.
// A hook that overwrites an overflow with finite values makes the window step. The same across two
// ranks, the hook planting on one rank only: tests/test_grad_scaler_dist.cpp.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "testing.h"

using namespace reel;
using namespace reel::optim;
using reel::testing::bit_identical;

namespace {

using Batch = std::pair<Tensor, Tensor>;  // x (n, 4), target (n, 2)

// (n, 4) -> Linear(4, 5) -> tanh -> Linear(5, 2), squared error summed over the batch.
struct Mlp {
  std::vector<Tensor> params;
  explicit Mlp(Device d) {
    Generator g(11);
    for (const Shape& s : std::vector<Shape>{{4, 5}, {5}, {5, 2}, {2}}) {
      MemoryCategory category(Category::Parameter);
      params.push_back(reel::testing::uniform_f64(g, s, -0.5, 0.5).to(DType::f32).to(d).set_requires_grad());
    }
  }
  Tensor loss(const Batch& b) const {
    const Tensor e = matmul(tanh(matmul(b.first, params[0]) + params[1]), params[2]) + params[3] - b.second;
    return sum(e * e);
  }
};

// Two micro-batches of 3 and 2 rows; `bad_input`: an inf in the second one's input.
std::vector<Batch> window(Device d, uint64_t seed, bool bad_input = false) {
  Generator g(seed);
  std::vector<Batch> w;
  for (int64_t n : {3, 2}) {
    Tensor x = reel::testing::uniform_f64(g, {n, 4}, -1, 1);
    if (bad_input && n == 2) {
      std::vector<double> v = x.to_vector<double>();
      v[1] = std::numeric_limits<double>::infinity();
      x = from_vector(v, x.shape());
    }
    w.push_back({x.to(DType::f32).to(d), reel::testing::uniform_f64(g, {n, 2}, -1, 1).to(DType::f32).to(d)});
  }
  return w;
}

int64_t rows(const Batch& b) { return b.first.shape()[0]; }

std::vector<Tensor> snapshot(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.clone());
  return r;
}

std::vector<Tensor> state_of(const Optimizer& opt) {
  std::vector<Tensor> r;
  for (const auto& [key, t] : opt.state_dict()) r.push_back(t.clone());
  return r;
}

bool all_bit_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!bit_identical(a[i], b[i])) return false;
  return true;
}

bool all_finite(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    for (double v : reel::testing::values(t))
      if (!std::isfinite(v)) return false;
  return true;
}

bool grads_zero(const std::vector<Tensor>& params) {
  for (const Tensor& p : params)
    if (p.grad().defined())
      for (double v : reel::testing::values(p.grad()))
        if (v != 0) return false;
  return true;
}

// The gradient `g` with element `i` set to `bad`: a new tensor of g's dtype and device.
Tensor planted(const Tensor& g, size_t i, double bad) {
  std::vector<double> v = reel::testing::values(g);
  v[i] = bad;
  return from_vector(v, g.shape()).to(g.dtype()).to(g.device());
}

enum class Check { Scaler, SkipNonfinite, Both };

const char* name(Check c) {
  return c == Check::Scaler ? "scaler" : c == Check::SkipNonfinite ? "skip_nonfinite" : "scaler + skip_nonfinite";
}

}  // namespace

TEST_CASE("a hook planting inf or NaN skips the window: nothing stepped, the scale backed off, counters agree") {
  for (Device d : reel::testing::devices())
    for (Check check : {Check::Scaler, Check::SkipNonfinite, Check::Both})
      for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")})
        for (bool in_place : {true, false}) {
          CAPTURE(d);
          CAPTURE(std::string(name(check)));
          CAPTURE(bad);
          CAPTURE(in_place);
          Mlp m(d);
          AdamW opt(m.params, 1e-2);
          GradScaler scaler({1024.0, 2.0, 0.5, 100});
          const bool scaled = check != Check::SkipNonfinite;
          Accumulator acc(opt, {0.5, nullptr, check != Check::Scaler, nullptr, scaled ? &scaler : nullptr});
          const auto lossf = [&](const Batch& b) { return m.loss(b); };
          REQUIRE(acc.step(window(d, 1), rows, lossf).stepped);  // Adam's moments exist now
          const std::vector<Tensor> params = snapshot(m.params), state = state_of(opt);

          int calls = 0;
          acc.set_grad_hook([&](const std::vector<Tensor>& ps, const WindowResult& w) {
            ++calls;
            CHECK(w.loss_scale == (scaled ? 1024.0 : 1.0));
            CHECK(all_finite({ps[2].grad()}));  // unscaled and finite before the hook writes
            if (in_place) ps[2].grad().copy_(planted(ps[2].grad(), 3, bad));
            else ps[2].set_grad(planted(ps[2].grad(), 3, bad));
          });
          const WindowResult r = acc.step(window(d, 2), rows, lossf);
          CHECK(calls == 1);
          CHECK(r.skipped_nonfinite);
          CHECK_FALSE(r.stepped);
          CHECK(acc.skipped_steps() == 1);
          CHECK(opt.steps() == 1);
          CHECK(all_bit_identical(m.params, params));
          CHECK(all_bit_identical(state_of(opt), state));  // exp_avg, exp_avg_sq and step, bit for bit
          CHECK(grads_zero(m.params));
          if (scaled) {
            CHECK(r.loss_scale == 1024.0);
            CHECK(scaler.scale() == 512.0);  // backed off once
            CHECK(scaler.skipped_windows() == acc.skipped_steps());
            CHECK(scaler.clean_windows_in_a_row() == 0);
          }

          acc.set_grad_hook({});
          const WindowResult next = acc.step(window(d, 3), rows, lossf);
          CHECK(next.stepped);
          CHECK_FALSE(next.skipped_nonfinite);
          CHECK(opt.steps() == 2);
          CHECK(acc.skipped_steps() == 1);
          CHECK_FALSE(all_bit_identical(m.params, params));
          CHECK(all_finite(m.params));
          if (scaled) {
            CHECK(next.loss_scale == 512.0);
            CHECK(scaler.scale() == 512.0);
            CHECK(scaler.skipped_windows() == 1);
            CHECK(scaler.clean_windows_in_a_row() == 1);  // the skip restarted the count
          }
        }
}

TEST_CASE("skipped windows back the scaler off once each and never count towards its growth") {
  // growth_interval 2: clean, skipped (the hook's inf), clean, clean. Counted clean, the skipped
  // window would have grown the scale at once; counted twice, it would have halved it twice.
  Mlp m(Device::cpu());
  SGD opt(m.params, 1e-2);
  GradScaler scaler({64.0, 2.0, 0.5, 2});
  Accumulator acc(opt, {0, nullptr, true, nullptr, &scaler});
  const auto lossf = [&](const Batch& b) { return m.loss(b); };
  bool plant = false;
  acc.set_grad_hook([&](const std::vector<Tensor>& ps, const WindowResult&) {
    if (plant) ps[0].grad().fill_(std::numeric_limits<double>::infinity());
  });
  CHECK(acc.step(window(Device::cpu(), 1), rows, lossf).stepped);
  plant = true;
  CHECK(acc.step(window(Device::cpu(), 2), rows, lossf).skipped_nonfinite);
  CHECK(scaler.scale() == 32.0);
  plant = false;
  CHECK(acc.step(window(Device::cpu(), 3), rows, lossf).stepped);
  CHECK(scaler.scale() == 32.0);
  CHECK(acc.step(window(Device::cpu(), 4), rows, lossf).stepped);
  CHECK(scaler.scale() == 64.0);
  CHECK(acc.skipped_steps() == 1);
  CHECK(scaler.skipped_windows() == 1);
  CHECK(opt.steps() == 3);
}

TEST_CASE("a hook that overwrites an overflow with finite gradients makes the window step") {
  // The decision covers what the optimizer will read: here finite, so the window steps, and the
  // scaler counts it clean.
  for (bool skip_nonfinite : {false, true}) {
    CAPTURE(skip_nonfinite);
    Mlp m(Device::cpu());
    SGD opt(m.params, 1e-2);
    GradScaler scaler({1024.0, 2.0, 0.5, 100});
    Accumulator acc(opt, {0, nullptr, skip_nonfinite, nullptr, &scaler});
    acc.set_grad_hook([&](const std::vector<Tensor>& ps, const WindowResult&) {
      CHECK_FALSE(all_finite({ps[0].grad()}));  // the inf input's overflow, after the unscale
      for (const Tensor& p : ps) p.grad().fill_(0.25);
    });
    const auto lossf = [&](const Batch& b) { return m.loss(b); };
    const WindowResult r = acc.step(window(Device::cpu(), 5, /*bad_input=*/true), rows, lossf);
    CHECK(r.stepped);
    CHECK_FALSE(r.skipped_nonfinite);
    CHECK(acc.skipped_steps() == 0);
    CHECK(scaler.skipped_windows() == 0);
    CHECK(scaler.scale() == 1024.0);
    CHECK(scaler.clean_windows_in_a_row() == 1);
    CHECK(all_finite(m.params));
  }
}
