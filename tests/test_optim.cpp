// Optimizers against hand-computed steps, AdamW's bits independent of an element's position, optimizer
// state memory and state_dict (f32 state for a bf16 / f16 model), gradient
// clipping, and the accumulation window (equal to one big batch; a per-micro-batch mean differs;
// its gradient hook sees the window's gradients and what it changes is stepped); clipping folded
// into the update (Optimizer::step(coef, found_inf)) bit for bit equal to clip_grad_norm then
// step(). Every optimizer of the registry (optim/registry.h), by the same tests: a new entry is
// tested without a line here.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "optim/accumulator.h"
#include "optim/optimizer.h"
#include "optim/registry.h"
#include "testing.h"

using namespace reel;
using namespace reel::optim;

namespace {
// A parameter p (f64) whose gradient after backward is exactly g: loss = sum(p * g).
void set_gradient(const Tensor& p, const std::vector<double>& g) {
  Tensor gt = from_vector(g, p.shape()).to(p.device());
  autograd::backward(sum(mul(p, gt)));
}
Tensor param(const std::vector<double>& v, Device d = Device::cpu()) {
  Tensor p;
  {
    MemoryCategory scope(Category::Parameter);
    p = from_vector(v, {static_cast<int64_t>(v.size())}).to(d);
  }
  p.set_requires_grad();
  return p;
}
}  // namespace

TEST_CASE("SGD with momentum, Nesterov and weight decay matches hand-computed steps") {
  for (Device d : reel::testing::devices()) {
    Tensor p = param({1.0, -2.0}, d);
    SGD opt({p}, 0.1, {0.9, 0.0, 0.01, true});
    // step 1: g = grad + wd p = (0.5 + 0.01, 0.25 - 0.02); buf = g; nesterov: g + 0.9 buf = 1.9 g
    set_gradient(p, {0.5, 0.25});
    opt.step();
    const double g0 = 0.51, g1 = 0.23;
    const double p0 = 1.0 - 0.1 * 1.9 * g0, p1 = -2.0 - 0.1 * 1.9 * g1;
    reel::testing::check_close(p, {p0, p1}, 1e-12, 1e-12);
    // step 2: buf = 0.9 buf + g'
    opt.zero_grad();
    set_gradient(p, {0.5, 0.25});
    opt.step();
    const double h0 = 0.5 + 0.01 * p0, h1 = 0.25 + 0.01 * p1;
    const double b0 = 0.9 * g0 + h0, b1 = 0.9 * g1 + h1;
    reel::testing::check_close(p, {p0 - 0.1 * (h0 + 0.9 * b0), p1 - 0.1 * (h1 + 0.9 * b1)}, 1e-12, 1e-12);
  }
}

TEST_CASE("Adam and AdamW match hand-computed steps") {
  for (bool decoupled : {false, true}) {
    Tensor p = param({0.5});
    std::unique_ptr<Optimizer> opt;
    if (decoupled) opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, 0.01, Adam::Options{0.9, 0.99, 1e-8, 0.1});
    else opt = std::make_unique<Adam>(std::vector<Tensor>{p}, 0.01, Adam::Options{0.9, 0.99, 1e-8, 0.1});
    double pv = 0.5, m = 0, v = 0;
    for (int step = 1; step <= 2; ++step) {
      opt->zero_grad();
      set_gradient(p, {0.3});
      opt->step();
      double g = 0.3;
      if (decoupled) pv *= 1 - 0.01 * 0.1;
      else g += 0.1 * pv;
      m = 0.9 * m + 0.1 * g;
      v = 0.99 * v + 0.01 * g * g;
      const double mhat = m / (1 - std::pow(0.9, step)), vhat = v / (1 - std::pow(0.99, step));
      pv -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      CAPTURE(step);
      reel::testing::check_close(p, {pv}, 1e-10, 1e-12);
    }
  }
}

TEST_CASE("an element's AdamW update does not depend on where it sits in the tensor (f32, cpu)") {
  // 200 parameters of 31 values stepped on their own, and the same values as one flat tensor (as
  // parameters are inside a flat shard, distributed/fsdp.h): the same bits. On its own each parameter ends
  // in 15 values past the last whole vector of 16, which the update once ran through scalar code
  // that the compiler contracts into multiply-adds (rounding differently from the vector code).
  constexpr int64_t kParams = 200, kSize = 31;
  Generator gen(9);
  const Tensor values = randn({kParams * kSize}, DType::f32, Device::cpu(), &gen);
  const Tensor grads = randn({kParams * kSize}, DType::f32, Device::cpu(), &gen);
  const auto leaf = [](const Tensor& init) {
    Tensor p;
    {
      MemoryCategory scope(Category::Parameter);
      p = init.contiguous().clone();
    }
    p.set_requires_grad();
    return p;
  };
  std::vector<Tensor> alone, alone_grads;
  for (int64_t i = 0; i < kParams; ++i) {
    alone.push_back(leaf(untracked::slice(values, 0, i * kSize, (i + 1) * kSize)));
    alone_grads.push_back(untracked::slice(grads, 0, i * kSize, (i + 1) * kSize).contiguous());
  }
  const Tensor flat = leaf(values);
  AdamW opt_alone(alone, 0.01), opt_flat({flat}, 0.01);
  for (int step = 0; step < 3; ++step) {
    opt_alone.zero_grad();
    opt_flat.zero_grad();
    Tensor loss = sum(mul(flat, grads));
    for (int64_t i = 0; i < kParams; ++i) loss = add(loss, sum(mul(alone[static_cast<size_t>(i)], alone_grads[static_cast<size_t>(i)])));
    autograd::backward(loss);
    opt_alone.step();
    opt_flat.step();
  }
  std::vector<float> stepped_alone;
  for (const Tensor& p : alone)
    for (float x : p.to_vector<float>()) stepped_alone.push_back(x);
  CHECK(reel::testing::same_bits(std::vector<std::vector<float>>{stepped_alone},
                                 std::vector<std::vector<float>>{flat.to_vector<float>()}));
}

TEST_CASE("optimizer state is counted as optimizer state and round-trips through state_dict") {
  const int64_t before = memory_stats(Device::cpu())[Category::OptimizerState].current_bytes;
  Tensor a = param({1, 2, 3}), b = param({4, 5, 6});
  AdamW opt({a, b}, 0.1);
  set_gradient(a, {1, 1, 1});
  set_gradient(b, {1, -1, 1});
  opt.step();
  CHECK(memory_stats(Device::cpu())[Category::OptimizerState].current_bytes - before == 2 * 2 * 3 * 8);
  const StateDict saved = opt.state_dict();
  CHECK(saved.count("exp_avg.0"));
  CHECK(saved.count("exp_avg_sq.1"));
  CHECK(saved.at("step").item() == 1);
  // A second optimizer over copies of the parameters, loaded from the state, continues identically.
  Tensor a2 = param(reel::testing::values(a)), b2 = param(reel::testing::values(b));
  AdamW opt2({a2, b2}, 0.1);
  opt2.load_state_dict(saved);
  for (Optimizer* o : {static_cast<Optimizer*>(&opt), static_cast<Optimizer*>(&opt2)}) {
    o->zero_grad();
    const auto& ps = o->params();
    set_gradient(ps[0], {0.5, 0.5, 0.5});
    set_gradient(ps[1], {0.1, 0.2, 0.3});
    o->step();
  }
  reel::testing::check_close(a2, a, 0, 0);
  reel::testing::check_close(b2, b, 0, 0);
  StateDict bad = saved;
  bad["exp_avg.7"] = zeros({3}, DType::f64);
  CHECK_REEL_ERROR(opt2.load_state_dict(bad), "unexpected key 'exp_avg.7'");
  bad = saved;
  bad["exp_avg.0"] = zeros({4}, DType::f64);
  CHECK_REEL_ERROR(opt2.load_state_dict(bad), "'exp_avg.0' has shape (4) but parameter 0 has shape (3)");
  CHECK_REEL_ERROR(opt2.load_state_dict({}), "missing key 'step'");
  CHECK_REEL_ERROR(SGD({zeros({2})}, 0.1), "parameter 0 does not require grad");
}

TEST_CASE("a model held in bf16 or f16: f32 optimizer state, in the memory report and the state_dict") {
  for (Device d : reel::testing::devices())
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(dt);
      const int64_t before = memory_stats(d)[Category::OptimizerState].current_bytes;
      Tensor a = param({1, 2, 3}, d).to(dt).detach().set_requires_grad();  // as Module::to(dt) leaves it
      AdamW opt({a}, 0x1p-4, {0.9, 0.999, 1e-8, 0});
      a.set_grad(full({3}, 0.5, dt, d));
      opt.step();
      CHECK(memory_stats(d)[Category::OptimizerState].current_bytes - before == 2 * 3 * 4);  // m, v in f32
      CHECK(a.dtype() == dt);
      CHECK(reel::testing::values(a) == std::vector<double>{1 - 0x1p-4, 2 - 0x1p-4, 3 - 0x1p-4});  // exact
      const StateDict saved = opt.state_dict();
      CHECK(saved.at("exp_avg.0").dtype() == DType::f32);
      // Loading converts to the parameter's state dtype, whatever the file held (f64 here).
      StateDict wide = saved;
      for (auto& [key, t] : wide)
        if (key != "step") t = t.to(DType::f64);
      AdamW opt2({a.detach().clone().set_requires_grad()}, 0x1p-4, {0.9, 0.999, 1e-8, 0});
      opt2.load_state_dict(wide);
      CHECK(opt2.state_dict().at("exp_avg_sq.0").dtype() == DType::f32);
      CHECK(reel::testing::bit_identical(opt2.state_dict().at("exp_avg_sq.0"), saved.at("exp_avg_sq.0")));
    }
}

TEST_CASE("clip_grad_norm scales all gradients together") {
  Tensor a = param({0, 0}), b = param({0});
  set_gradient(a, {3, 0});
  set_gradient(b, {4});
  CHECK(clip_grad_norm({a, b}, 10.0) == doctest::Approx(5.0));
  reel::testing::check_close(a.grad(), {3, 0}, 0, 0);  // below the limit: unchanged
  CHECK(clip_grad_norm({a, b}, 1.0) == doctest::Approx(5.0));
  reel::testing::check_close(a.grad(), {0.6, 0}, 1e-6, 1e-9);
  reel::testing::check_close(b.grad(), {0.8}, 1e-6, 1e-9);
}

namespace {
struct Batch {
  Tensor x;  // (n, 3)
  Tensor y;  // (n, 1)
};
}  // namespace

TEST_CASE("the accumulation window equals one big batch; a per-micro-batch mean does not") {
  Generator g(11);
  const Tensor x = randn({12, 3}, DType::f64, Device::cpu(), &g), y = randn({12, 1}, DType::f64, Device::cpu(), &g);
  const Tensor w0 = randn({3, 1}, DType::f64, Device::cpu(), &g);
  auto sq_loss = [](const Tensor& w, const Batch& b) {  // SUM over the batch of squared errors
    const Tensor d = sub(matmul(b.x, w), b.y);
    return sum(mul(d, d));
  };
  // Reference: one batch of 12 with the mean loss.
  Tensor w_ref = w0.clone().set_requires_grad();
  SGD ref({w_ref}, 0.05);
  autograd::backward(sq_loss(w_ref, {x, y}), 1.0 / 12);
  const Tensor ref_grad = w_ref.grad().clone();
  ref.step();
  // Uneven micro-batches 1 + 5 + 2 + 4 through the window.
  std::vector<Batch> micro;
  int64_t start = 0;
  for (int64_t n : {1, 5, 2, 4}) {
    micro.push_back({x.narrow(0, start, n), y.narrow(0, start, n)});
    start += n;
  }
  Tensor w = w0.clone().set_requires_grad();
  SGD opt({w}, 0.05);
  Accumulator acc(opt);
  auto count = [](const Batch& b) { return b.x.size(0); };
  auto loss = [&](const Batch& b) { return sq_loss(w, b); };
  const WindowResult r = acc.step(micro, count, loss);
  CHECK(r.count == 12);
  CHECK(r.stepped);
  reel::testing::check_close(w, w_ref, 1e-12, 1e-12);
  const bool zeroed = !w.grad().defined() || reel::testing::values(w.grad()) == std::vector<double>(3, 0.0);
  CHECK(zeroed);
  // The naive way, averaging each micro-batch's mean, gives different gradients.
  Tensor w_naive = w0.clone().set_requires_grad();
  for (const Batch& b : micro) autograd::backward(sq_loss(w_naive, b), 1.0 / (4.0 * static_cast<double>(b.x.size(0))));
  const std::vector<double> naive = reel::testing::values(w_naive.grad()), exact = reel::testing::values(ref_grad);
  double diff = 0;
  for (size_t i = 0; i < naive.size(); ++i) diff = std::max(diff, std::fabs(naive[i] - exact[i]));
  CHECK(diff > 1e-3);
}

TEST_CASE("the accumulation window's gradient hook sees the summed, normalised gradients; its changes are stepped") {
  Generator g(12);
  const Tensor x = randn({12, 3}, DType::f64, Device::cpu(), &g), y = randn({12, 1}, DType::f64, Device::cpu(), &g);
  const Tensor w0 = randn({3, 1}, DType::f64, Device::cpu(), &g), b0 = randn({1}, DType::f64, Device::cpu(), &g);
  auto sq_loss = [](const Tensor& w, const Tensor& b, const Batch& batch) {  // SUM of squared errors
    const Tensor d = sub(add(matmul(batch.x, w), b), batch.y);
    return sum(mul(d, d));
  };
  // Reference: one backward over the whole batch of 12, mean loss.
  const Tensor w_ref = w0.clone().set_requires_grad(), b_ref = b0.clone().set_requires_grad();
  autograd::backward(sq_loss(w_ref, b_ref, {x, y}), 1.0 / 12);
  std::vector<Batch> micro;
  int64_t start = 0;
  for (int64_t n : {3, 1, 6, 2}) {
    micro.push_back({x.narrow(0, start, n), y.narrow(0, start, n)});
    start += n;
  }
  const Tensor w = w0.clone().set_requires_grad(), b = b0.clone().set_requires_grad();
  SGD opt({w, b}, 0.1);
  int calls = 0;
  Tensor seen_w, seen_b;
  Accumulator::Options options;
  options.clip_norm = 1e9;  // never scales, but reports the norm it measured: that of the hook's gradients
  Accumulator acc(opt, options);
  acc.set_grad_hook([&](const std::vector<Tensor>& params, const WindowResult& window) {
    ++calls;
    CHECK(window.count == 12);
    CHECK(window.lr == 0.1);
    REQUIRE(params.size() == 2);
    CHECK(params[0].impl_ptr() == w.impl_ptr());
    seen_w = params[0].grad().clone();
    seen_b = params[1].grad().clone();
    params[0].set_grad(mul(params[0].grad(), 0.5));  // halve w's gradient
    params[1].grad().fill_(0.0);                      // and zero b's
  });
  const WindowResult r = acc.step(micro, [](const Batch& batch) { return batch.x.size(0); },
                                  [&](const Batch& batch) { return sq_loss(w, b, batch); });
  CHECK(calls == 1);
  CHECK(r.stepped);
  reel::testing::check_close(seen_w, w_ref.grad(), 1e-12, 1e-14);
  reel::testing::check_close(seen_b, b_ref.grad(), 1e-12, 1e-14);
  // The step used what the hook left: w moved by half its gradient, b not at all; clipping saw it too.
  reel::testing::check_close(w, sub(w0, mul(w_ref.grad(), 0.05)), 1e-12, 1e-14);
  reel::testing::check_close(b, b0, 0, 0);
  double sq = 0;
  for (double v : reel::testing::values(w_ref.grad())) sq += 0.25 * v * v;
  CHECK(r.grad_norm == doctest::Approx(std::sqrt(sq)).epsilon(1e-12));
  // A window of count 0 steps nothing and calls no hook.
  const std::vector<Batch> empty_window{{x.narrow(0, 0, 0), y.narrow(0, 0, 0)}};
  acc.step(empty_window, [](const Batch& batch) { return batch.x.size(0); },
           [&](const Batch& batch) { return sq_loss(w, b, batch); });
  CHECK(calls == 1);
}

TEST_CASE("set_lr refuses what the constructors refuse: a NaN, negative or infinite lr") {
  Tensor a = param({1, 2});
  SGD sgd({a}, 0.1);
  AdamW adamw({a}, 0.1);
  for (Optimizer* o : {static_cast<Optimizer*>(&sgd), static_cast<Optimizer*>(&adamw)}) {
    CHECK_REEL_ERROR(o->set_lr(std::nan("")), "set_lr: lr (nan) must be a finite number >= 0");
    CHECK_REEL_ERROR(o->set_lr(-0.5), "set_lr: lr (-0.5) must be a finite number >= 0");
    CHECK_REEL_ERROR(o->set_lr(INFINITY), "set_lr: lr (inf) must be a finite number >= 0");
    CHECK(o->lr() == 0.1);  // a refused value leaves the rate as it was
    o->set_lr(0.0);         // 0 is allowed (a warmup's first step)
    CHECK(o->lr() == 0.0);
  }
  // The constructors use the same check.
  CHECK_REEL_ERROR(SGD({a}, std::nan("")), "SGD: lr (nan) must be a finite number >= 0");
  CHECK_REEL_ERROR(Adam({a}, -1.0), "Adam: lr (-1) must be a finite number >= 0");
  CHECK_REEL_ERROR(AdamW({a}, INFINITY), "AdamW: lr (inf) must be a finite number >= 0");
  CHECK_REEL_ERROR(make_optimizer("sgd", {a}, -1.0), "SGD: lr (-1) must be a finite number >= 0");
}

TEST_CASE("a parameter listed twice is refused: it would be stepped twice") {
  Tensor a = param({1, 2, 3}), b = param({4, 5});
  CHECK_REEL_ERROR(SGD({a, b, a}, 0.1), "optimizer: parameters 0 and 2 (shape (3)) are the same tensor");
  CHECK_REEL_ERROR(AdamW({b, b}, 0.1), "optimizer: parameters 0 and 1 (shape (2)) are the same tensor");
  // Another handle to the same data (a detached alias made a leaf again) is the same parameter too.
  Tensor alias = b.detach().set_requires_grad();
  CHECK_REEL_ERROR(Adam({a, b, alias}, 0.1), "optimizer: parameters 1 and 2 (shape (2)) are the same tensor");
  // Distinct parameters, even of one shape, are fine.
  Tensor c = param({4, 5});
  CHECK_NOTHROW(SGD({a, b, c}, 0.1));
}

TEST_CASE("the accumulation window refuses a negative count: it would turn descent into ascent") {
  Tensor w = param({1, 2});
  const Tensor w0 = w.clone();
  SGD opt({w}, 0.1);
  Accumulator acc(opt);
  const std::vector<int64_t> micro = {3, -5, 4};  // each "batch" is its own count
  auto count = [](int64_t n) { return n; };
  int losses = 0;
  auto loss = [&](int64_t) {
    ++losses;
    return sum(mul(w, w));
  };
  CHECK_REEL_ERROR(acc.step(micro, count, loss), "Accumulator: micro-batch 1 has a count of -5");
  CHECK(losses == 0);  // refused while counting, before any forward or backward
  CHECK(opt.steps() == 0);
  CHECK(!w.grad().defined());
  reel::testing::check_close(w, w0, 0, 0);
  // A window whose total is negative is refused the same way (the first negative count is named).
  CHECK_REEL_ERROR(acc.step(std::vector<int64_t>{-1}, count, loss), "micro-batch 0 has a count of -1");
  CHECK(autograd::Tape::current().empty());
}

TEST_CASE("an optimizer step between forward and backward makes that backward raise") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    for (int kind = 0; kind < 2; ++kind) {
      Tensor p = param({1.0, -2.0}, d);
      Tensor x = param({0.5, 0.25}, d);  // needs a gradient too, so mul saves p
      std::unique_ptr<Optimizer> opt;
      if (kind == 0) opt = std::make_unique<SGD>(std::vector<Tensor>{p}, 0.1);
      else opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, 0.1);
      set_gradient(p, {1.0, 1.0});
      Tensor l = sum(mul(x, p));
      opt->step();  // p is updated in place: the saved p is not the one the forward used
      CHECK_REEL_ERROR(autograd::backward(l),
                       "mul: a tensor of shape (2) that mul saved for backward was modified in place "
                       "(version 0 when saved, 1 now)");
      // Refused before the walk: the tape is left as it was, and goes with the loss (tape.h).
      CHECK_FALSE(autograd::Tape::current().empty());
      l = Tensor();
      CHECK(autograd::Tape::current().empty());
      // Step after backward, as usual: fine.
      opt->zero_grad();
      autograd::backward(sum(mul(x, p)));
      CHECK_NOTHROW(opt->step());
    }
  }
}

// ---- the registry: every entry by the same tests -------------------------------------------------

TEST_CASE("the registry: unique lowercase names with help; an unknown name quotes it and lists the choices") {
  const std::vector<std::string> names = optimizer_names();
  REQUIRE(names.size() == optimizer_registry().size());
  std::string choices;
  for (size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(!names[i].empty());
    for (char c : names[i]) CHECK(((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'));
    for (size_t j = 0; j < i; ++j) CHECK(names[j] != names[i]);
    CHECK(!optimizer_registry()[i].help.empty());
    CHECK(&find_optimizer(names[i]) == &optimizer_registry()[i]);
    CHECK(optimizer_help().find(names[i] + ": " + optimizer_registry()[i].help) != std::string::npos);
    choices += (i ? ", " : "") + names[i];
  }
  for (const char* name : {"sgd", "adam", "adamw"}) CHECK(std::find(names.begin(), names.end(), name) != names.end());
  Tensor a = param({1, 2});
  const std::string refused = "unknown optimizer 'AdamW ' (choose one of " + choices + ")";
  CHECK_REEL_ERROR(make_optimizer("AdamW ", {a}, 0.1), refused.c_str());
}

TEST_CASE("every registered optimizer descends a quadratic, refuses a bad lr, and resumes from its state_dict bit for bit") {
  // loss = sum((p - t)^2) / 2, gradient p - t: a few steps at lr 1e-2 from |p - t| ~ 1 must lower it.
  const std::vector<double> p0 = {1.0, -2.0, 0.5, 3.0}, t = {0.0, 0.5, -1.0, 2.0};
  const auto loss_of = [&](const Tensor& p) {
    double l = 0;
    const std::vector<double> v = reel::testing::values(p);
    for (size_t i = 0; i < v.size(); ++i) l += 0.5 * (v[i] - t[i]) * (v[i] - t[i]);
    return l;
  };
  const auto set_grad = [&](const Tensor& p) {
    std::vector<double> g = reel::testing::values(p);
    for (size_t i = 0; i < g.size(); ++i) g[i] -= t[i];
    set_gradient(p, g);
  };
  for (const OptimizerEntry& e : optimizer_registry())
    for (Device d : reel::testing::devices()) {
      CAPTURE(e.name);
      CAPTURE(d);
      CHECK_REEL_ERROR(e.make({param(p0, d)}, -1.0), "lr (-1) must be a finite number >= 0");
      Tensor p = param(p0, d), q = param(p0, d);
      std::unique_ptr<Optimizer> opt = e.make({p}, 1e-2);
      for (int step = 0; step < 3; ++step) {
        opt->zero_grad();
        set_grad(p);
        opt->step();
      }
      CHECK(loss_of(p) < loss_of(param(p0, d)));
      // A fresh optimizer over a copy of p, loaded from the state_dict, takes the same next step.
      q.copy_(p);
      std::unique_ptr<Optimizer> resumed = e.make({q}, 1e-2);
      resumed->load_state_dict(opt->state_dict());
      CHECK(resumed->steps() == 3);
      opt->zero_grad();
      resumed->zero_grad();
      set_grad(p);
      set_grad(q);
      opt->step();
      resumed->step();
      CHECK(reel::testing::values(q) == reel::testing::values(p));
      CHECK(opt->state_dict().size() == resumed->state_dict().size());
    }
}

TEST_CASE("clipping folded into the update (step(coef)) gives the bits of clip_grad_norm then step(), in every dtype") {
  // Every registered optimizer; f32, f64 and a 16-bit model (whose clipped gradient is rounded to
  // its dtype before the update, as scale_ stores it). Two steps: the second from moved state.
  for (Device d : reel::testing::devices())
    for (const OptimizerEntry& e : optimizer_registry())
      for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
        CAPTURE(d);
        CAPTURE(e.name);
        CAPTURE(dt);
        std::vector<std::vector<Tensor>> after(2);
        std::vector<double> norms[2];
        for (int fused = 0; fused < 2; ++fused) {
          Generator g(17);
          std::vector<Tensor> ps;
          for (const Shape& s : std::vector<Shape>{{40000}, {7, 3}, {5}}) {
            MemoryCategory scope(Category::Parameter);
            ps.push_back(reel::testing::uniform_f64(g, s, -1, 1).to(dt).to(d).set_requires_grad());
          }
          const std::unique_ptr<Optimizer> opt = make_optimizer(e.name, ps, 1e-2);
          REQUIRE(opt->device_control());
          for (int step = 0; step < 2; ++step) {
            for (const Tensor& p : ps) p.set_grad(reel::testing::uniform_f64(g, p.shape(), -3, 3).to(dt).to(d));
            if (fused) {
              std::vector<Tensor> grads;
              for (const Tensor& p : ps) grads.push_back(p.grad());
              const Tensor out = empty({2}, DType::f64, d);
              kernels::global_grad_norm_(grads, out, 0.5, Tensor(), false);
              norms[fused].push_back(out.to(Device::cpu()).data<double>()[0]);
              opt->step(untracked::slice(out, 0, 1, 2), Tensor());
            } else {
              norms[fused].push_back(clip_grad_norm(ps, 0.5));
              opt->step();
            }
            opt->zero_grad();
          }
          CHECK(opt->steps() == 2);
          for (const Tensor& p : ps) after[static_cast<size_t>(fused)].push_back(p.detach().clone());
        }
        CHECK(norms[0] == norms[1]);
        CHECK(norms[0][0] > 0.5);  // it clipped
        for (size_t i = 0; i < after[0].size(); ++i) CHECK(reel::testing::bit_identical(after[0][i], after[1][i]));
      }
}
