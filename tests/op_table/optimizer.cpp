// tests/op_table/optimizer.cpp: the op table's optimizer kernels: sgd_update (momentum, dampening,
// weight decay, Nesterov), adamw_update (decoupled and Adam's L2 form) and the rules of
// kernels/optimizer_rules.h (rule_row: each against its f64 formula) over several steps, the
// global gradient norm and scale_, over long mixed-dtype lists (more tensors than one launch
// takes, chunks past one launch), against the torch formulas in f64. Their rows run in the dtypes
// their lists mix; the "16bit" lists hold bf16 and f16 parameters (f32 state), with the 16-bit
// tolerances of with_16bit() below. The window's device decisions: the updates under a
// kernels::StepControl (a clip coefficient and the step count read from the device, and a skip),
// global_grad_norm_ (the norm, the clip coefficient and the found flag on the device) and
// accumulate_loss_.
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "kernels/optimizer_rules.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
const std::vector<DType> kDTypes = {DType::f32, DType::f64};

// ==== optimizer updates, the gradient norm, scale_ =================================================

// A parameter list with what one launch does not hold: 70 tensors (a launch has 64 slots), a
// tensor of 2 chunks of 16384 and, when `big`, one past the 320 chunks of a launch (5.3M elements);
// sizes 1, 31 x 33, 257, and one f64 tensor among the f32 ones. The "chunked" list: 40000 elements
// over three chunks, an empty tensor and a scalar, f64 and f32 alternating.
// The "16bit" list: a model held in bf16 and f16 (Module::to) beside one f32 tensor, 135 tensors
// (each 16-bit dtype past a launch's 64 slots) and one of two chunks.
std::vector<std::pair<Shape, DType>> param_list(const std::string& kind) {
  std::vector<std::pair<Shape, DType>> l;
  if (kind == "16bit") {
    l = {{{1}, DType::bf16}, {{31, 33}, DType::f16}, {{257}, DType::f32}, {{20000}, DType::bf16}, {{5}, DType::f16}};
    for (int i = 0; i < 130; ++i) l.push_back({{3 + i}, i % 2 ? DType::bf16 : DType::f16});
    return l;
  }
  if (kind == "chunked") {
    const std::vector<Shape> shapes = {{200, 200}, {7}, {0}, {}, {3, 5}};
    for (size_t i = 0; i < shapes.size(); ++i) l.push_back({shapes[i], i % 2 ? DType::f32 : DType::f64});
    return l;
  }
  l = {{{1}, DType::f32}, {{31, 33}, DType::f32}, {{257}, DType::f64}, {{20000}, DType::f32},
       {{kind == "big" ? 321 * 16384 + 5 : 5}, DType::f32}};
  for (int i = 0; i < 65; ++i) l.push_back({{3 + i}, DType::f32});
  return l;
}
Tensors make_list(Generator& g, const std::string& kind, double lo, double hi) {
  Tensors l;
  for (const auto& [shape, dt] : param_list(kind))
    l.push_back(shape_numel(shape) > 1000000 ? rand(shape, DType::f32, Device::cpu(), &g)  // f64 would cost seconds
                                             : uniform_f64(g, shape, lo, hi).to(dt));
  return l;
}
// Several lists of `kind` one after the other, the i-th with values in ranges[i]: params, grads, state.
// The state lists (from the third on) are in the params' acc_dtype: f32 for a 16-bit parameter.
Tensors make_lists(Generator& g, const std::string& kind, const std::vector<std::pair<double, double>>& ranges) {
  Tensors all;
  for (size_t k = 0; k < ranges.size(); ++k)
    for (const Tensor& t : make_list(g, kind, ranges[k].first, ranges[k].second))
      all.push_back(k >= 2 ? t.to(acc_dtype(t.dtype())) : t);
  return all;
}

// The tolerances of a row's outputs in the 16-bit types, beside its f32 and f64 ones. A 16-bit
// parameter is updated in f32 and rounded once per step to its type (unit roundoff u: bf16 2^-8,
// f16 2^-11), so after `steps` steps it is within steps x u of the values it passed through: at
// most |final| + `reach` (what the steps move a parameter in all: rtol steps x u, atol
// steps x u x reach). Between devices the f32 updates agree to an ulp or two of f32; a rounding
// boundary between them puts the 16-bit results one ulp (2u) apart, per step. The f32 state of a
// 16-bit parameter keeps f32's tolerance.
Tols with_16bit(Tols t, double steps, double reach, bool device) {
  const double bu = 0x1p-8, hu = 0x1p-11, k = steps * (device ? 2 : 1);
  t.by_dtype.push_back({DType::bf16, {k * bu, k * bu * reach}});
  t.by_dtype.push_back({DType::f16, {k * hu, k * hu * reach}});
  return t;
}
// The list-th of the lists of n tensors in l.
Tensors slice_of(const Tensors& l, size_t list, size_t n) {
  return Tensors(l.begin() + static_cast<int64_t>(list * n), l.begin() + static_cast<int64_t>((list + 1) * n));
}
Tensors clones(const Tensors& l) {
  Tensors r;
  for (const Tensor& t : l) r.push_back(t.clone());
  return r;
}

struct Sgd {
  double lr, momentum, dampening, wd;
  bool nesterov;
};
struct Adam {
  double lr, b1, b2, eps, wd;
  bool decoupled;
};

// The torch formulas, element by element in f64, over the given steps (the grads fixed).
Values sgd_ref(const Tensors& p, const Tensors& g, const Tensors& buf, const Sgd& s, const std::vector<int64_t>& steps) {
  Values rp, rb;
  for (size_t i = 0; i < p.size(); ++i) {
    std::vector<double> pv = values(p[i]), gv = values(g[i]), bv = values(buf[i]);
    for (size_t j = 0; j < pv.size(); ++j)
      for (int64_t step : steps) {
        double d = gv[j] + s.wd * pv[j];
        if (s.momentum != 0) {
          bv[j] = step == 1 ? d : s.momentum * bv[j] + (1 - s.dampening) * d;
          d = s.nesterov ? d + s.momentum * bv[j] : bv[j];
        }
        pv[j] -= s.lr * d;
      }
    rp.push_back(pv);
    rb.push_back(bv);
  }
  if (s.momentum != 0) rp.insert(rp.end(), rb.begin(), rb.end());
  return rp;
}
Values adam_ref(const Tensors& p, const Tensors& g, const Tensors& m, const Tensors& v, const Adam& a,
                const std::vector<int64_t>& steps) {
  Values rp, rm, rv;
  for (size_t i = 0; i < p.size(); ++i) {
    std::vector<double> pv = values(p[i]), gv = values(g[i]), mv = values(m[i]), vv = values(v[i]);
    for (size_t j = 0; j < pv.size(); ++j)
      for (int64_t step : steps) {
        double gj = gv[j];
        if (a.decoupled) pv[j] *= 1 - a.lr * a.wd;
        else gj += a.wd * pv[j];
        mv[j] = a.b1 * mv[j] + (1 - a.b1) * gj;
        vv[j] = a.b2 * vv[j] + (1 - a.b2) * gj * gj;
        const double bc1 = 1 - std::pow(a.b1, step), bc2 = 1 - std::pow(a.b2, step);
        pv[j] -= a.lr / bc1 * mv[j] / (std::sqrt(vv[j]) / std::sqrt(bc2) + a.eps);
      }
    rp.push_back(pv);
    rm.push_back(mv);
    rv.push_back(vv);
  }
  rp.insert(rp.end(), rm.begin(), rm.end());
  rp.insert(rp.end(), rv.begin(), rv.end());
  return rp;
}

// ==== the rules of kernels/optimizer_rules.h ======================================================

// A rule's formula for one element, in f64, written in the test as its paper or reference library
// writes it: p and the state values s[0..kSlots) updated in place for the gradient g at `step`.
using RuleRef = std::function<void(double& p, double g, double* s, int64_t step)>;

// The row of kernels::rule_update<Rule>: `steps` steps over the lists of `kind` (params and grads
// drawn in [-1, 1], state slot k in slot_ranges[k]) with `options` and `lr`, its parameters and then
// each slot's state against `ref` run element by element in f64, and on every device against the
// cpu. `reach` bounds how far the steps move a parameter in all (the 16-bit tolerances: with_16bit).
template <typename Rule>
OpCase rule_row(const typename Rule::Options& options, double lr, const std::string& kind,
                const std::vector<int64_t>& steps, const std::vector<std::pair<double, double>>& slot_ranges,
                RuleRef ref, double reach) {
  static constexpr size_t K = Rule::kSlots;  // static: lambdas read it without capturing (clang)
  const size_t n = param_list(kind).size();
  std::vector<std::pair<double, double>> ranges{{-1, 1}, {-1, 1}};  // params, grads
  ranges.insert(ranges.end(), slot_ranges.begin(), slot_ranges.end());
  // f32 elements against the f64 formula; f64 elements to a few ulps of the same formula.
  const Tols upd = tols({1e-6, 1e-7}, {1e-12, 1e-12}), prec = tols(1e-6, 1e-14);
  const double n_steps = static_cast<double>(steps.size());
  std::vector<Tols> device(n, with_16bit(upd, n_steps, reach, true));  // the params, 16-bit ones too
  device.push_back(upd);                                                // the state: acc_t
  OpCase row(std::string(Rule::kName) + " lr " + str(lr) + " steps " + std::to_string(steps.front()) + ".." +
                 std::to_string(steps.back()) + ", " + kind + " list",
             [kind, ranges](Generator& g) { return make_lists(g, kind, ranges); },
             [options, lr, steps, n](const Tensors& in, Device) {
               const Tensors p = clones(slice_of(in, 0, n));
               std::vector<Tensors> state;
               for (size_t k = 0; k < K; ++k) state.push_back(clones(slice_of(in, 2 + k, n)));
               for (int64_t step : steps) kernels::rule_update<Rule>(p, slice_of(in, 1, n), state, options, lr, step);
               Tensors out = p;
               for (const Tensors& slot : state) out.insert(out.end(), slot.begin(), slot.end());
               return out;
             },
             device);
  row.with_dtypes({}).with_reference(
      [steps, n, ref](const Tensors& in) {
        Values out(n * (1 + K));
        for (size_t i = 0; i < n; ++i) {
          std::vector<double> p = values(in[i]), g = values(in[n + i]);
          std::vector<std::vector<double>> s;
          for (size_t k = 0; k < K; ++k) s.push_back(values(in[(2 + k) * n + i]));
          for (size_t j = 0; j < p.size(); ++j) {
            double sj[K > 0 ? K : 1];
            for (size_t k = 0; k < K; ++k) sj[k] = s[k][j];
            for (int64_t step : steps) ref(p[j], g[j], sj, step);
            for (size_t k = 0; k < K; ++k) s[k][j] = sj[k];
          }
          out[i] = p;
          for (size_t k = 0; k < K; ++k) out[(1 + k) * n + i] = s[k];
        }
        return out;
      },
      {with_16bit(prec, n_steps, reach, false)});
  return row;
}

std::vector<OpCase> optimizer_cases() {
  using namespace kernels;
  std::vector<OpCase> cases;
  struct SgdRow {
    Sgd s;
    std::string list;
    std::vector<int64_t> steps;  // step 1 starts the buffer at the gradient
  };
  const std::vector<SgdRow> sgds = {
      {{0.1, 0, 0, 0, false}, "long", {1, 2}},     {{0.1, 0, 0, 0.01, false}, "long", {1, 2}},
      {{0.1, 0.9, 0, 0.01, false}, "long", {1, 2}}, {{0.1, 0.9, 0.1, 0, false}, "long", {1, 2}},
      {{0.1, 0.9, 0, 0.001, true}, "long", {1, 2}}, {{1e-2, 0.9, 0, 0.1, true}, "chunked", {5}},
      // bf16 and f16 parameters with f32 buffers; without weight decay, so that the buffers, which
      // see only the (exact) 16-bit gradients, keep f32's tolerance.
      {{0.1, 0, 0, 0, false}, "16bit", {1, 2}},     {{0.1, 0.9, 0.1, 0, false}, "16bit", {1, 2}},
      {{0.1, 0.9, 0, 0, true}, "16bit", {1, 2}},
  };
  // f32 elements against the f64 formula; f64 elements to a few ulps of the same formula.
  const Tols upd = tols({1e-6, 1e-7}, {1e-12, 1e-12}), ref = tols(1e-6, 1e-14);
  for (const SgdRow& r : sgds) {
    const size_t n = param_list(r.list).size();
    OpCase row("sgd_update lr " + str(r.s.lr) + " momentum " + str(r.s.momentum) + " dampening " + str(r.s.dampening) +
                   " wd " + str(r.s.wd) + (r.s.nesterov ? " nesterov" : "") + ", " + r.list + " list",
               [r](Generator& g) { return make_lists(g, r.list, {{-1, 1}, {-1, 1}, {-1, 1}}); },  // p, grads, buffers
               [r, n](const Tensors& in, Device) {
                 const Tensors p = clones(slice_of(in, 0, n)), buf = clones(slice_of(in, 2, n));
                 for (int64_t step : r.steps)
                   sgd_update(p, slice_of(in, 1, n), r.s.momentum != 0 ? buf : Tensors{}, r.s.lr, r.s.momentum,
                              r.s.dampening, r.s.wd, r.s.nesterov, step);
                 Tensors out = p;
                 if (r.s.momentum != 0) out.insert(out.end(), buf.begin(), buf.end());
                 return out;
               },
               // SGD at lr 0.1 moves a parameter by at most 0.1 x 2 per step (Nesterov): reach 0.4.
               {with_16bit(upd, static_cast<double>(r.steps.size()), 0.4, true)});
    row.with_dtypes({}).with_reference(
        [r, n](const Tensors& in) { return sgd_ref(slice_of(in, 0, n), slice_of(in, 1, n), slice_of(in, 2, n), r.s, r.steps); },
        {with_16bit(ref, static_cast<double>(r.steps.size()), 0.4, false)});
    cases.push_back(row);
  }
  struct AdamRow {
    Adam a;
    std::string list;
    std::vector<int64_t> steps;
  };
  const std::vector<AdamRow> adams = {{{1e-3, 0.9, 0.95, 1e-8, 0.1, true}, "long", {1, 2, 3}},
                                      {{1e-3, 0.9, 0.95, 1e-8, 0.1, false}, "long", {1, 2, 3}},
                                      {{1e-2, 0.9, 0.95, 1e-8, 0.1, true}, "chunked", {3}},
                                      // bf16 and f16 parameters, f32 moments; decoupled weight decay
                                      // only, so that m and v see only the (exact) 16-bit gradients.
                                      {{1e-3, 0.9, 0.95, 1e-8, 0.1, true}, "16bit", {1, 2, 3}}};
  for (const AdamRow& r : adams) {
    const size_t n = param_list(r.list).size();
    OpCase row(std::string(r.a.decoupled ? "adamw_update" : "adamw_update (Adam's L2 form)") + " lr " + str(r.a.lr) +
                   " steps " + std::to_string(r.steps.front()) + ".." + std::to_string(r.steps.back()) + ", " +
                   r.list + " list",
               [r](Generator& g) {  // p, grads, exp_avg, exp_avg_sq
                 return make_lists(g, r.list, {{-1, 1}, {-1, 1}, {-0.1, 0.1}, {0, 0.01}});
               },
               [r, n](const Tensors& in, Device) {
                 const Tensors p = clones(slice_of(in, 0, n)), m = clones(slice_of(in, 2, n)),
                               v = clones(slice_of(in, 3, n));
                 for (int64_t step : r.steps)
                   adamw_update(p, slice_of(in, 1, n), m, v, r.a.lr, r.a.b1, r.a.b2, r.a.eps, r.a.wd, step,
                                r.a.decoupled);
                 Tensors out = p;
                 out.insert(out.end(), m.begin(), m.end());
                 out.insert(out.end(), v.begin(), v.end());
                 return out;
               },
               {upd});
    // v's elements are ~1e-3: their own absolute tolerance.
    // Adam's first steps from the drawn moments can move a parameter by 50 lr (m^ / sqrt(v^) with
    // a large m0 and a small v0), so reach is 1, as the parameters' own range.
    const double steps = static_cast<double>(r.steps.size()), reach = 1;
    row.device.assign(n, with_16bit(upd, steps, reach, true));
    row.device.insert(row.device.end(), n, upd);
    row.device.push_back(tols({1e-6, 1e-9}, {1e-12, 1e-12}));
    row.with_dtypes({}).with_reference(
        [r, n](const Tensors& in) {
          return adam_ref(slice_of(in, 0, n), slice_of(in, 1, n), slice_of(in, 2, n), slice_of(in, 3, n), r.a, r.steps);
        },
        {with_16bit(ref, steps, reach, false)});
    cases.push_back(row);
  }
  // Lion against its paper's formula in f64: decoupled decay, the sign of the interpolation, then
  // the momentum. A parameter moves by lr per step (reach 1: the parameters' own range).
  struct LionRow {
    kernels::Lion::Options o;
    double lr;
    std::string list;
    std::vector<int64_t> steps;
  };
  const std::vector<LionRow> lions = {{{0.9, 0.99, 0}, 1e-2, "long", {1, 2, 3}},
                                      {{0.95, 0.98, 0.1}, 1e-3, "chunked", {1, 2}},
                                      // beta1 0.87, not 0.9: with 0.9 a tie b1 m = -(1 - b1) g is
                                      // exact for some bf16 g and m (g = -9 m), where f32 and f64
                                      // round the interpolation to opposite signs of 0.
                                      {{0.87, 0.99, 0.1}, 1e-2, "16bit", {1, 2, 3}}};
  for (const LionRow& r : lions)
    cases.push_back(rule_row<kernels::Lion>(
        r.o, r.lr, r.list, r.steps, {{-0.1, 0.1}},  // exp_avg
        [o = r.o, lr = r.lr](double& p, double g, double* s, int64_t) {
          p *= 1 - lr * o.weight_decay;
          const double u = o.beta1 * s[0] + (1 - o.beta1) * g;
          p -= lr * (u > 0 ? 1.0 : u < 0 ? -1.0 : 0.0);
          s[0] = o.beta2 * s[0] + (1 - o.beta2) * g;
        },
        1));
  // The global norm (accumulated in double: the cpu's value to 1e-12 on every device) and scale_.
  for (const std::string kind : {"long", "big", "chunked", "strided", "16bit"}) {
    OpCase row("global_grad_norm and scale_ by 0.37, " + kind + " list",
               [kind](Generator& g) {
                 return kind == "strided" ? Tensors{uniform_f64(g, {31, 33}).to(DType::f32)} : make_list(g, kind, -1, 1);
               },
               [kind](const Tensors& in, Device d) {
                 Tensors views;
                 for (const Tensor& t : in) views.push_back(kind == "strided" ? t.t() : t);  // made contiguous
                 Tensors out{scalar_tensor(global_grad_norm(views), DType::f64, d)};
                 const Tensors scaled = clones(in);
                 scale_(scaled, 0.37);
                 out.insert(out.end(), scaled.begin(), scaled.end());
                 return out;
               },
               {tols(1e-12, 1e-12), kExact});  // the scaled values: the same f32 product, rounded once
    row.with_dtypes({}).with_reference(
        [](const Tensors& in) {
          double ss = 0;
          Values r(1);
          for (const Tensor& t : in) {
            r.push_back(map(t, [](double x) { return 0.37 * x; }));
            for (double x : values(t)) ss += x * x;
          }
          r[0] = {std::sqrt(ss)};
          return r;
        },
        // A 16-bit value: 0.37 x (exact in f32's product to 2^-24) rounded once: u relative, and
        // half the smallest subnormal absolute (f16: 2^-25; bf16's subnormals are far below).
        {tols(1e-12, 1e-12), Tols{{{DType::f32, {1e-6, 1e-6}}, {DType::f64, {1e-15, 1e-15}},
                                   {DType::bf16, {0x1p-8, 1e-30}}, {DType::f16, {0x1p-11, 0x1p-25}}}}});
    cases.push_back(row);
  }
  // The window's device decisions (kernels::StepControl): each update with a clip coefficient read
  // from the device (0.37: as scale_(grads, 0.37) then the update) and the step count read from
  // the device (steps {2}: the update runs at step 3 and advances the count to 3, once over the
  // long list's several launches), then the same with found_inf set (nothing written, the count
  // stays 2); the learning rate read from the device too (StepControl::lr; the by-value rate is
  // then 0, ignored), or, scheduled, computed there from the count (StepControl::schedule: a
  // warm-up of 1 step and a cosine to step 10, at 0-based step 2). Outputs: the params, the state
  // and the count (as f64).
  for (const int mode : {0, 1, 2}) {
    const bool found = mode == 1, scheduled = mode == 2;
    const std::string tag = std::string(found       ? " skipped (found_inf 1)"
                                        : scheduled ? " coef 0.37, step 3 and a cosine schedule from the device"
                                                    : " coef 0.37, step 3 from the device");
    // The schedule around a base rate: max 2 lr, min lr / 10; its rate at step index 2, as the
    // reference computes it (WarmupCosineLr's formula written out).
    const auto rule = [](double lr) { return LrRule{LrRule::kWarmupCosine, 2 * lr, lr / 10, 1, 10}; };
    const auto rate = [scheduled](double lr) {
      return scheduled ? lr / 10 + 0.5 * (2 * lr - lr / 10) * (1 + std::cos(M_PI * (2 - 1) / 9.0)) : lr;
    };
    const auto control = [found, scheduled, rule](Device d, double lr) {
      return StepControl{full({1}, 0.37, DType::f64, d), full({1}, found ? 1.0 : 0.0, DType::i32, d),
                         from_vector<int64_t>({2}, {1}).to(d), scheduled ? Tensor() : full({1}, lr, DType::f64, d),
                         scheduled ? rule(lr) : LrRule{}};
    };
    const std::vector<int64_t> step3{3};
    const auto scaled = [](const Tensors& g) {
      Tensors r;
      for (const Tensor& t : g) r.push_back(from_vector(map(t, [](double x) { return 0.37 * x; }), t.shape()));
      return r;
    };
    const auto steps_out = [found]() { return std::vector<double>{found ? 2.0 : 3.0}; };
    {
      const Adam a{1e-3, 0.9, 0.95, 1e-8, 0.1, true};
      const size_t n = param_list("long").size();
      OpCase row("adamw_update under StepControl," + tag + ", long list",
                 [](Generator& g) { return make_lists(g, "long", {{-1, 1}, {-1, 1}, {-0.1, 0.1}, {0, 0.01}}); },
                 [a, n, control](const Tensors& in, Device d) {
                   const Tensors p = clones(slice_of(in, 0, n)), m = clones(slice_of(in, 2, n)),
                                 v = clones(slice_of(in, 3, n));
                   const StepControl c = control(d, a.lr);
                   adamw_update(p, slice_of(in, 1, n), m, v, 0.0, a.b1, a.b2, a.eps, a.wd, 1, a.decoupled, c);
                   Tensors out = p;
                   out.insert(out.end(), m.begin(), m.end());
                   out.insert(out.end(), v.begin(), v.end());
                   out.push_back(c.steps.to(DType::f64));
                   return out;
                 },
                 {upd});
      row.device.assign(2 * n, upd);
      row.device.push_back(tols({1e-6, 1e-9}, {1e-12, 1e-12}));
      row.with_dtypes({}).with_reference(
          [a, n, found, step3, scaled, steps_out, rate](const Tensors& in) {
            Values out;
            if (found) {
              for (size_t i = 0; i < 4 * n; ++i)
                if (i < n || i >= 2 * n) out.push_back(values(in[i]));  // p, m, v as they were
            } else {
              Adam at = a;
              at.lr = rate(a.lr);
              out = adam_ref(slice_of(in, 0, n), scaled(slice_of(in, 1, n)), slice_of(in, 2, n), slice_of(in, 3, n), at,
                             step3);
            }
            out.push_back(steps_out());
            return out;
          },
          {ref});
      cases.push_back(row);
    }
    {
      const Sgd sg{0.1, 0.9, 0, 0.01, false};
      const size_t n = param_list("long").size();
      OpCase row("sgd_update under StepControl," + tag + ", long list",
                 [](Generator& g) { return make_lists(g, "long", {{-1, 1}, {-1, 1}, {-1, 1}}); },
                 [sg, n, control](const Tensors& in, Device d) {
                   const Tensors p = clones(slice_of(in, 0, n)), buf = clones(slice_of(in, 2, n));
                   const StepControl c = control(d, sg.lr);
                   sgd_update(p, slice_of(in, 1, n), buf, 0.0, sg.momentum, sg.dampening, sg.wd, sg.nesterov, 1, c);
                   Tensors out = p;
                   out.insert(out.end(), buf.begin(), buf.end());
                   out.push_back(c.steps.to(DType::f64));
                   return out;
                 },
                 {upd});
      row.with_dtypes({}).with_reference(
          [sg, n, found, step3, scaled, steps_out, rate](const Tensors& in) {
            Values out;
            if (found) {
              for (size_t i = 0; i < 3 * n; ++i)
                if (i < n || i >= 2 * n) out.push_back(values(in[i]));  // p, buf as they were
            } else {
              Sgd st = sg;
              st.lr = rate(sg.lr);
              out = sgd_ref(slice_of(in, 0, n), scaled(slice_of(in, 1, n)), slice_of(in, 2, n), st, step3);
            }
            out.push_back(steps_out());
            return out;
          },
          {ref});
      cases.push_back(row);
    }
    {
      const kernels::Lion::Options o{0.9, 0.99, 0.1};
      const double lr = 1e-2;
      const size_t n = param_list("long").size();
      OpCase row("lion_update under StepControl," + tag + ", long list",
                 [](Generator& g) { return make_lists(g, "long", {{-1, 1}, {-1, 1}, {-0.1, 0.1}}); },
                 [o, lr, n, control](const Tensors& in, Device d) {
                   const Tensors p = clones(slice_of(in, 0, n));
                   std::vector<Tensors> state{clones(slice_of(in, 2, n))};
                   const StepControl c = control(d, lr);
                   rule_update<kernels::Lion>(p, slice_of(in, 1, n), state, o, 0.0, 1, c);
                   Tensors out = p;
                   out.insert(out.end(), state[0].begin(), state[0].end());
                   out.push_back(c.steps.to(DType::f64));
                   return out;
                 },
                 {upd});
      row.with_dtypes({}).with_reference(
          [o, base_lr = lr, n, found, steps_out, rate](const Tensors& in) {
            const double lr = rate(base_lr);
            Values out;
            for (size_t i = 0; i < 2 * n; ++i) out.push_back(values(in[i < n ? i : i + n]));
            if (!found)
              for (size_t i = 0; i < n; ++i) {
                const std::vector<double> g = values(in[n + i]);
                for (size_t j = 0; j < g.size(); ++j) {
                  double& p = out[i][j];
                  double& m = out[n + i][j];
                  const double gj = 0.37 * g[j];
                  p *= 1 - lr * o.weight_decay;
                  const double u = o.beta1 * m + (1 - o.beta1) * gj;
                  p -= lr * (u > 0 ? 1.0 : u < 0 ? -1.0 : 0.0);
                  m = o.beta2 * m + (1 - o.beta2) * gj;
                }
              }
            out.push_back(steps_out());
            return out;
          },
          {ref});
      cases.push_back(row);
    }
  }
  // The device norm (global_grad_norm_): out = {norm, clip coefficient} for max_norm 0.5 (it clips:
  // the norm of these lists is far above), the found flag set from the norm (0: finite), then a
  // list with an inf: found 1, out {0, 1}.
  for (const bool inf : {false, true}) {
    OpCase row(std::string("global_grad_norm_ (device norm, clip coefficient, found_inf)") + (inf ? " with an inf" : "") +
                   ", long list",
               [inf](Generator& g) {
                 Tensors l = make_list(g, "long", -1, 1);
                 if (inf) l[3] = from_vector(std::vector<double>(l[3].numel(), INFINITY), l[3].shape()).to(l[3].dtype());
                 return l;
               },
               [](const Tensors& in, Device d) {
                 const Tensor out = empty({2}, DType::f64, d), found = zeros({1}, DType::i32, d);
                 global_grad_norm_(in, out, 0.5, found, true);
                 return Tensors{out, found.to(DType::f64)};
               },
               {tols(1e-12, 1e-12), kExact});
    row.with_dtypes({}).with_reference(
        [inf](const Tensors& in) {
          double ss = 0;
          for (const Tensor& t : in)
            for (double x : values(t)) ss += x * x;
          const double norm = std::sqrt(ss);
          if (inf) return Values{{0.0, 1.0}, {1.0}};
          return Values{{norm, 0.5 / (norm + 1e-6)}, {0.0}};
        },
        {tols(1e-12, 1e-12), kExact});
    cases.push_back(row);
  }
  // The window's loss sum on the device (accumulate_loss_): 0.25 x a + 0.25 x b, as the host's
  // double sum of item() x scale.
  {
    OpCase row("accumulate_loss_ (the window's loss sum on the device)",
               [](Generator& g) { return Tensors{uniform_f64(g, {}, 1, 3).to(DType::f32), uniform_f64(g, {1}, 1, 3)}; },
               [](const Tensors& in, Device d) {
                 const Tensor sum = empty({1}, DType::f64, d);
                 accumulate_loss_(sum, in[0], 0.25, true);
                 accumulate_loss_(sum, in[1], 0.25, false);
                 return Tensors{sum};
               },
               {kExact});
    row.with_dtypes({}).with_reference(
        [](const Tensors& in) { return Values{{values(in[0])[0] * 0.25 + values(in[1])[0] * 0.25}}; },
        {tols(1e-7, 1e-15)});
    cases.push_back(row);
  }
  return cases;
}
TEST_CASE("optimizer updates, the global grad norm and scale_ over long mixed-dtype lists") {
  run_cases(optimizer_cases(), kDTypes);
}
}  // namespace
}  // namespace reel::op_table
