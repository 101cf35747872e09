// Loss scaling in the accumulation window (optim/grad_scaler.h) and its kernel
// (kernels/unscale.h), on every device: a planted inf in one micro-batch skips the whole window
// (parameters, AdamW moments and step count bit-untouched, gradients zeroed) and halves the scale;
// the scale grows after K clean windows; the gradients the hook sees after the unscale, the
// reported loss and the clip norm are bit for bit those of the unscaled run (a power-of-two scale);
// the fused unscale in all four floating dtypes. Device decisions (optim/accumulator.h): the same
// results bit for bit as the host-decided path over windows with and without skips (AdamW, SGD,
// Lion; scaler, skip_nonfinite, a hook's NaN; clipping), no copy to the host inside a window (a
// Profiler's copy_to_host records), and a state_dict round trip. Two ranks:
// tests/test_grad_scaler_dist.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "core/profile.h"
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

// ---- device decisions (optim/accumulator.h): nothing read back inside a window ----------------

namespace {

// Copies to the host (copy_to_host records: a device value read back) while `prof` collected.
int host_reads(const Profiler& prof) {
  int n = 0;
  for (const profile::KernelRecord& k : prof.kernels()) n += k.kernel == "copy_to_host";
  return n;
}

struct Run {
  std::vector<Tensor> params;
  StateDict state;
  std::vector<double> losses, norms, scales, lrs;
  std::vector<bool> skipped, stepped;
  double scale = 0;
  int64_t clean = 0, scaler_skipped = 0, acc_skipped = 0, steps = 0;
};

// Seven windows, the 2nd and 5th with an inf (and the 6th with a NaN written by the hook when
// `hook_nan`), through an Accumulator deciding on the device or (host_decisions) on the host.
Run run_windows(Device d, const std::string& optimizer, bool scaled, bool skip_nonfinite, double clip,
                bool host_decisions, bool hook_nan, const LrSchedule* schedule = nullptr) {
  Mlp m(DType::f32, d);
  std::unique_ptr<Optimizer> opt;
  if (optimizer == "adamw") opt = std::make_unique<AdamW>(m.params, 1e-2);
  else if (optimizer == "sgd") opt = std::make_unique<SGD>(m.params, 1e-2, SGD::Options{0.9, 0, 0.01, false});
  else opt = std::make_unique<Lion>(m.params, 1e-3);
  GradScaler scaler({1024.0, 2.0, 0.5, 2});  // grows every 2 clean windows: growth and back-off both happen
  Accumulator::Options o{clip, schedule, skip_nonfinite, nullptr, scaled ? &scaler : nullptr};
  o.host_decisions = host_decisions;
  Accumulator acc(*opt, o);
  REQUIRE(acc.device_decisions() == !host_decisions);
  int window_index = 0;
  if (hook_nan)
    acc.set_grad_hook([&](const std::vector<Tensor>& ps, const WindowResult&) {
      if (window_index == 5) ps[1].grad().fill_(std::numeric_limits<double>::quiet_NaN());
    });
  Run r;
  for (window_index = 0; window_index < 7; ++window_index) {
    const int poison = window_index == 1 || window_index == 4 ? 0 : -1;
    const WindowResult w = acc.step(window(DType::f32, d, {3, 2}, 100 + static_cast<uint64_t>(window_index), poison),
                                    rows, [&](const Batch& b) { return m.loss(b); });
    r.losses.push_back(w.loss);
    r.norms.push_back(w.grad_norm);
    r.scales.push_back(w.loss_scale);
    r.skipped.push_back(w.skipped_nonfinite);
    r.stepped.push_back(w.stepped);
    r.lrs.push_back(w.lr);
  }
  r.params = snapshot(m.params);
  r.state = opt->state_dict();
  r.scale = scaler.scale();
  r.clean = scaler.clean_windows_in_a_row();
  r.scaler_skipped = scaler.skipped_windows();
  r.acc_skipped = acc.skipped_steps();
  r.steps = opt->steps();
  return r;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("device decisions give the host-decided path's results bit for bit, over windows with and without skips") {
  for (Device d : reel::testing::devices())
    for (const std::string optimizer : {"adamw", "sgd", "lion"})
      for (const std::tuple<bool, bool, bool>& levers :
           std::vector<std::tuple<bool, bool, bool>>{{true, false, false}, {false, true, false}, {true, true, true}})
        for (double clip : {0.0, 0.05}) {
          // Named copies, not structured bindings: CAPTURE's lambdas cannot capture those in C++17.
          const bool scaled = std::get<0>(levers), skip_nonfinite = std::get<1>(levers),
                     hook_nan = std::get<2>(levers);
          CAPTURE(d);
          CAPTURE(optimizer);
          CAPTURE(scaled);
          CAPTURE(skip_nonfinite);
          CAPTURE(hook_nan);
          CAPTURE(clip);
          const Run host = run_windows(d, optimizer, scaled, skip_nonfinite, clip, true, hook_nan);
          const Run dev = run_windows(d, optimizer, scaled, skip_nonfinite, clip, false, hook_nan);
          CHECK(host.skipped == std::vector<bool>{false, true, false, false, true, hook_nan, false});
          CHECK(dev.skipped == host.skipped);
          CHECK(dev.stepped == host.stepped);
          for (size_t i = 0; i < host.losses.size(); ++i) {
            CAPTURE(i);
            CHECK(same_bits(dev.losses[i], host.losses[i]));
            CHECK(same_bits(dev.norms[i], host.norms[i]));
            CHECK(same_bits(dev.scales[i], host.scales[i]));
          }
          if (clip > 0) CHECK(host.norms[0] > clip);  // it clipped
          CHECK(all_bit_identical(dev.params, host.params));
          REQUIRE(dev.state.size() == host.state.size());
          for (const auto& entry : host.state) {
            const auto& key = entry.first;
            CAPTURE(key);
            CHECK(bit_identical(dev.state.at(key), entry.second));  // the moments and "step"
          }
          CHECK(dev.steps == host.steps);
          CHECK(dev.steps == (hook_nan ? 4 : 5));
          CHECK(same_bits(dev.scale, host.scale));
          CHECK(dev.clean == host.clean);
          CHECK(dev.scaler_skipped == host.scaler_skipped);
          CHECK(dev.acc_skipped == host.acc_skipped);
          CHECK(dev.acc_skipped == (hook_nan ? 3 : 2));
        }
}

// A user's schedule without a device form (LrSchedule::device_rule's default): its rate goes to the
// device by Optimizer::device_lr's copy, as every rate did before device schedules.
class HalvingLr final : public LrSchedule {
 public:
  double lr(int64_t step) const override { return 1e-2 / static_cast<double>(int64_t{1} << std::min<int64_t>(step, 30)); }
};

// Records of `kernel` in the optimizer's phase (Accumulator's window end: the hook, the norm, the step).
int optimizer_count_of(const Profiler& prof, const std::string& kernel) {
  int n = 0;
  for (const profile::KernelRecord& k : prof.kernels()) n += k.kernel == kernel && k.phase == profile::Phase::Optimizer;
  return n;
}

TEST_CASE("a schedule evaluated by the update kernels gives the host path's bits; a skipped window keeps count and rate") {
  const WarmupCosineLr cosine{1e-2, 1e-3, 2, 6};  // a new rate every stepped window, then min_lr
  const HalvingLr halving;
  REQUIRE(cosine.device_rule().kind == kernels::LrRule::kWarmupCosine);
  REQUIRE(halving.device_rule().kind == kernels::LrRule::kNone);
  for (Device d : reel::testing::devices())
    for (const std::string optimizer : {"adamw", "sgd", "lion"})
      for (const LrSchedule* schedule : {static_cast<const LrSchedule*>(&cosine), static_cast<const LrSchedule*>(&halving)}) {
        CAPTURE(d);
        CAPTURE(optimizer);
        CAPTURE(schedule == &cosine);
        const Run host = run_windows(d, optimizer, true, true, 0.05, true, false, schedule);
        const Run dev = run_windows(d, optimizer, true, true, 0.05, false, false, schedule);
        // Windows 1 and 4 are skipped: the count, and so the rate, stays where it was.
        CHECK(host.skipped == std::vector<bool>{false, true, false, false, true, false, false});
        const std::vector<int64_t> index{0, 1, 1, 2, 3, 3, 4};  // the count before each window
        REQUIRE(host.lrs.size() == index.size());
        for (size_t i = 0; i < index.size(); ++i) {
          CAPTURE(i);
          CHECK(same_bits(host.lrs[i], schedule->lr(index[i])));
          CHECK(same_bits(dev.lrs[i], host.lrs[i]));
          CHECK(same_bits(dev.losses[i], host.losses[i]));
        }
        CHECK(all_bit_identical(dev.params, host.params));
        REQUIRE(dev.state.size() == host.state.size());
        for (const auto& entry : host.state) {
          CAPTURE(entry.first);
          CHECK(bit_identical(dev.state.at(entry.first), entry.second));  // the moments and "step"
        }
        CHECK(dev.steps == 5);
        CHECK(host.steps == 5);
      }
}

TEST_CASE("a device schedule: the window's optimizer copies nothing up, and resumes from a state_dict bit for bit") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const WarmupCosineLr cosine{1e-2, 1e-3, 1, 8};
    Mlp m(DType::f32, d);
    AdamW opt(m.params, 1e-2);
    Accumulator acc(opt, {0.05, &cosine, true, nullptr, nullptr});
    REQUIRE(acc.device_decisions());
    const auto lossf = [&](const Batch& b) { return m.loss(b); };
    for (int i = 0; i < 3; ++i) acc.step(window(DType::f32, d, {3, 2}, 300 + static_cast<uint64_t>(i)), rows, lossf);
    CHECK(opt.steps() == 3);  // a read: the next window starts with the host's count exact
    // A steady window: the rate is the kernels' (no copy of it), the count advanced by them (no copy
    // after them), and no host read inside it.
    Profiler prof;
    const WindowResult r = acc.step(window(DType::f32, d, {3, 2}, 303), rows, lossf);
    prof.stop();
    CHECK(optimizer_count_of(prof, "adamw_update") == 1);  // the phase is the one recorded
    CHECK(optimizer_count_of(prof, "copy_async.h2d") == 0);
    CHECK(optimizer_count_of(prof, "copy_strided") == 0);
    CHECK(optimizer_count_of(prof, "copy_from_host") == 0);
    CHECK(host_reads(prof) == 0);
    CHECK(r.lr == cosine.lr(3));
    CHECK(opt.steps() == 4);
    // Resumed from its state_dict (load_state_dict sets the count): a second run goes on with the
    // schedule where the first is, window for window the same bits, a skipped window included.
    Mlp m2(DType::f32, d);
    for (size_t i = 0; i < m.params.size(); ++i) m2.params[i].detach().copy_(m.params[i]);
    AdamW opt2(m2.params, 1e-2);
    opt2.load_state_dict(opt.state_dict());
    Accumulator acc2(opt2, {0.05, &cosine, true, nullptr, nullptr});
    for (int i = 4; i < 9; ++i) {
      const auto w = window(DType::f32, d, {3}, 300 + static_cast<uint64_t>(i), i == 6 ? 0 : -1);
      const WindowResult a = acc.step(w, rows, lossf);
      const WindowResult b = acc2.step(w, rows, [&](const Batch& x) { return m2.loss(x); });
      CHECK(same_bits(a.lr, b.lr));
      CHECK(all_bit_identical(m.params, m2.params));
    }
    CHECK(opt.steps() == 8);
    CHECK(opt2.steps() == 8);
    CHECK(acc2.skipped_steps() == 1);
  }
}

TEST_CASE("a skipped window decided on the device reads nothing back and leaves params and state bit-untouched") {
  for (Device d : reel::testing::devices())
    for (double clip : {0.0, 0.05}) {
      CAPTURE(d);
      CAPTURE(clip);
      Mlp m(DType::f32, d);
      AdamW opt(m.params, 1e-2);
      GradScaler scaler({1024.0, 2.0, 0.5, 100});
      Accumulator acc(opt, {clip, nullptr, true, nullptr, &scaler});
      REQUIRE(acc.device_decisions());
      const auto lossf = [&](const Batch& b) { return m.loss(b); };
      acc.step(window(DType::f32, d, {3, 5}, 1), rows, lossf);  // a clean one: moments and the device count exist
      const std::vector<Tensor> params = snapshot(m.params);
      std::vector<Tensor> state;
      for (const auto& [key, t] : opt.state_dict()) state.push_back(t.clone());  // reads the count: before the profiler
      const std::vector<Batch> poisoned = window(DType::f32, d, {3, 5}, 2, /*poison=*/1);
      Profiler prof;
      const WindowResult r = acc.step(poisoned, rows, lossf);
      prof.stop();
      CHECK(host_reads(prof) == 0);  // the window ran without the host waiting for the device
      CHECK(r.skipped_nonfinite);    // read now, after it
      CHECK_FALSE(r.stepped);
      CHECK(r.grad_norm == 0.0);
      CHECK(std::isfinite(r.loss.get()) == false);  // the poisoned micro-batch's loss
      CHECK(all_bit_identical(m.params, params));
      std::vector<Tensor> after;
      for (const auto& [key, t] : opt.state_dict()) after.push_back(t);
      CHECK(all_bit_identical(after, state));  // exp_avg, exp_avg_sq and "step"
      CHECK(opt.steps() == 1);
      CHECK(scaler.scale() == 512.0);
      CHECK(acc.skipped_steps() == 1);
      CHECK(all_zero(m.params));  // zero_grad still ran
      // And a clean window: no read either; the loss arrives by the asynchronous copy.
      const std::vector<Batch> clean = window(DType::f32, d, {4}, 3);
      Profiler prof2;
      const WindowResult r2 = acc.step(clean, rows, lossf);
      prof2.stop();
      CHECK(host_reads(prof2) == 0);
      CHECK(r2.stepped);
      CHECK(std::isfinite(r2.loss.get()));
      CHECK(opt.steps() == 2);
    }
}

TEST_CASE("the scaler's state and the step count survive a state_dict round trip after device decisions") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Mlp m(DType::f32, d);
    AdamW opt(m.params, 1e-2);
    GradScaler scaler({1024.0, 2.0, 0.5, 2});
    Accumulator acc(opt, {0.05, nullptr, false, nullptr, &scaler});
    const auto lossf = [&](const Batch& b) { return m.loss(b); };
    for (int i = 0; i < 4; ++i) acc.step(window(DType::f32, d, {3}, 200 + static_cast<uint64_t>(i), i == 2 ? 0 : -1), rows, lossf);
    // A second optimizer and scaler loaded from the first: the next windows agree bit for bit.
    Mlp m2(DType::f32, d);
    for (size_t i = 0; i < m.params.size(); ++i) m2.params[i].detach().copy_(m.params[i]);
    AdamW opt2(m2.params, 1e-2);
    opt2.load_state_dict(opt.state_dict());
    GradScaler scaler2({1024.0, 2.0, 0.5, 2});
    scaler2.load(scaler.scale(), scaler.clean_windows_in_a_row(), scaler.skipped_windows());
    Accumulator acc2(opt2, {0.05, nullptr, false, nullptr, &scaler2});
    acc2.set_skipped_steps(acc.skipped_steps());
    CHECK(opt2.steps() == 3);
    CHECK(scaler2.scale() == 1024.0);  // x2 after windows 0-1, /2 at window 2, one clean since
    for (int i = 4; i < 7; ++i) {
      const auto w = window(DType::f32, d, {3}, 200 + static_cast<uint64_t>(i), i == 5 ? 0 : -1);
      acc.step(w, rows, lossf);
      acc2.step(w, rows, [&](const Batch& b) { return m2.loss(b); });
    }
    CHECK(all_bit_identical(m.params, m2.params));
    CHECK(opt.steps() == opt2.steps());
    CHECK(scaler.scale() == scaler2.scale());
    CHECK(scaler.clean_windows_in_a_row() == scaler2.clean_windows_in_a_row());
    CHECK(acc.skipped_steps() == acc2.skipped_steps());
    CHECK(acc2.skipped_steps() == 2);
  }
}

TEST_CASE("the scaler's device kernels: the unscale, the update rule and the seed give the host's bits") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator g(13);
    std::vector<Tensor> host;
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
      host.push_back((reel::testing::uniform_f64(g, {20011}, -3e3, 3e3)).to(dt));
    const double scale = 3000.0;  // not a power of two: the division 1 / scale is rounded, as the host's
    const Tensor state = from_vector<double>({scale, 0, 0}, {3}).to(d);
    std::vector<Tensor> dev;
    for (const Tensor& t : host) dev.push_back(t.to(d));
    const Tensor found = zeros({1}, DType::i32, d);
    kernels::unscale_grads_(dev, state, found);
    CHECK_FALSE(kernels::unscale_grads_(host, 1.0 / scale));
    for (size_t i = 0; i < host.size(); ++i) CHECK(bit_identical(dev[i].to(Device::cpu()), host[i]));
    CHECK(found.item() == 0);
    std::vector<Tensor> bad{full({3}, std::nan(""), DType::bf16, d)};
    kernels::unscale_grads_(bad, state, found);
    CHECK(found.item() == 1);
    kernels::unscale_grads_(dev, state, found);  // a clean pass never clears it
    CHECK(found.item() == 1);

    // The update rule on the device against GradScaler::update(bool) on the host, over a sequence
    // that backs off, grows (interval 2) and saturates (growth past f64's range stays).
    GradScaler ref({0x1p1020, 4.0, 0.25, 2});
    const Tensor st = from_vector<double>({0x1p1020, 0, 0}, {3}).to(d), count = zeros({1}, DType::i64, d);
    for (bool f : {false, false, false, true, false, false, false, false, true, true}) {
      CAPTURE(f);
      ref.update(f);
      kernels::update_loss_scale_(st, full({1}, f ? 1.0 : 0.0, DType::i32, d), count, 4.0, 0.25, 2);
      const std::vector<double> s = reel::testing::values(st);
      CHECK(same_bits(s[0], ref.scale()));
      CHECK(s[1] == static_cast<double>(ref.clean_windows_in_a_row()));
      CHECK(s[2] == static_cast<double>(ref.skipped_windows()));
    }
    CHECK(count.item() == 3);

    // The seed: what backward(loss, inv_count * scale) fills, in the loss's dtype.
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      CAPTURE(dt);
      const Tensor seed = empty({}, dt, d), window_scale = empty({1}, DType::f64, d);
      kernels::loss_scale_seed_(seed, state, 1.0 / 7, window_scale);
      CHECK(bit_identical(seed.to(Device::cpu()), full({}, (1.0 / 7) * scale, dt)));
      CHECK(window_scale.item() == scale);
    }
    CHECK_THROWS_WITH_AS(kernels::unscale_grads_(dev, zeros({2}, DType::f64, d), found), doctest::Contains("state"),
                         Error);
    CHECK_THROWS_WITH_AS(kernels::update_loss_scale_(st, zeros({1}, DType::f32, d), Tensor(), 2.0, 0.5, 1),
                         doctest::Contains("found_inf"), Error);
    CHECK_THROWS_WITH_AS(kernels::loss_scale_seed_(empty({2}, DType::f32, d), state, 0.5, Tensor()),
                         doctest::Contains("loss_scale_seed_: seed"), Error);
  }
}

TEST_CASE("meta device: a window decided on the device records cuda:0's launches") {
  if (!cuda_available()) return;
  const auto run = [](Device d) {
    Mlp m(DType::f32, d);
    AdamW opt(m.params, 1e-2);
    GradScaler scaler({1024.0, 2.0, 0.5, 1});
    Accumulator acc(opt, {0.5, nullptr, true, nullptr, &scaler});
    const auto lossf = [&](const Batch& b) { return m.loss(b); };
    const std::vector<Batch> w1 = window(DType::f32, d, {3, 2}, 1), w2 = window(DType::f32, d, {4}, 2);
    Profiler prof;
    acc.step(w1, rows, lossf);
    acc.step(w2, rows, lossf);
    prof.stop();
    CHECK(host_reads(prof) == 0);
    CHECK(scaler.scale() == 4096.0);  // two clean windows (meta: the host follows them without a read)
    CHECK(opt.steps() == 2);
    CHECK(acc.skipped_steps() == 0);
    std::vector<std::string> names;
    for (const profile::KernelRecord& k : prof.kernels()) names.push_back(k.kernel + " " + k.shapes);
    return names;
  };
  const std::vector<std::string> cuda = run(Device::cuda(0)), meta = run(Device::meta());
  CHECK(cuda == meta);
  int norms = 0, scales = 0;
  for (const std::string& k : cuda) {
    norms += k.rfind("grad_norm_device", 0) == 0;
    scales += k.rfind("scale_ ", 0) == 0;
  }
  CHECK(norms == 2);   // one norm a window: the skip check and the clip coefficient together
  CHECK(scales == 0);  // the clip folded into the update
}
