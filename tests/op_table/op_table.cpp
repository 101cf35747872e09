// tests/op_table/op_table.cpp: the op table's runner (op_table.h says what each row checks), its
// dtype table, and the check that its finite differences catch a wrong gradient.
#include "op_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "autograd/tape.h"

namespace reel::op_table {

Tols with_16bit(Tols t, bool device) {
  const Tol f32 = t.of(DType::f32);
  const double k = device ? 2 : 1;
  const bool exact = f32.rtol == 0 && f32.atol == 0;
  t.by_dtype.push_back({DType::bf16, exact ? f32 : Tol{k * 0x1p-8 + f32.rtol, f32.atol}});
  t.by_dtype.push_back({DType::f16, exact ? f32 : Tol{k * 0x1p-11 + f32.rtol, f32.atol}});
  return t;
}

using reel::testing::check_close;
using reel::testing::values;

// ---- tolerances ---------------------------------------------------------------------------------

// The dtype table. eps: the unit roundoff. tape: values and gradients of a tape row in this dtype
// on every device against the f64 CPU ones; f32's is what the sums of a few dozen terms in these
// small rows round to, f64's what another order of the same f64 sums gives (emulated or real cuda).
// A new floating dtype is one entry here and one in the dtype list of each family that should run
// in it. bf16 and f16 run the fill, copy and cast rows (tests/op_table/tensor.cpp), which are exact,
// and the matmul family (tests/op_table/matmul.cpp), whose kernel rows state their own; their tape
// tolerances here (a few dozen terms' roundoff in 8 and 11 bits: the inputs rounded to the type,
// then one rounding of each f32 result) are what matmul's and linear's small tape rows meet.
const DTypeTolerance kDTypeTable[] = {
    {DType::f32, 0x1p-24, {1e-4, 1e-4}},
    {DType::f64, 0x1p-53, {1e-10, 1e-10}},
    {DType::bf16, 0x1p-8, {3e-2, 3e-2}},
    {DType::f16, 0x1p-11, {5e-3, 5e-3}},
};

const DTypeTolerance& dtype_tolerance(DType dt) {
  for (const DTypeTolerance& t : kDTypeTable)
    if (t.dtype == dt) return t;
  FAIL("the op table's dtype table has no entry for " << dtype_name(dt));
  return kDTypeTable[0];
}

Tol Tols::of(DType dt) const {
  if (!is_floating(dt)) dt = DType::f64;  // integer outputs: exact
  for (const auto& [d, t] : by_dtype)
    if (d == dt) return t;
  // A dtype the row does not name: its f32 tolerance scaled by the dtype's roundoff.
  const Tol f32 = of(DType::f32);
  const double scale = dtype_tolerance(dt).eps / dtype_tolerance(DType::f32).eps;
  return {f32.rtol * scale, f32.atol * scale};
}

Tols tols(double f32, double f64) { return {{{DType::f32, {f32, f32}}, {DType::f64, {f64, f64}}}}; }
Tols tols(Tol f32, Tol f64) { return {{{DType::f32, f32}, {DType::f64, f64}}}; }
const Tols kExact = tols(0, 0);

// ---- inputs -------------------------------------------------------------------------------------

Tensor normal_with_nan(Generator& g, const Shape& shape) {
  std::vector<double> v = values(testing::normal_f64(g, shape));
  for (size_t i = 3; i < v.size(); i += 7) v[i] = std::nan("");
  return from_vector<double>(v, shape);
}
Tensor indices(const std::vector<int64_t>& ids, const Shape& shape, DType dt) {
  return from_vector<int64_t>(ids, shape).to(dt);
}
std::string str(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}
std::vector<double> map(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = values(x);
  for (double& e : v) e = f(e);
  return v;
}

namespace {

Tensor make_input(const Shape& shape, Domain domain, Generator& gen) {
  std::vector<double> v = values(testing::normal_f64(gen, shape));
  for (double& x : v) {
    if (domain == Domain::Positive) x = std::fabs(x) + 0.5;
    if (domain == Domain::AwayFromZero) x = x + (x >= 0 ? 0.1 : -0.1);
  }
  return from_vector(v, shape);
}

}  // namespace

OpCase tape_row(std::string name, std::vector<Shape> shapes, TapeFn f, Domain domain, std::vector<bool> needs_grad) {
  for (const Shape& s : shapes) name += " " + shape_str(s);
  OpCase c(std::move(name),
           [shapes, domain](Generator& g) {
             Tensors x;
             for (const Shape& s : shapes) x.push_back(make_input(s, domain, g));
             return x;
           },
           nullptr, {});
  c.tape = std::move(f);
  c.needs_grad = std::move(needs_grad);
  return c;
}
OpCase tape_unary(const char* name, std::function<Tensor(const Tensor&)> f, Shape s, Domain domain) {
  return tape_row(name, {std::move(s)}, [f](const Tensors& x) { return f(x[0]); }, domain);
}
OpCase tape_binary(const char* name, std::function<Tensor(const Tensor&, const Tensor&)> f, Shape a, Shape b,
                   Domain domain, std::vector<bool> needs_grad) {
  return tape_row(name, {std::move(a), std::move(b)}, [f](const Tensors& x) { return f(x[0], x[1]); }, domain,
                  std::move(needs_grad));
}
OpCase tape_ternary(const char* name, std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> f, Shape a,
                    Shape b, Shape c, std::vector<bool> needs_grad) {
  return tape_row(name, {std::move(a), std::move(b), std::move(c)},
                  [f](const Tensors& x) { return f(x[0], x[1], x[2]); }, Domain::Any, std::move(needs_grad));
}

// ---- the runner ---------------------------------------------------------------------------------

namespace {

// What a family's run did, printed under REEL_OP_TABLE_STATS: rows, dtype passes, and checks
// (one per output compared, finite-difference gradient or gradcheck).
struct Stats {
  long rows = 0, tape_rows = 0, passes = 0;
  long reference = 0, f64_run = 0, device = 0, device_reference = 0, inputs = 0, finite_diff = 0;
  long gradcheck = 0, composed = 0, tape_values = 0, tape_grads = 0, tape_no_grad = 0;
};
Stats stats;

uint64_t seed_of(const std::string& s) {  // FNV-1a: the same inputs on every run and machine
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

const Tols& tol_at(const std::vector<Tols>& t, size_t i) { return t[std::min(i, t.size() - 1)]; }

Tensors converted(const Tensors& in, std::optional<DType> dt, Device d = Device::cpu()) {
  Tensors out;
  for (const Tensor& t : in) {
    Tensor c = dt && is_floating(t.dtype()) ? t.to(*dt) : t;
    out.push_back(c.to(d));
  }
  return out;
}

void run_kernel_case(const OpCase& c, const std::vector<DType>& dtypes) {
  Generator g(seed_of(c.name));
  const Tensors made = c.make(g);
  std::vector<std::optional<DType>> passes;
  for (DType dt : dtypes) passes.emplace_back(dt);
  if (passes.empty()) passes.emplace_back(std::nullopt);
  for (const std::optional<DType>& dt : passes) {
    const std::string dtype = dt ? dtype_name(*dt) : "as made";
    CAPTURE(dtype);
    ++stats.passes;
    const Tensors cpu_in = converted(made, dt);
    const Tensors expected = c.run(cpu_in, Device::cpu());
    // 1. the CPU against f64: a reference loop, or the f64 run, on the same (rounded) inputs.
    Values ref;
    if (c.reference) {
      ref = c.reference(converted(cpu_in, DType::f64));
      REQUIRE(ref.size() <= expected.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        CAPTURE(i);
        const Tol tol = tol_at(c.precision, i).of(expected[i].dtype());
        check_close(expected[i], ref[i], tol.rtol, tol.atol);
        ++stats.reference;
      }
    } else if (!c.precision.empty() && dt && *dt != DType::f64) {
      const Tensors f64 = c.run(converted(cpu_in, DType::f64), Device::cpu());
      for (size_t i = 0; i < expected.size(); ++i) {
        CAPTURE(i);
        const Tol tol = tol_at(c.precision, i).of(*dt);
        check_close(expected[i], values(f64[i]), tol.rtol, tol.atol);
        ++stats.f64_run;
      }
    }
    // 2. every other device against the CPU and the reference.
    for (Device d : testing::devices()) {
      if (d == Device::cpu()) continue;
      CAPTURE(d);
      const Tensors dev_in = converted(cpu_in, std::nullopt, d);
      const Tensors got = c.run(dev_in, d);
      REQUIRE(got.size() == expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].device() == d);
        CHECK(got[i].dtype() == expected[i].dtype());
        const Tol tol = tol_at(c.device, i).of(expected[i].dtype());
        check_close(got[i], expected[i], tol.rtol, tol.atol);
        ++stats.device;
        if (i < ref.size()) {
          const Tol p = tol_at(c.precision, i).of(expected[i].dtype());
          check_close(got[i], ref[i], tol.rtol + p.rtol, tol.atol + p.atol);
          ++stats.device_reference;
        }
      }
      for (size_t i = 0; i < dev_in.size(); ++i) check_close(dev_in[i], cpu_in[i], 0, 0);  // inputs untouched
      stats.inputs += static_cast<long>(dev_in.size());
    }
  }
  // 3. backward against finite differences, f64 on the CPU.
  for (const FiniteDiff& fd : c.finite_diff) {
    const Tensors x = converted(made, DType::f64);
    const Tensors out = c.run(x, Device::cpu());
    for (const GradPair& p : fd.grads) {
      const std::string what = "d input " + std::to_string(p.input) + " (output " + std::to_string(p.output) + ")";
      testing::check_gradient(what.c_str(), x[p.input], out[p.output],
                              [&] { return testing::weighted_sum(c.run(x, Device::cpu())[fd.loss], x[fd.weights]); });
      ++stats.finite_diff;
    }
  }
}

void run_tape_case(const OpCase& c, const std::vector<DType>& dtypes) {
  Generator gen(seed_of(c.name));
  Tensors x = c.make(gen);  // f64 CPU inputs; the ones that need a gradient require grad
  for (size_t i = 0; i < x.size(); ++i) x[i].set_requires_grad(c.needs_grad.empty() || c.needs_grad[i]);
  const autograd::GradcheckResult r = autograd::gradcheck(c.tape, x);
  CHECK_MESSAGE(r.ok, r.message);
  ++stats.gradcheck;

  // The f64 CPU reference: values and gradients of sum(w * f(x)).
  const Tensor y_ref = c.tape(x);
  if (c.composed) {
    autograd::NoGrad no_grad;
    check_close(y_ref, c.composed(x), 1e-12, 1e-12);
    ++stats.composed;
  }
  const Tensor w = randn(y_ref.shape(), DType::f64, Device::cpu(), &gen);
  autograd::backward(y_ref, w);
  for (DType dt : dtypes) {
    const std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    ++stats.passes;
    const Tol tol = dtype_tolerance(dt).tape;
    for (Device d : testing::devices()) {
      if (d == Device::cpu() && dt == DType::f64) continue;  // the reference itself
      CAPTURE(d);
      Tensors xd;
      for (const Tensor& t : x) xd.push_back(t.detach().to(dt).to(d).set_requires_grad(t.requires_grad()));
      const Tensor y = c.tape(xd);
      CHECK(y.dtype() == dt);
      CHECK(y.device() == d);
      check_close(y, y_ref, tol.rtol, tol.atol);
      ++stats.tape_values;
      autograd::backward(y, w.to(dt).to(d));
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(i);
        if (!x[i].requires_grad()) {
          CHECK_FALSE(xd[i].grad().defined());
          ++stats.tape_no_grad;
          continue;
        }
        REQUIRE(xd[i].grad().defined());
        CHECK(xd[i].grad().device() == d);
        CHECK(xd[i].grad().dtype() == dt);
        check_close(xd[i].grad(), x[i].grad(), tol.rtol, tol.atol);
        ++stats.tape_grads;
      }
    }
  }
  CHECK(autograd::Tape::current().empty());
}

}  // namespace

void run_cases(const std::vector<OpCase>& cases, const std::vector<DType>& dtypes) {
  testing::Poisoned poison;
  stats = Stats{};
  for (const OpCase& c : cases) {
    const std::string label = "case: " + c.name;
    INFO(label);
    ++stats.rows;
    if (c.tape) {
      ++stats.tape_rows;
      run_tape_case(c, c.dtypes ? *c.dtypes : dtypes);
    } else {
      run_kernel_case(c, c.dtypes ? *c.dtypes : dtypes);
    }
  }
  if (std::getenv("REEL_OP_TABLE_STATS"))
    std::printf(
        "op_table stats | %s | rows %ld (tape %ld) | passes %ld | cpu vs reference %ld | cpu vs f64 run %ld | "
        "device vs cpu %ld | device vs reference %ld | inputs unchanged %ld | finite-diff grads %ld | gradcheck %ld | "
        "composed %ld | tape values %ld | tape grads %ld | tape no-grad %ld\n",
        doctest::getContextOptions()->currentTest->m_name, stats.rows, stats.tape_rows, stats.passes,
        stats.reference, stats.f64_run, stats.device, stats.device_reference, stats.inputs, stats.finite_diff,
        stats.gradcheck, stats.composed, stats.tape_values, stats.tape_grads, stats.tape_no_grad);
}

}  // namespace reel::op_table

// The runner's finite differences are not blind: a tape op with the right value and the wrong
// gradient fails gradcheck.
TEST_CASE("op table: gradcheck catches a wrong gradient") {
  using namespace reel;
  // |x| through relu(x) + relu(-x) is right; claiming d|x|/dx = 1 (x + 2 relu(-x)) is caught by
  // comparing a detached expression that has the right value but the wrong gradient.
  auto wrong = [](const autograd::Tensors& x) { return x[0] + (relu(-x[0]) * 2.0).detach(); };
  const Tensor x = from_vector<double>({-1.3, -0.4, 0.2, 0.9, 2.1}, {5}).set_requires_grad();
  const autograd::GradcheckResult r = autograd::gradcheck(wrong, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
}
