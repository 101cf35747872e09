// Loss scaling in the accumulation window (optim/grad_scaler.h) and its kernel
// (kernels/unscale.h), on every device: a planted inf in one micro-batch skips the whole window
// (parameters, AdamW moments and step count bit-untouched, gradients zeroed) and halves the scale;
// the scale grows after K clean windows; the gradients the hook sees after the unscale, the
// reported loss and the clip norm are bit for bit those of the unscaled run (a power-of-two scale);
// the fused unscale in all four floating dtypes. Two ranks: tests/test_grad_scaler_dist.cpp.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "kernels/unscale.h"
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "testing.h"

using namespace reel;
using namespace reel::optim;
using reel::testing::bit_identical;

namespace {

// (n, 6) -> Linear(6, 8) -> GELU -> Linear(8, 3), squared error summed over the batch.
struct Mlp {
  std::vector<Tensor> params;
  explicit Mlp(DType dt, Device d, uint64_t seed = 7) {
    Generator g(seed);
    for (const Shape& s : std::vector<Shape>{{6, 8}, {8}, {8, 3}, {3}}) {
      MemoryCategory category(Category::Parameter);
      params.push_back((reel::testing::uniform_f64(g, s, -0.5, 0.5)).to(dt).to(d).set_requires_grad());
    }
  }
  Tensor loss(const std::pair<Tensor, Tensor>& batch) const {
    const auto& p = params;
    const Tensor y = matmul(gelu(matmul(batch.first, p[0]) + p[1]), p[2]) + p[3];
    const Tensor e = y - batch.second;
    return sum(e * e);
  }
};

using Batch = std::pair<Tensor, Tensor>;  // x (n, 6), target (n, 3)

// Micro-batches of the given sizes; `poison` >= 0 puts an inf into that micro-batch's input.
std::vector<Batch> window(DType dt, Device d, std::vector<int64_t> sizes, uint64_t seed, int poison = -1) {
  Generator g(seed);
  std::vector<Batch> w;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor x = reel::testing::uniform_f64(g, {sizes[i], 6}, -1, 1);
    if (static_cast<int>(i) == poison) {
      std::vector<double> v = x.to_vector<double>();
      v[3] = std::numeric_limits<double>::infinity();
      x = from_vector(v, x.shape());
    }
    w.push_back({x.to(dt).to(d), reel::testing::uniform_f64(g, {sizes[i], 3}, -1, 1).to(dt).to(d)});
  }
  return w;
}

int64_t rows(const Batch& b) { return b.first.shape()[0]; }

std::vector<Tensor> snapshot(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(t.clone());
  return r;
}

bool all_bit_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!bit_identical(a[i], b[i])) return false;
  return true;
}

bool all_zero(const std::vector<Tensor>& params) {
  for (const Tensor& p : params)
    if (p.grad().defined())
      for (double v : reel::testing::values(p.grad()))
        if (v != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("a planted inf in one micro-batch skips the whole window: nothing stepped, the scale halves") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Mlp m(DType::f32, d);
    AdamW opt(m.params, 1e-2);
    GradScaler scaler({1024.0, 2.0, 0.5, 100});
    Accumulator acc(opt, {0.5, nullptr, false, nullptr, &scaler});
    const auto lossf = [&](const Batch& b) { return m.loss(b); };
    WindowResult r = acc.step(window(DType::f32, d, {3, 5, 2}, 1), rows, lossf);  // a clean one: moments exist
    REQUIRE(r.stepped);
    CHECK(r.loss_scale == 1024.0);
    const std::vector<Tensor> params = snapshot(m.params);
    const StateDict state = opt.state_dict();
    std::vector<Tensor> moments;
    for (const auto& [key, t] : state) moments.push_back(t.clone());

    r = acc.step(window(DType::f32, d, {3, 5, 2}, 2, /*poison=*/1), rows, lossf);
    CHECK(r.skipped_nonfinite);
    CHECK_FALSE(r.stepped);
    CHECK(r.loss_scale == 1024.0);     // what this window used
    CHECK(scaler.scale() == 512.0);    // what the next one will use
    CHECK(acc.skipped_steps() == 1);
    CHECK(scaler.skipped_windows() == 1);
    CHECK(opt.steps() == 1);           // the skipped window is not a step
    CHECK(all_bit_identical(m.params, params));
    std::vector<Tensor> after;
    for (const auto& [key, t] : opt.state_dict()) after.push_back(t);
    CHECK(all_bit_identical(after, moments));  // exp_avg, exp_avg_sq and "step", bit for bit
    CHECK(all_zero(m.params));                 // the next window starts from zero gradients

    r = acc.step(window(DType::f32, d, {4}, 3), rows, lossf);  // and the next window steps again
    CHECK(r.stepped);
    CHECK(r.loss_scale == 512.0);
    CHECK(opt.steps() == 2);
    CHECK(optim::scaler_summary(scaler) == "loss scale 512, 1 skipped window");
  }
}

TEST_CASE("the scale grows after growth_interval clean windows in a row; an inf restarts the count") {
  Mlp m(DType::f32, Device::cpu());
  SGD opt(m.params, 1e-2);
  GradScaler scaler({8.0, 2.0, 0.5, 3});
  Accumulator acc(opt, {0, nullptr, false, nullptr, &scaler});
  const auto lossf = [&](const Batch& b) { return m.loss(b); };
  const auto clean = [&](uint64_t seed) { return acc.step(window(DType::f32, Device::cpu(), {2, 2}, seed), rows, lossf); };
  clean(1), clean(2);
  CHECK(scaler.scale() == 8.0);
  CHECK(scaler.clean_windows_in_a_row() == 2);
  clean(3);
  CHECK(scaler.scale() == 16.0);  // K = 3 clean windows
  clean(4), clean(5);
  acc.step(window(DType::f32, Device::cpu(), {2, 2}, 6, 0), rows, lossf);
  CHECK(scaler.scale() == 8.0);   // backed off, and the two clean windows before no longer count
  CHECK(scaler.clean_windows_in_a_row() == 0);
  clean(7), clean(8);
  CHECK(scaler.scale() == 8.0);
  clean(9);
  CHECK(scaler.scale() == 16.0);
  CHECK(opt.steps() == 8);
  CHECK(acc.skipped_steps() == 1);
}

TEST_CASE("after the unscale the gradients, the loss and the clip norm are the unscaled run's, bit for bit") {
  for (Device d : reel::testing::devices())
    for (DType dt : {DType::f32, DType::f64})
      for (double clip : {0.0, 0.05}) {  // 0.05 clips: the norm is about 1
        CAPTURE(d);
        CAPTURE(dt);
        CAPTURE(clip);
        std::vector<std::vector<Tensor>> seen(2);
        std::vector<WindowResult> results(2);
        std::vector<std::vector<Tensor>> stepped(2);
        for (int scaled = 0; scaled < 2; ++scaled) {
          Mlp m(dt, d);
          AdamW opt(m.params, 1e-2);
          GradScaler scaler({65536.0, 2.0, 0.5, 2000});
          Accumulator acc(opt, {clip, nullptr, false, nullptr, scaled ? &scaler : nullptr});
          acc.set_grad_hook([&](const std::vector<Tensor>& ps, const WindowResult&) {
            for (const Tensor& p : ps) seen[static_cast<size_t>(scaled)].push_back(p.grad().clone());
          });
          // 3 + 5 + 2 = 10 samples: 1/10 is not a power of two, scale/10 is scale x (1/10) exactly.
          results[static_cast<size_t>(scaled)] =
              acc.step(window(dt, d, {3, 5, 2}, 11), rows, [&](const Batch& b) { return m.loss(b); });
          stepped[static_cast<size_t>(scaled)] = snapshot(m.params);
        }
        CHECK(results[1].loss_scale == 65536.0);
        CHECK(all_bit_identical(seen[0], seen[1]));
        CHECK(results[0].loss == results[1].loss);  // the reported loss is the unscaled one
        CHECK(results[0].grad_norm == results[1].grad_norm);
        if (clip > 0) CHECK(results[1].grad_norm > clip);
        CHECK(all_bit_identical(stepped[0], stepped[1]));
      }
}

TEST_CASE("unscale_grads_: one pass over f32, f64, bf16 and f16 gradients finds inf and NaN") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator g(5);
    std::vector<Tensor> grads;
    // 40000 elements: three CPU chunks; a dtype mix in one list.
    grads.push_back((reel::testing::uniform_f64(g, {200, 200}, -1e3, 1e3)).to(DType::f32).to(d));
    grads.push_back((reel::testing::uniform_f64(g, {7}, -1e3, 1e3)).to(d));
    grads.push_back((reel::testing::uniform_f64(g, {33}, -1e3, 1e3)).to(DType::bf16).to(d));
    grads.push_back((reel::testing::uniform_f64(g, {65}, -1e3, 1e3)).to(DType::f16).to(d));
    grads.push_back(zeros({0}, DType::f32, d));
    const std::vector<Tensor> before = snapshot(grads);
    CHECK_FALSE(kernels::unscale_grads_(grads, 1.0 / 1024));
    for (size_t i = 0; i < grads.size(); ++i) {
      const std::vector<double> b = reel::testing::values(before[i]), a = reel::testing::values(grads[i]);
      for (size_t j = 0; j < a.size(); ++j) REQUIRE(a[j] == b[j] / 1024);  // exact: a power of two, no subnormal
    }
    for (size_t t = 0; t < 4; ++t)
      for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
        CAPTURE(t);
        CAPTURE(bad);
        std::vector<Tensor> list = snapshot(before);
        std::vector<double> v = reel::testing::values(list[t]);
        v[v.size() - 1] = bad;  // the last element: the tail of the last chunk
        list[t] = from_vector(v, list[t].shape()).to(list[t].dtype()).to(d);
        CHECK(kernels::unscale_grads_(list, 0.5));
      }
    // A product that overflows the gradient's type is found too (f16: 40000 x 2 > 65504).
    CHECK(kernels::unscale_grads_({full({3}, 40000.0, DType::f16, d)}, 2.0));
    CHECK_FALSE(kernels::unscale_grads_({full({3}, 40000.0, DType::f32, d)}, 2.0));
    CHECK_FALSE(kernels::unscale_grads_({}, 0.5));
    CHECK_THROWS_WITH_AS(kernels::unscale_grads_({full({3}, 1.0, DType::f32, d)}, 0.0),
                         doctest::Contains("inv_scale 0 must be finite and > 0"), Error);
    CHECK_THROWS_WITH_AS(kernels::unscale_grads_({zeros({4, 3}, DType::f32, d).transpose(0, 1)}, 0.5),
                         doctest::Contains("is not contiguous"), Error);
    CHECK_THROWS_WITH_AS(kernels::unscale_grads_({zeros({2}, DType::i64, d)}, 0.5),
                         doctest::Contains("has dtype i64"), Error);
  }
}

TEST_CASE("unscale_grads_ gives the same bits on cuda as on the cpu") {
  if (!cuda_available()) return;
  Generator g(9);
  std::vector<Tensor> cpu;
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    cpu.push_back((reel::testing::uniform_f64(g, {20011}, -3, 3)).to(dt));
  std::vector<Tensor> gpu;
  for (const Tensor& t : cpu) gpu.push_back(t.to(Device::cuda(0)));
  CHECK(kernels::unscale_grads_(cpu, 1.0 / 3) == kernels::unscale_grads_(gpu, 1.0 / 3));  // rounded: not a power of 2
  CHECK(all_bit_identical(cpu, gpu));
}

TEST_CASE("GradScaler refuses options that cannot scale") {
  CHECK_THROWS_WITH_AS(GradScaler({0.0, 2.0, 0.5, 10}), doctest::Contains("loss scale 0 must be finite and > 0"), Error);
  CHECK_THROWS_WITH_AS(GradScaler({8.0, 1.0, 0.5, 10}), doctest::Contains("growth_factor 1 must be"), Error);
  CHECK_THROWS_WITH_AS(GradScaler({8.0, 2.0, 1.0, 10}), doctest::Contains("backoff_factor 1 must be in (0, 1)"), Error);
  CHECK_THROWS_WITH_AS(GradScaler({8.0, 2.0, 0.5, 0}), doctest::Contains("growth_interval 0 must be >= 1"), Error);
  GradScaler s;
  CHECK(s.scale() == 65536.0);
  CHECK(s.options().growth_interval == 2000);
  s.load(128.0, 5);
  CHECK(s.scale() == 128.0);
  CHECK(s.clean_windows_in_a_row() == 5);
  CHECK(optim::scaler_summary(s) == "loss scale 128, 0 skipped windows");
}
