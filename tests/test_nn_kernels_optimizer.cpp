// Optimizer update kernels, the edge cases: SGD (plain, weight decay, momentum with dampening,
// Nesterov; the first step overwrites the buffer) and AdamW / Adam-L2 against steps computed by
// hand; the global gradient norm (determinism across thread counts, strided, empty and infinite
// gradients) and scale_ for clipping; bad lists. (Updates of lists that span several chunks and mix
// f32 and f64 against per-element f64 formulas, the norm's value and scale_, on every device, are
// rows of tests/op_table/optimizer.cpp.) bf16 and f16 parameters with f32 state, by hand, and their
// state refused in the parameter's own type. The rules of kernels/optimizer_rules.h through
// rule_update: Lion by hand (sign 0, NaN, weight decay, a 16-bit parameter) and bad lists and options.
#include <cmath>

#include "kernels/ops.h"
#include "kernels/optimizer_rules.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {
Tensor vec(std::initializer_list<double> v) {
  return from_vector<double>(std::vector<double>(v), {static_cast<int64_t>(v.size())});
}
}  // namespace

TEST_CASE("sgd: plain and weight decay, by hand") {
  Tensor p = vec({1.0, -2.0}), g = vec({0.5, 0.25});
  sgd_update({p}, {g}, {}, 0.1, 0, 0, 0, false, 1);
  check_close(p, {0.95, -2.025}, 1e-15, 1e-15);
  Tensor p2 = vec({1.0, -2.0});
  sgd_update({p2}, {g}, {}, 0.1, 0, 0, 0.01, false, 1);  // d = g + 0.01 p = (0.51, 0.23)
  check_close(p2, {0.949, -2.023}, 1e-15, 1e-15);
}

TEST_CASE("sgd: momentum with dampening and Nesterov over two steps, by hand") {
  const double lr = 0.1, g1 = 0.5, g2 = -0.2;
  {  // momentum 0.9, dampening 0.1: buf1 = g1 (torch starts the buffer at the gradient), buf2 = 0.9 buf1 + 0.9 g2
    Tensor p = vec({1.0}), buf = vec({123.0});  // the first step overwrites whatever the buffer holds
    sgd_update({p}, {vec({g1})}, {buf}, lr, 0.9, 0.1, 0, false, 1);
    check_close(p, {1.0 - 0.05}, 1e-15, 1e-15);
    check_close(buf, {0.5}, 1e-15, 1e-15);
    sgd_update({p}, {vec({g2})}, {buf}, lr, 0.9, 0.1, 0, false, 2);
    check_close(buf, {0.9 * 0.5 + 0.9 * -0.2}, 1e-15, 1e-15);  // 0.27
    check_close(p, {0.95 - 0.1 * 0.27}, 1e-15, 1e-15);
  }
  {  // Nesterov, momentum 0.9: update = g + 0.9 buf
    Tensor p = vec({1.0}), buf = vec({0.0});
    sgd_update({p}, {vec({g1})}, {buf}, lr, 0.9, 0, 0, true, 1);
    check_close(p, {1.0 - 0.1 * (0.5 + 0.9 * 0.5)}, 1e-15, 1e-15);  // 0.905
    sgd_update({p}, {vec({g2})}, {buf}, lr, 0.9, 0, 0, true, 2);  // buf = 0.45 - 0.2 = 0.25
    check_close(buf, {0.25}, 1e-15, 1e-15);
    check_close(p, {0.905 - 0.1 * (-0.2 + 0.9 * 0.25)}, 1e-15, 1e-15);  // 0.9025
  }
  {  // momentum with weight decay: d = g + wd p
    Tensor p = vec({2.0}), buf = vec({0.0});
    sgd_update({p}, {vec({g1})}, {buf}, lr, 0.5, 0, 0.1, false, 1);  // d = 0.7, p = 1.93
    check_close(p, {1.93}, 1e-15, 1e-15);
    sgd_update({p}, {vec({g2})}, {buf}, lr, 0.5, 0, 0.1, false, 2);  // d = -0.007, buf = 0.343
    check_close(p, {1.93 - 0.1 * (0.5 * 0.7 + (-0.2 + 0.1 * 1.93))}, 1e-15, 1e-15);
  }
}

TEST_CASE("adamw and adam (L2) over two steps, by hand") {
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  Tensor p = vec({1.0}), m = vec({0.0}), v = vec({0.0});
  adamw_update({p}, {vec({0.5})}, {m}, {v}, lr, b1, b2, eps, wd, 1);
  // p *= 1 - lr wd -> 0.999; m = 0.05, v = 0.00025; m_hat = 0.5, v_hat = 0.25: p = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8)
  check_close(m, {0.05}, 1e-15, 1e-15);
  check_close(v, {0.00025}, 1e-15, 1e-15);
  check_close(p, {0.899000002}, 1e-12, 1e-12);
  adamw_update({p}, {vec({-0.3})}, {m}, {v}, lr, b1, b2, eps, wd, 2);
  // m = 0.045 - 0.03 = 0.015; v = 0.00024975 + 0.00009 = 0.00033975; bias corrections 0.19 and 0.001999
  check_close(m, {0.015}, 1e-14, 1e-15);
  check_close(v, {0.00033975}, 1e-14, 1e-15);
  const double p1 = 0.899000002 * 0.999;
  check_close(p, {p1 - 0.1 / 0.19 * 0.015 / (std::sqrt(0.00033975) / std::sqrt(0.001999) + 1e-8)}, 1e-11, 1e-11);

  // Adam's L2 form: g' = g + wd p, no decoupled decay.
  Tensor pa = vec({1.0}), ma = vec({0.0}), va = vec({0.0});
  adamw_update({pa}, {vec({0.5})}, {ma}, {va}, lr, b1, b2, eps, wd, 1, false);
  check_close(ma, {0.1 * 0.51}, 1e-15, 1e-15);
  check_close(va, {0.001 * 0.51 * 0.51}, 1e-15, 1e-15);
  check_close(pa, {1.0 - 0.1 * 0.51 / (0.51 + 1e-8)}, 1e-12, 1e-12);
}

TEST_CASE("global_grad_norm and scale_ for clipping") {
  std::vector<Tensor> grads = {uniform_f64({300, 100}, 1).to(DType::f32), uniform_f64({17}, 2),
                               uniform_f64({50000}, 3).to(DType::f32)};
  std::vector<double> norms;
  for_thread_counts({1, 2, 3}, [&] { norms.push_back(global_grad_norm(grads)); });
  CHECK(norms[1] == norms[0]);  // same bits for any thread count
  CHECK(norms[2] == norms[0]);
  CHECK(global_grad_norm(std::vector<Tensor>{grads[0].t()}) == doctest::Approx(global_grad_norm({grads[0]})));
  CHECK(global_grad_norm({}) == 0.0);
  CHECK(std::isinf(global_grad_norm({vec({1.0, INFINITY})})));

  const double max_norm = 1.0, factor = max_norm / (norms[0] + 1e-6);
  scale_(grads, factor);
  CHECK(global_grad_norm(grads) == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("bad optimizer lists raise reel::Error naming op and shapes") {
  Tensor p = zeros({3}), g = zeros({3});
  CHECK_REEL_ERROR(adamw_update({p}, {zeros({4})}, {zeros({3})}, {zeros({3})}, 1e-3, 0.9, 0.999, 1e-8, 0, 1),
                   "adamw_update: param 0 (3) f32 on cpu and its grads (4) f32 on cpu differ");
  CHECK_REEL_ERROR(adamw_update({p}, {g}, {zeros({3}, DType::f64)}, {zeros({3})}, 1e-3, 0.9, 0.999, 1e-8, 0, 1),
                   "adamw_update: param 0 (3) f32 on cpu and its exp_avg (3) f64 on cpu differ");
  CHECK_REEL_ERROR(adamw_update({p}, {g}, {}, {}, 1e-3, 0.9, 0.999, 1e-8, 0, 1),
                   "adamw_update: 1 params but 0 exp_avg");
  CHECK_REEL_ERROR(adamw_update({p}, {g}, {p}, {p}, 1e-3, 0.9, 0.999, 1e-8, 0, 0),
                   "adamw_update: step 0 must count from 1");
  CHECK_REEL_ERROR(sgd_update({zeros({3, 2}).t()}, {zeros({2, 3})}, {}, 0.1, 0, 0, 0, false, 1),
                   "sgd_update: param 0 (2, 3) is not contiguous");
  CHECK_REEL_ERROR(sgd_update({p}, {g}, {}, 0.1, 0.9, 0, 0, false, 1), "sgd_update: 1 params but 0 momentum_bufs");
  CHECK_REEL_ERROR(sgd_update({p}, {g}, {p}, 0.1, 0.9, 0.1, 0, true, 1),
                   "sgd_update: Nesterov momentum needs momentum > 0 and dampening 0");
  CHECK_REEL_ERROR(sgd_update({p}, {Tensor()}, {}, 0.1, 0, 0, 0, false, 1),
                   "sgd_update: grads 0 of param (3) is undefined");
  CHECK_REEL_ERROR(global_grad_norm({zeros({2}, DType::i32)}), "global_grad_norm: tensor 0 (2) has dtype i32");
}

TEST_CASE("16-bit parameters: f32 state, the update in f32 rounded once to the parameter's type") {
  for (Device d : devices())
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(dt);
      // p = 1, g = 0.5: AdamW step 1 (wd 0) moves p by lr exactly in f32: 1 - 2^-6 = 0.984375, exact in
      // both 16-bit types; m = 0.05 and v = 0.00025 stay f32 (not representable in bf16: 0.05 is
      // 0.0500488 there).
      Tensor p = vec({1.0, -1.0}).to(dt).to(d), g = vec({0.5, -0.5}).to(dt).to(d);
      Tensor m = zeros({2}, DType::f32, d), v = zeros({2}, DType::f32, d);
      adamw_update({p}, {g}, {m}, {v}, 0x1p-6, 0.9, 0.999, 0, 0, 1);
      CHECK(values(p) == std::vector<double>{1 - 0x1p-6, -1 + 0x1p-6});
      CHECK(values(m) == std::vector<double>{static_cast<double>(0.1f * 0.5f), -static_cast<double>(0.1f * 0.5f)});
      CHECK(m.dtype() == DType::f32);
      // An update below half the parameter's ulp is lost in the one rounding (bf16: ulp at 1 is 2^-7).
      Tensor q = vec({1.0}).to(dt).to(d), qg = vec({1.0}).to(dt).to(d);
      sgd_update({q}, {qg}, {}, dt == DType::bf16 ? 0x1p-10 : 0x1p-13, 0, 0, 0, false, 1);
      CHECK(values(q) == std::vector<double>{1.0});
      // SGD's momentum buffer is f32: 0.1 x 3 steps of g = 1 accumulate there, not in 16 bits.
      Tensor r = vec({0.0}).to(dt).to(d), rg = vec({1.0}).to(dt).to(d), buf = zeros({1}, DType::f32, d);
      for (int64_t step = 1; step <= 2; ++step) sgd_update({r}, {rg}, {buf}, 0.25, 0.5, 0, 0, false, step);
      CHECK(values(buf) == std::vector<double>{1.5});                // 1, then 0.5 + 1
      CHECK(values(r) == std::vector<double>{-0.25 - 0.25 * 1.5});  // exact in both
      // The norm and scale_ read and write 16-bit gradients.
      Tensor h = vec({3.0, 4.0}).to(dt).to(d);
      CHECK(global_grad_norm({h}) == 5.0);
      scale_({h}, 0.5);
      CHECK(values(h) == std::vector<double>{1.5, 2.0});
    }
}

TEST_CASE("16-bit parameters: state in the parameter's own type is refused, naming the one expected") {
  const Tensor p = zeros({3}, DType::bf16), g = zeros({3}, DType::bf16);
  CHECK_REEL_ERROR(adamw_update({p}, {g}, {zeros({3}, DType::bf16)}, {zeros({3})}, 1e-3, 0.9, 0.999, 1e-8, 0, 1),
                   "adamw_update: param 0 (3) bf16 on cpu and its exp_avg (3) bf16 on cpu differ (exp_avg of a "
                   "bf16 param: f32)");
  CHECK_REEL_ERROR(adamw_update({p}, {zeros({3})}, {zeros({3})}, {zeros({3})}, 1e-3, 0.9, 0.999, 1e-8, 0, 1),
                   "its grads (3) f32 on cpu differ (grads of a bf16 param: bf16)");
  CHECK_REEL_ERROR(sgd_update({zeros({3}, DType::f16)}, {zeros({3}, DType::f16)}, {zeros({3}, DType::f16)}, 0.1, 0.9, 0,
                              0, false, 1),
                   "its momentum_bufs (3) f16 on cpu differ (momentum_bufs of a f16 param: f32)");
}

TEST_CASE("rule_update<Lion> over two steps, by hand: the sign of the interpolation, weight decay, 0 and NaN") {
  using kernels::Lion;
  for (Device d : devices()) {
    CAPTURE(d);
    // lr 0.1, betas (0.9, 0.99): u = 0.1 g on step 1 (m = 0): sign +1, p = 0.9, m = 0.005; step 2,
    // g = -0.3: u = 0.0045 - 0.03 < 0, p = 1.0, m = 0.00495 - 0.003.
    Tensor p = vec({1.0, 2.0, 3.0}).to(d), m = zeros({3}, DType::f64, d);
    rule_update<Lion>({p}, {vec({0.5, 0.0, NAN}).to(d)}, {{m}}, Lion::Options{}, 0.1, 1);
    std::vector<double> pv = values(p);
    CHECK(pv[0] == doctest::Approx(0.9).epsilon(1e-15));
    CHECK(pv[1] == 2.0);  // u = 0: no move
    CHECK(std::isnan(pv[2]));
    rule_update<Lion>({p}, {vec({-0.3, 0.0, 0.0}).to(d)}, {{m}}, Lion::Options{}, 0.1, 2);
    check_close(p.narrow(0, 0, 2), {1.0, 2.0}, 1e-15, 1e-15);
    check_close(m.narrow(0, 0, 1), {0.99 * 0.005 - 0.01 * 0.3}, 1e-15, 1e-17);
    // Decoupled weight decay first: p = 2 (1 - 0.1 x 0.5) - 0.1.
    Tensor q = vec({2.0}).to(d), mq = zeros({1}, DType::f64, d);
    rule_update<Lion>({q}, {vec({1.0}).to(d)}, {{mq}}, Lion::Options{0.9, 0.99, 0.5}, 0.1, 1);
    check_close(q, {2.0 * 0.95 - 0.1}, 1e-15, 1e-15);
    // A bf16 parameter, f32 state: 1 - 2^-6 is exact in bf16.
    Tensor h = vec({1.0}).to(DType::bf16).to(d), mh = zeros({1}, DType::f32, d);
    rule_update<Lion>({h}, {vec({0.5}).to(DType::bf16).to(d)}, {{mh}}, Lion::Options{}, 0x1p-6, 1);
    CHECK(values(h) == std::vector<double>{1 - 0x1p-6});
    CHECK(values(mh) == std::vector<double>{static_cast<double>(0.01f * 0.5f)});
  }
}

TEST_CASE("rule_update: bad lists and options raise reel::Error naming the rule") {
  using kernels::Lion;
  const Tensor p = zeros({3}), g = zeros({3});
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, {}, Lion::Options{}, 0.1, 1),
                   "lion_update: 0 state lists but 1 expected (one per slot)");
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, {{zeros({3}, DType::f64)}}, Lion::Options{}, 0.1, 1),
                   "lion_update: param 0 (3) f32 on cpu and its exp_avg (3) f64 on cpu differ (exp_avg of a f32 "
                   "param: f32)");
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, std::vector<std::vector<Tensor>>(1), Lion::Options{}, 0.1, 1),
                   "lion_update: 1 params but 0 exp_avg");
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, {{zeros({3})}}, Lion::Options{}, 0.1, 0),
                   "lion_update: step 0 must count from 1");
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, {{zeros({3})}}, Lion::Options{}, -1, 1),
                   "lion_update: lr (-1) must be a finite number >= 0");
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, {{zeros({3})}}, Lion::Options{1.5, 0.99, 0}, 0.1, 1),
                   "Lion: betas (1.5, 0.99) must be in [0, 1)");
  CHECK_REEL_ERROR(rule_update<Lion>({p}, {g}, {{zeros({3})}}, Lion::Options{0.9, 0.99, -1}, 0.1, 1),
                   "Lion: weight_decay (-1) must be >= 0");
}
