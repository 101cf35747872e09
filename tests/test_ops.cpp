// tests/test_ops.cpp: the one table of kernel op cases (the shape of ggml's test-backend-ops).
// Every forward and backward entry point of every kernel family (kernels/ops.h: elementwise,
// matmul, reduce, LayerNorm/RMSNorm, softmax/log-softmax, cross-entropy, embedding, max with
// indices, attention, the optimizer updates, the gradient norm, scale_, dropout),
// plus the tensor-level device ops (fills, strided copies, dtype casts, rand/randn) and the tiled
// teaching SGEMM, is a row here. A new op is ONE row.
//
// A row (OpCase) names its inputs (made as f64 or integer CPU tensors from a generator seeded by
// the row's name), the op as a function of (inputs, device) returning its outputs, and per output
// the tolerances |got - expected| <= atol + rtol |expected| (f32 and f64, picked by the output's
// dtype; the last entry repeats). For each dtype of the row the harness
//   1. runs the op on the CPU in that dtype and checks the CPU itself: against the row's f64
//      reference loop when it has one (fed the inputs as rounded to the dtype), else, in f32,
//      against the f64 CPU run on the same rounded inputs;
//   2. runs it on every other device of the build (tests/testing.h devices(): cuda:0, emulated
//      by kernels/simt or real) and compares every output with the CPU's; inputs must come back
//      unchanged;
// and, where the row says so, checks the backward outputs against central finite differences of
// L = sum(forward output * weights) in f64 on the CPU (tests/testing.h check_gradient).
// Every allocation is poisoned (0xFF bytes: NaN, -1), so an output element a kernel forgets to
// write fails. Sizes are awkward on purpose: 1, 31, 257, dims that are not multiples of a warp,
// a block or a 16x16 tile, size-1 broadcast dims, transposed and sliced views, lists of more
// tensors than one launch takes.
//
// Device tolerances: elementwise math may differ by a few ulp between the device's libm and the
// CPU's (Eigen's vectorised exp/tanh, glibc); GEMM and sums round in a different order (and the
// GPU accumulates f32 in float where the CPU often uses double), so their error grows with the
// length of the sums and is scaled where rows are long. Emulated CUDA costs ~20 ns per thread and
// ~45 ns per barrier per thread: the sizes stay small.
//
// Edge cases stay in the per-family files (tests/test_elementwise.cpp ... test_nn_kernels_*.cpp,
// test_cuda_nn_ops.cpp): NaN and ties rules, ignore_index corners, masked classes, determinism
// across thread counts and emulator scheduling orders, index and bad-input errors.
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "core/random.h"
#include "kernels/ops.h"
#include "testing.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_only.h"  // matmul_tiled
#endif

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

// ==== the harness ==================================================================================

using Tensors = std::vector<Tensor>;
using Values = std::vector<std::vector<double>>;  // a reference's outputs, row-major

struct Tol {
  double rtol, atol;
};
// One output's tolerances, by the output's dtype (integer outputs use f64's: they must be equal).
struct Tols {
  Tol f32, f64;
  const Tol& of(DType dt) const { return dt == DType::f32 ? f32 : f64; }
};
Tols tols(double f32, double f64 = 1e-12) { return {{f32, f32}, {f64, f64}}; }
Tols tols(Tol f32, Tol f64) { return {f32, f64}; }
const Tols kExact = tols(0, 0);

// dL/d inputs[input] is outputs[output].
struct GradPair {
  size_t input, output;
};
// L = sum(outputs[loss] * inputs[weights]): for a scalar loss and a scalar weight, weight * loss.
struct FiniteDiff {
  size_t loss, weights;
  std::vector<GradPair> grads;
};

using MakeFn = std::function<Tensors(Generator&)>;
using RunFn = std::function<Tensors(const Tensors&, Device)>;
using RefFn = std::function<Values(const Tensors&)>;

struct OpCase {
  std::string name;
  MakeFn make;                 // f64 floating and integer CPU tensors
  RunFn run;                   // the op on inputs living on `device`, in the dtype under test
  std::vector<Tols> device;    // device vs cpu, per output (the last repeats)
  std::vector<DType> dtypes{DType::f32, DType::f64};  // floating inputs converted; empty: as made
  RefFn reference;             // f64 loops: outputs 0..k-1 of the cpu run against them
  std::vector<Tols> precision;  // cpu vs reference (or f32 vs f64 without one); empty: none
  std::vector<FiniteDiff> finite_diff;

  OpCase(std::string name_, MakeFn make_, RunFn run_, std::vector<Tols> device_)
      : name(std::move(name_)), make(std::move(make_)), run(std::move(run_)), device(std::move(device_)) {}
  OpCase& with_dtypes(std::vector<DType> d) { return dtypes = std::move(d), *this; }
  OpCase& with_reference(RefFn f, std::vector<Tols> t) { return reference = std::move(f), precision = std::move(t), *this; }
  OpCase& with_precision(std::vector<Tols> t) { return precision = std::move(t), *this; }
  OpCase& with_finite_diff(FiniteDiff fd) { return finite_diff.push_back(std::move(fd)), *this; }
};

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

void compare(const Tensors& got, const Tensors& expected, const std::vector<Tols>& t, Device d) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].device() == d);
    CHECK(got[i].dtype() == expected[i].dtype());
    const Tol& tol = tol_at(t, i).of(expected[i].dtype());
    check_close(got[i], expected[i], tol.rtol, tol.atol);
  }
}

void run_case(const OpCase& c) {
  const std::string label = "case: " + c.name;
  INFO(label);
  Generator g(seed_of(c.name));
  const Tensors made = c.make(g);
  std::vector<std::optional<DType>> passes;
  for (DType dt : c.dtypes) passes.emplace_back(dt);
  if (passes.empty()) passes.emplace_back(std::nullopt);
  for (const std::optional<DType>& dt : passes) {
    const std::string dtype = dt ? dtype_name(*dt) : "as made";
    CAPTURE(dtype);
    const Tensors cpu_in = converted(made, dt);
    const Tensors expected = c.run(cpu_in, Device::cpu());
    // 1. the CPU against f64: a reference loop, or the f64 run, on the same (rounded) inputs.
    if (c.reference) {
      const Values ref = c.reference(converted(cpu_in, DType::f64));
      REQUIRE(ref.size() <= expected.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        CAPTURE(i);
        const Tol& tol = tol_at(c.precision, i).of(expected[i].dtype());
        check_close(expected[i], ref[i], tol.rtol, tol.atol);
      }
    } else if (!c.precision.empty() && dt == DType::f32) {
      const Tensors f64 = c.run(converted(cpu_in, DType::f64), Device::cpu());
      for (size_t i = 0; i < expected.size(); ++i) {
        CAPTURE(i);
        const Tol& tol = tol_at(c.precision, i).f32;
        check_close(expected[i], values(f64[i]), tol.rtol, tol.atol);
      }
    }
    // 2. every other device against the CPU.
    for (Device d : devices()) {
      if (d == Device::cpu()) continue;
      CAPTURE(d);
      const Tensors dev_in = converted(cpu_in, std::nullopt, d);
      compare(c.run(dev_in, d), expected, c.device, d);
      for (size_t i = 0; i < dev_in.size(); ++i) check_close(dev_in[i], cpu_in[i], 0, 0);  // inputs untouched
    }
  }
  // 3. backward against finite differences, f64 on the CPU.
  for (const FiniteDiff& fd : c.finite_diff) {
    const Tensors x = converted(made, DType::f64);
    const Tensors out = c.run(x, Device::cpu());
    for (const GradPair& p : fd.grads) {
      const std::string what = "d input " + std::to_string(p.input) + " (output " + std::to_string(p.output) + ")";
      check_gradient(what.c_str(), x[p.input], out[p.output],
                     [&] { return weighted_sum(c.run(x, Device::cpu())[fd.loss], x[fd.weights]); });
    }
  }
}

void run_cases(const std::vector<OpCase>& cases) {
  Poisoned poison;
  for (const OpCase& c : cases) run_case(c);
}

// ---- inputs ----

// N(0, 1) with every 7th element NaN.
Tensor normal_with_nan(Generator& g, const Shape& shape) {
  std::vector<double> v = values(normal_f64(g, shape));
  for (size_t i = 3; i < v.size(); i += 7) v[i] = std::nan("");
  return from_vector<double>(v, shape);
}
Tensor indices(const std::vector<int64_t>& ids, const Shape& shape, DType dt) {
  return from_vector<int64_t>(ids, shape).to(dt);
}
Tensor same(const Tensor& x) { return x; }
Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }
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

// A view applied to an input before the op: the same on every device.
struct View {
  const char* name;
  Shape shape;  // of the input as made
  std::function<Tensor(const Tensor&)> apply;
};
std::vector<View> elementwise_views() {
  return {
      {"(1)", {1}, same},
      {"(257)", {257}, same},
      {"(31, 33)", {31, 33}, same},
      {"(33, 31).t()", {33, 31}, [](const Tensor& x) { return x.t(); }},
      {"(9, 4, 5).permute(2, 0, 1)[:, ::2]", {9, 4, 5}, [](const Tensor& x) { return x.permute({2, 0, 1}).slice(1, 0, 9, 2); }},
      {"(1, 31).expand(5, 31)", {1, 31}, [](const Tensor& x) { return x.expand({5, 31}); }},
      {"() scalar", {}, same},
  };
}

// ==== elementwise ==================================================================================

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// The f64 formula of each op, written independently of kernels/op_kinds.h. Log, Sqrt and
// Reciprocal get positive inputs (U[0.1, 2.1)).
std::vector<std::pair<UnaryOp, std::function<double(double)>>> unary_refs() {
  return {
      {UnaryOp::Neg, [](double x) { return -x; }},
      {UnaryOp::Exp, [](double x) { return std::exp(x); }},
      {UnaryOp::Log, [](double x) { return std::log(x); }},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }},
      {UnaryOp::Relu, [](double x) { return x > 0 ? x : 0; }},
      {UnaryOp::Gelu, gelu_ref},
      {UnaryOp::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {UnaryOp::Silu, [](double x) { return x / (1 + std::exp(-x)); }},
      {UnaryOp::Sqrt, [](double x) { return std::sqrt(x); }},
      {UnaryOp::Abs, [](double x) { return std::fabs(x); }},
      {UnaryOp::Square, [](double x) { return x * x; }},
      {UnaryOp::Reciprocal, [](double x) { return 1 / x; }},
      {UnaryOp::Softplus, [](double x) { return std::log1p(std::exp(x)); }},
  };
}
std::vector<std::pair<BinaryOp, std::function<double(double, double)>>> binary_refs() {
  return {
      {BinaryOp::Add, std::plus<double>()},         {BinaryOp::Sub, std::minus<double>()},
      {BinaryOp::Mul, std::multiplies<double>()},   {BinaryOp::Div, std::divides<double>()},
      {BinaryOp::Maximum, [](double a, double b) { return std::max(a, b); }},
      {BinaryOp::Minimum, [](double a, double b) { return std::min(a, b); }},
  };
}

// Reference broadcasting: the value of `t` (values v) at the flat output index of `shape`.
double at_broadcast(const Tensor& t, const std::vector<double>& v, const Shape& shape, int64_t flat) {
  const size_t lead = shape.size() - t.shape().size();
  int64_t idx = 0, mul = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t i = flat % shape[d];
    flat /= shape[d];
    if (d < lead) continue;
    const int64_t n = t.shape()[d - lead];
    idx += (n == 1 ? 0 : i) * mul;
    mul *= n;
  }
  return v[idx];
}

std::vector<OpCase> unary_cases() {
  std::vector<OpCase> cases;
  for (const auto& [op, ref] : unary_refs())
    for (const View& v : elementwise_views()) {
      const bool positive = unary_domain(op) == UnaryDomain::Positive;  // log, sqrt, reciprocal
      cases.push_back(
          OpCase(std::string(op_name(op)) + " " + v.name,
                 [positive, s = v.shape](Generator& g) {
                   return Tensors{positive ? uniform_f64(g, s, 0.1, 2.1) : normal_f64(g, s)};
                 },
                 [op = op, f = v.apply](const Tensors& in, Device) { return Tensors{unary(op, f(in[0]))}; },
                 {tols({1e-5, 1e-6}, {1e-12, 1e-14})})
              .with_reference([ref = ref, f = v.apply](const Tensors& in) { return Values{map(f(in[0]), ref)}; },
                              {tols(2e-6, 1e-13)}));
    }
  for (UnaryOp op : {UnaryOp::Relu, UnaryOp::Exp, UnaryOp::Abs, UnaryOp::Tanh})
    cases.push_back(OpCase(std::string(op_name(op)) + " with NaN (257)",
                           [](Generator& g) { return Tensors{normal_with_nan(g, {257})}; },
                           [op](const Tensors& in, Device) { return Tensors{unary(op, in[0])}; },
                           {tols({1e-5, 1e-6}, {1e-12, 1e-14})})
                        .with_dtypes({DType::f32}));
  return cases;
}

std::vector<OpCase> binary_cases() {
  struct Pair {
    Shape a, b;
    bool transpose_a;
  };
  const std::vector<Pair> pairs = {
      {{257}, {257}, false},       {{31, 1}, {1, 33}, false},  {{4, 1, 3}, {1, 5, 1}, false},
      {{}, {7, 5}, false},         {{1}, {257}, false},        {{2, 3, 4, 5}, {4, 1}, false},
      {{33, 31}, {33}, true},      {{0, 3}, {3}, false},       {{3, 1, 31}, {2, 1, 1, 1}, false},
      {{3, 4}, {3, 4}, false},     {{3, 4}, {4}, false},       {{2, 3, 4}, {3, 1}, false},
      {{1}, {5, 2}, false},        {{2, 3}, {}, false},        {{257}, {1}, false},
      {{2, 1, 1, 3}, {2, 3}, false},
  };
  const Tols device = tols({1e-6, 1e-7}, {1e-15, 1e-15});
  std::vector<OpCase> cases;
  for (const auto& [op, ref] : binary_refs())
    for (const Pair& p : pairs) {
      auto view_a = [t = p.transpose_a](const Tensor& a) { return t ? a.t() : a; };
      // b away from 0 (U[0.5, 1.5)): the f32 quotient stays within its relative tolerance.
      cases.push_back(
          OpCase(std::string(op_name(op)) + " " + shape_str(p.a) + (p.transpose_a ? ".t()" : "") + " and " +
                     shape_str(p.b),
                 [p](Generator& g) { return Tensors{normal_f64(g, p.a), uniform_f64(g, p.b, 0.5, 1.5)}; },
                 [op = op, view_a](const Tensors& in, Device) { return Tensors{binary(op, view_a(in[0]), in[1])}; },
                 {device})
              .with_reference(
                  [ref = ref, view_a](const Tensors& in) {
                    const Tensor a = view_a(in[0]), b = in[1];
                    const Shape out = broadcast_shapes(a.shape(), b.shape(), "reference");
                    const std::vector<double> av = values(a), bv = values(b);
                    std::vector<double> r(static_cast<size_t>(shape_numel(out)));
                    for (int64_t i = 0; i < shape_numel(out); ++i)
                      r[i] = ref(at_broadcast(a, av, out, i), at_broadcast(b, bv, out, i));
                    return Values{r};
                  },
                  {tols(1e-6, 1e-15)}));
    }
  for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Add})
    cases.push_back(OpCase(std::string(op_name(op)) + " with NaN (31, 1) and (1, 33)",
                           [](Generator& g) { return Tensors{normal_with_nan(g, {31, 1}), normal_with_nan(g, {1, 33})}; },
                           [op](const Tensors& in, Device) { return Tensors{binary(op, in[0], in[1])}; }, {device})
                        .with_dtypes({DType::f32}));
  return cases;
}

// The fused unary backward (dx = dy * f'(saved), saved = x or y as the list says), compare masks
// and where. Their CPU values against finite differences and references: tests/test_elementwise.cpp.
std::vector<OpCase> unary_backward_cases() {
  std::vector<OpCase> cases;
  for (UnaryOp op : kUnaryOps)
    for (const View& v : elementwise_views()) {
      const bool positive = unary_domain(op) == UnaryDomain::Positive;
      cases.push_back(OpCase(std::string(op_name(op)) + "_backward " + v.name,
                             [positive, s = v.shape](Generator& g) {
                               return Tensors{normal_f64(g, s), positive ? uniform_f64(g, s, 0.1, 2.1) : normal_f64(g, s)};
                             },
                             [op, f = v.apply](const Tensors& in, Device) {
                               const Tensor x = f(in[1]);
                               const Tensor saved = unary_saves(op) == UnarySaves::Output ? unary(op, x) : x;
                               return Tensors{unary_backward(op, f(in[0]), saved)};
                             },
                             {tols({1e-5, 1e-6}, {1e-12, 1e-14})}));
    }
  return cases;
}

std::vector<OpCase> compare_where_cases() {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{257}, {257}}, {{31, 1}, {1, 33}}, {{2, 3, 4}, {3, 1}}, {{0, 3}, {3}}};
  const Tols exact = tols(0, 0);
  std::vector<OpCase> cases;
  for (CompareOp op : kCompareOps) {
    for (const auto& [a, b] : shapes)
      cases.push_back(OpCase(std::string(op_name(op)) + " " + shape_str(a) + " and " + shape_str(b),
                             [a = a, b = b](Generator& g) { return Tensors{normal_f64(g, a), normal_f64(g, b)}; },
                             [op](const Tensors& in, Device) { return Tensors{kernels::compare(op, in[0], in[1])}; },
                             {exact}));
    cases.push_back(OpCase(std::string(op_name(op)) + " with NaN (257), scalar 0 and itself",
                           [](Generator& g) { return Tensors{normal_with_nan(g, {257})}; },
                           [op](const Tensors& in, Device) {
                             return Tensors{kernels::compare(op, in[0], 0.0), kernels::compare(op, in[0], in[0])};
                           },
                           {exact})
                        .with_dtypes({DType::f32}));
  }
  for (const auto& [a, b] : shapes)
    cases.push_back(OpCase("where (cond " + shape_str(a) + ", a " + shape_str(b) + ", b " + shape_str(a) + ")",
                           [a = a, b = b](Generator& g) {
                             return Tensors{normal_f64(g, a), normal_f64(g, b), normal_f64(g, a)};
                           },
                           [](const Tensors& in, Device) {
                             const Tensor mask = kernels::compare(CompareOp::Gt, in[0], 0.0);
                             return Tensors{where(mask, in[1], in[2]), where(in[0], in[1], in[2])};
                           },
                           {exact}));
  return cases;
}

std::vector<OpCase> scalar_cases() {
  std::vector<OpCase> cases;
  for (const auto& [op, ref] : binary_refs())
    for (bool left : {false, true})
      for (const View& v : elementwise_views())
        cases.push_back(
            OpCase(std::string(left ? "0.75 " : "x ") + op_name(op) + (left ? " x " : " 0.75 ") + v.name,
                   [s = v.shape](Generator& g) { return Tensors{normal_f64(g, s)}; },
                   [op = op, left, f = v.apply](const Tensors& in, Device) {
                     return Tensors{left ? binary(op, 0.75, f(in[0])) : binary(op, f(in[0]), 0.75)};
                   },
                   {tols({1e-6, 1e-7}, {1e-15, 1e-15})})
                .with_reference(
                    [ref = ref, left, f = v.apply](const Tensors& in) {
                      return Values{map(f(in[0]), [&](double x) { return left ? ref(0.75, x) : ref(x, 0.75); })};
                    },
                    {tols({1e-6, 1e-7}, {1e-15, 1e-15})}));
  return cases;
}

// ==== matmul =======================================================================================

// 2-D a (M, K) @ b (K, N), given as contiguous values.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K,
                               int64_t N) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}

// numpy.matmul of a and b (transposed by the flags first): batch dims broadcast, 1-D operands as
// a row / a column; each (M, K) @ (K, N) of the broadcast batch by matmul_ref.
std::vector<double> batched_matmul_ref(Tensor a, Tensor b, bool ta, bool tb) {
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (b.dim() == 1) b = b.unsqueeze(1);
  if (ta) a = a.transpose(-2, -1);
  if (tb) b = b.transpose(-2, -1);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2), "reference");
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  const std::vector<double> av = values(a.expand(sa)), bv = values(b.expand(sb));  // row-major copies
  std::vector<double> out;
  for (int64_t i = 0; i < shape_numel(batch); ++i) {
    const std::vector<double> c = matmul_ref(std::vector<double>(av.begin() + i * M * K, av.begin() + (i + 1) * M * K),
                                             std::vector<double>(bv.begin() + i * K * N, bv.begin() + (i + 1) * K * N),
                                             M, K, N);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

// The entry point's shape logic (kernels/matmul.cpp) in front of the tiled kernel, on cuda; the
// plain matmul elsewhere (the cpu run the tiled kernel is compared with).
Tensor tiled_matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb) {
#if defined(REEL_HAS_CUDA_BACKEND)
  if (a_in.device().is_cuda()) {
    Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
    Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
    if (ta) a = a.transpose(-2, -1);
    if (tb) b = b.transpose(-2, -1);
    const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
    Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                   Shape(b.shape().begin(), b.shape().end() - 2), "tiled_matmul");
    Shape sa = batch, sb = batch, so = batch;
    sa.insert(sa.end(), {M, K});
    sb.insert(sb.end(), {K, N});
    so.insert(so.end(), {M, N});
    Tensor out = empty(so, a.dtype(), a.device());
    kernels::cuda::matmul_tiled(a.expand(sa), b.expand(sb), out);
    if (a_in.dim() == 1) out = out.squeeze(-2);
    if (b_in.dim() == 1) out = out.squeeze(-1);
    return out;
  }
#endif
  return matmul(a_in, b_in, ta, tb);
}

std::vector<OpCase> matmul_cases() {
  struct Config {
    const char* name;
    Shape a, b;
    std::function<Tensor(const Tensor&)> view_a, view_b;
    bool ta, tb;  // the transpose flags of matmul
  };
  const auto t = [](const Tensor& x) { return x.transpose(-2, -1); };
  const std::vector<Config> configs = {
      {"(37, 53) @ (53, 41)", {37, 53}, {53, 41}, same, same, false, false},
      {"(53, 37).t() @ (53, 41)", {53, 37}, {53, 41}, t, same, false, false},
      {"(37, 53) @ (41, 53).t()", {37, 53}, {41, 53}, same, t, false, false},
      {"flags: (53, 37)^T @ (41, 53)^T", {53, 37}, {41, 53}, same, same, true, true},
      {"(53) @ (53, 41)", {53}, {53, 41}, same, same, false, false},
      {"(37, 53) @ (53)", {37, 53}, {53}, same, same, false, false},
      {"(53) @ (53)", {53}, {53}, same, same, false, false},
      {"(1, 64) @ (64, 1)", {1, 64}, {64, 1}, same, same, false, false},
      {"(31, 1) @ (1, 29)", {31, 1}, {1, 29}, same, same, false, false},
      {"(3, 0) @ (0, 4)", {3, 0}, {0, 4}, same, same, false, false},
      {"batched (3, 17, 19) @ (3, 19, 23)", {3, 17, 19}, {3, 19, 23}, same, same, false, false},
      {"batched, b^T flag (3, 17, 19) @ (3, 23, 19)^T", {3, 17, 19}, {3, 23, 19}, same, same, false, true},
      {"broadcast batch (2, 1, 5, 7) @ (3, 7, 4)", {2, 1, 5, 7}, {3, 7, 4}, same, same, false, false},
      {"shared weight (17, 19) @ (3, 19, 23)", {17, 19}, {3, 19, 23}, same, same, false, false},
      {"uncollapsible batch (2, 1, 5, 7) @ (2, 3, 7, 4)", {2, 1, 5, 7}, {2, 3, 7, 4}, same, same, false, false},
      {"permuted batch (5, 3, 7).permute(1, 0, 2) @ (3, 7, 6)", {5, 3, 7}, {3, 7, 6},
       [](const Tensor& x) { return x.permute({1, 0, 2}); }, same, false, false},
      {"strided operand (37, 106)[:, ::2] @ (53, 41)", {37, 106}, {53, 41},
       [](const Tensor& x) { return x.slice(1, 0, 106, 2); }, same, false, false},
      {"(129, 257) @ (257, 65)", {129, 257}, {257, 65}, same, same, false, false},
      {"broadcast batch (2, 1, 5, 3) @ (4, 3, 6)", {2, 1, 5, 3}, {4, 3, 6}, same, same, false, false},
      {"attention-shaped q k^T (2, 3, 7, 4) @ (2, 3, 7, 4)^T", {2, 3, 7, 4}, {2, 3, 7, 4}, same, same, false, true},
  };
  const Tols tol = tols(1e-4, 1e-11);
  std::vector<OpCase> cases;
  for (bool tiled : {false, true})
    for (const Config& m : configs)
      cases.push_back(OpCase(std::string(tiled ? "tiled SGEMM on cuda: " : "matmul ") + m.name,
                             [m](Generator& g) { return Tensors{normal_f64(g, m.a), normal_f64(g, m.b)}; },
                             [m, tiled](const Tensors& in, Device) {
                               const Tensor a = m.view_a(in[0]), b = m.view_b(in[1]);
                               return Tensors{tiled ? tiled_matmul(a, b, m.ta, m.tb) : matmul(a, b, m.ta, m.tb)};
                             },
                             {tol})
                          .with_reference(
                              [m](const Tensors& in) {
                                return Values{batched_matmul_ref(m.view_a(in[0]), m.view_b(in[1]), m.ta, m.tb)};
                              },
                              {tols(1e-4, 1e-12)}));
  // 2-D products against the f64 loop, on sizes that the CPU cuts into blocks of rows (M >= N) or
  // of columns per thread (kernels/cpu/matmul.cpp), odd so the blocks are uneven; each through
  // transposed storage (flags and views) and a sliced (non-unit outer stride) operand.
  struct Layout {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> f;
  };
  const std::vector<Layout> layouts = {
      {"", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }},
      {"a^T flag ", [](const Tensor& a, const Tensor& b) { return matmul(a.t().contiguous(), b, true, false); }},
      {"b^T flag ", [](const Tensor& a, const Tensor& b) { return matmul(a, b.t().contiguous(), false, true); }},
      {"transposed views ", [](const Tensor& a, const Tensor& b) {
         return matmul(a.t().contiguous().t(), b.t().contiguous().t());
       }},
      {"sliced a ", [](const Tensor& a, const Tensor& b) {
         Tensor wide = zeros({a.size(0), a.size(1) + 3}, a.dtype(), a.device());
         wide.narrow(1, 1, a.size(1)).copy_(a);
         return matmul(wide.narrow(1, 1, a.size(1)), b);
       }},
  };
  for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {4, 3, 2}, {31, 17, 33}, {64, 257, 5},
                                                           {128, 128, 128}, {201, 161, 151}, {97, 131, 333},
                                                           {3, 2001, 701}})
    for (const Layout& l : layouts) {
      // An f32 dot product of K N(0, 1) pairs rounds each addition by eps of a partial sum that
      // grows like sqrt(k): an absolute error of about eps K / sqrt(2), 8e-5 at K = 2001, which
      // a relative tolerance cannot absorb where the sum cancels to near 0. Summed in one chain
      // per output (oneDNN's brgemm), one element of (3, 2001) @ (2001, 701) was 1.35e-4 off.
      const double f32_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(K));
      cases.push_back(
          OpCase("matmul " + std::string(l.name) + shape_str({M, K}) + " @ " + shape_str({K, N}),
                 [M = M, K = K, N = N](Generator& g) { return Tensors{normal_f64(g, {M, K}), normal_f64(g, {K, N})}; },
                 [f = l.f](const Tensors& in, Device) { return Tensors{f(in[0], in[1])}; },
                 {tols(Tol{1e-4, f32_atol}, tol.f64)})
              .with_reference(
                  [M = M, K = K, N = N](const Tensors& in) {
                    return Values{matmul_ref(values(in[0]), values(in[1]), M, K, N)};
                  },
                  {tols(Tol{1e-4, f32_atol}, Tol{1e-12, 1e-12})}));
    }
  return cases;
}

// ==== reductions ===================================================================================

std::vector<OpCase> reduce_cases() {
  struct Red {
    Shape shape;
    std::vector<int64_t> axes;
    bool transpose;  // reduce x.t() (a strided input)
    bool nan;
  };
  const std::vector<Red> reds = {
      {{1}, {}, false, false},           {{257}, {}, false, false},
      {{257}, {0}, false, false},        {{31, 33}, {0}, false, false},
      {{31, 33}, {1}, false, false},     {{31, 33}, {}, false, false},
      {{4, 5, 6}, {0}, false, false},    {{4, 5, 6}, {1}, false, false},
      {{4, 5, 6}, {2}, false, false},    {{4, 5, 6}, {0, 2}, false, false},
      {{4, 5, 6}, {1, 2}, false, false}, {{33, 31}, {0}, true, false},
      {{33, 31}, {1}, true, false},      {{3, 1100}, {1}, false, false},   // block per row
      {{3, 4099}, {-1}, false, false},   {{100, 300}, {}, false, false},   // split rows
      {{2000, 3}, {0}, false, false},    {{5000, 7}, {0}, false, false},   // columns, split
      {{2, 3, 1, 5}, {2}, false, false}, {{31, 33}, {1}, false, true},
      {{3, 1100}, {1}, false, true},     {{700, 5}, {0}, false, true},
      {{1000, 77}, {0}, false, false},   {{1000, 77}, {1}, false, false},  // long f32 sums
  };
  std::vector<OpCase> cases;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max})
    for (const Red& r : reds)
      for (bool keepdim : {false, true}) {
        std::string axes = "axes (";
        for (int64_t a : r.axes) axes += std::to_string(a) + " ";
        // Max is exact. Sums round differently (a float tree on the GPU, double on the CPU):
        // allow for an error growing like sqrt(R), R the elements reduced into one output.
        const Shape in_shape = r.transpose ? Shape(r.shape.rbegin(), r.shape.rend()) : r.shape;  // 2-D
        const int64_t rank = static_cast<int64_t>(in_shape.size());
        int64_t R = 1;
        for (int64_t d = 0; d < rank; ++d) {
          bool reduced = r.axes.empty();
          for (int64_t a : r.axes) reduced |= (a < 0 ? a + rank : a) == d;
          if (reduced) R *= in_shape[d];
        }
        const double f32 = op == ReduceOp::Max ? 0 : 1e-5, f64 = op == ReduceOp::Max ? 0 : 1e-12;
        const double sq = std::sqrt(static_cast<double>(R));
        cases.push_back(OpCase(std::string(op_name(op)) + " " + shape_str(r.shape) + (r.transpose ? ".t() " : " ") +
                                   axes + ")" + (keepdim ? " keepdim" : "") + (r.nan ? " with NaN" : ""),
                               [r](Generator& g) { return Tensors{r.nan ? normal_with_nan(g, r.shape) : normal_f64(g, r.shape)}; },
                               [op, r, keepdim](const Tensors& in, Device) {
                                 return Tensors{reduce(op, r.transpose ? in[0].t() : in[0], r.axes, keepdim)};
                               },
                               {tols({f32, f32 * sq}, {f64, f64 * sq})})
                            .with_precision({tols(f32, f64)}));
      }
  return cases;
}

// ==== fills, copies, casts, random numbers, dropout masks =========================================

std::vector<OpCase> fill_copy_cast_cases() {
  const std::vector<DType> all = {DType::f32, DType::f64, DType::i32, DType::i64};
  std::vector<OpCase> cases;
  auto none = [](Generator&) { return Tensors{}; };
  auto normal_x100 = [](const Shape& s) {  // N(0, 1), times 100 for integer dtypes (then truncated)
    return [s](Generator& g) { return Tensors{normal_f64(g, s)}; };
  };
  for (DType dt : all) {
    for (const Shape& s : std::vector<Shape>{{1}, {257}, {31, 33}, {}})
      cases.push_back(OpCase(std::string("full ") + shape_str(s) + " " + dtype_name(dt), none,
                             [s, dt](const Tensors&, Device d) { return Tensors{full(s, -3.25, dt, d)}; }, {kExact})
                          .with_dtypes({}));
    auto as = [dt](const Tensor& x) { return is_floating(dt) ? x.to(dt) : binary(BinaryOp::Mul, x, 100.0).to(dt); };
    cases.push_back(OpCase(std::string("fill_ of (9, 31).t()[::2] ") + dtype_name(dt), normal_x100({9, 31}),
                           [as](const Tensors& in, Device d) {
                             Tensor x = as(in[0]).to(d).clone();
                             x.t().slice(0, 0, 31, 2).fill_(7.0);
                             return Tensors{x};
                           },
                           {kExact})
                        .with_dtypes({}));
    struct Copy {
      const char* name;
      Shape shape;
      std::function<Tensor(const Tensor&)> run;
    };
    const std::vector<Copy> copies = {
        {"(4, 5, 6).permute(2, 0, 1).contiguous()", {4, 5, 6}, [](const Tensor& x) { return x.permute({2, 0, 1}).contiguous(); }},
        {"(33, 31).t().contiguous()", {33, 31}, [](const Tensor& x) { return x.t().contiguous(); }},
        {"(257)[3::5].contiguous()", {257}, [](const Tensor& x) { return x.slice(0, 3, 257, 5).contiguous(); }},
        {"(1, 31).expand(7, 31).contiguous()", {1, 31}, [](const Tensor& x) { return x.expand({7, 31}).contiguous(); }},
        {"(6, 7, 8).select(1, 3).contiguous()", {6, 7, 8}, [](const Tensor& x) { return x.select(1, 3).contiguous(); }},
        {"9-d (2, ..., 2) reversed permute .contiguous()", Shape(9, 2),
         [](const Tensor& x) { return x.permute({8, 7, 6, 5, 4, 3, 2, 1, 0}).contiguous(); }},
        {"10-d (3, 2, ..., 2) odd permute .contiguous()", {3, 2, 2, 2, 2, 2, 2, 2, 2, 2},
         [](const Tensor& x) { return x.permute({9, 0, 8, 1, 7, 2, 6, 3, 5, 4}).contiguous(); }},
        {"copy_ into (31, 33).t()", {33, 31},
         [](const Tensor& x) {
           Tensor y = zeros({31, 33}, x.dtype(), x.device());
           y.t().copy_(x);
           return y;
         }},
        {"copy_ from the cpu into a device view", {5, 31},
         [](const Tensor& x) {
           Tensor y = zeros({31, 10}, x.dtype(), x.device());
           y.slice(1, 0, 10, 2).t().copy_(x.to(Device::cpu()));
           return y;
         }},
    };
    for (const Copy& c : copies)
      cases.push_back(OpCase(std::string(c.name) + " " + dtype_name(dt), normal_x100(c.shape),
                             [as, f = c.run](const Tensors& in, Device d) { return Tensors{f(as(in[0]).to(d))}; },
                             {kExact})
                          .with_dtypes({}));
  }
  // Casts, all 16 pairs; fractional values: float -> int truncates toward zero on every device.
  for (DType from : all)
    for (DType to : all)
      for (bool strided : {false, true})
        cases.push_back(
            OpCase(std::string(dtype_name(from)) + " -> " + dtype_name(to) + (strided ? " of (33, 31).t()" : " of (257)"),
                   normal_x100(strided ? Shape{33, 31} : Shape{257}),
                   [from, to, strided](const Tensors& in, Device d) {
                     const Tensor x = binary(BinaryOp::Mul, in[0], is_floating(from) ? 7.3 : 100.0).to(from).to(d);
                     return Tensors{(strided ? x.t() : x).to(to)};
                   },
                   {kExact})
                .with_dtypes({}));
  // rand and randn: the same Philox streams on every device; uniform bit for bit, normal to rounding.
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& s : std::vector<Shape>{{1}, {3}, {5}, {257}, {31, 33}}) {
      cases.push_back(OpCase(std::string("rand ") + shape_str(s) + " " + dtype_name(dt), none,
                             [s, dt](const Tensors&, Device d) {
                               Generator g(42);
                               g.next_offset();  // a stream id other than 0
                               return Tensors{rand(s, dt, d, &g)};
                             },
                             {kExact})
                          .with_dtypes({}));
      cases.push_back(OpCase(std::string("randn ") + shape_str(s) + " " + dtype_name(dt), none,
                             [s, dt](const Tensors&, Device d) {
                               Generator g(43);
                               return Tensors{randn(s, dt, d, &g)};
                             },
                             {tols(1e-6, 1e-13)})
                          .with_dtypes({}));
    }
  return cases;
}

// Dropout masks: the Philox formula keep = philox_uniform(seed, offset, i) >= p, bit for bit on
// every device.
std::vector<OpCase> dropout_cases() {
  std::vector<OpCase> cases;
  for (double p : {0.0, 0.1, 0.5, 1.0})
    for (const Shape& s : std::vector<Shape>{{1}, {257}, {31, 33}})
      for (DType dt : {DType::f32, DType::f64})
        cases.push_back(
            OpCase("dropout_mask p=" + str(p) + " " + shape_str(s) + " " + dtype_name(dt),
                   [](Generator&) { return Tensors{}; },
                   [s, dt, p](const Tensors&, Device d) { return Tensors{dropout_mask(s, dt, d, p, 1234, 7)}; }, {kExact})
                .with_dtypes({})
                .with_reference(
                    [s, p](const Tensors&) {
                      std::vector<double> m(static_cast<size_t>(shape_numel(s)));
                      for (size_t i = 0; i < m.size(); ++i)
                        m[i] = p < 1 && static_cast<double>(philox_uniform(1234, 7, i)) >= p ? 1 / (1 - p) : 0;
                      return Values{m};
                    },
                    {tols(1e-7, 0)}));
  return cases;
}

// ==== LayerNorm / RMSNorm ==========================================================================

// outputs y, mean, rstd (rms: mean 0) of rows of C, in f64.
Values norm_ref(const Tensor& xt, const Tensor& wt, const Tensor* bt, double eps) {
  const std::vector<double> x = values(xt), w = values(wt), b = bt ? values(*bt) : std::vector<double>{};
  const int64_t C = xt.size(-1), R = xt.numel() / C;
  Values r{std::vector<double>(x.size()), {}, {}};
  for (int64_t i = 0; i < R; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m = bt ? m / C : 0;
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    const double rs = 1 / std::sqrt(v / C + eps);
    for (int64_t c = 0; c < C; ++c) r[0][i * C + c] = (x[i * C + c] - m) * rs * w[c] + (bt ? b[c] : 0);
    r[1].push_back(m);
    r[2].push_back(rs);
  }
  if (!bt) r.erase(r.begin() + 1);  // rms: y, rstd
  return r;
}

std::vector<OpCase> norm_cases() {
  struct Config {
    Shape shape;
    bool transpose;  // the op sees x.t() (a strided input, made contiguous by the entry point)
    bool fd;         // small enough for finite differences (RMSNorm: not of C = 1, whose gradient is ~eps)
    double offset = 0;  // added to x: a row mean far from 0
  };
  const std::vector<Config> configs = {
      {{1, 1}, false, true},      {{1, 257}, false, false}, {{5, 1}, false, false},  {{3, 31}, false, false},
      {{2, 3, 33}, false, false}, {{7, 257}, false, false}, {{257}, false, false},   {{1100, 7}, false, false},
      {{3, 4, 257}, false, false}, {{7, 33}, false, false}, {{64, 768}, false, false}, {{3, 5}, false, true},
      {{4, 1}, false, true},      {{2, 257}, false, true},  {{2, 3, 7}, false, true}, {{5, 33}, true, false},
      {{6, 5}, true, false},
      // Mean 1000, std 0.58: E[x^2] - E[x]^2 would lose every digit in f32 (the two-pass variance).
      {{16, 768}, false, false, 1000},
  };
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    const Shape s = c.transpose ? Shape{c.shape[1], c.shape[0]} : c.shape;  // what the op sees
    const int64_t C = s.back(), R = shape_numel(s) / C;
    // dw, db: sums over R rows.
    const Tols tr = tols(1e-5 * std::sqrt(static_cast<double>(R)) + 1e-5), t = tols(2e-5), tdx = tols(1e-4);
    auto make = [c, C](bool bias) {
      return [c, C, bias](Generator& g) {
        Tensors in{uniform_f64(g, c.shape, c.offset - 2, c.offset + 3), uniform_f64(g, {C}, 0.5, 1.5)};  // mean not 0
        if (bias) in.push_back(uniform_f64(g, {C}));
        Shape seen = c.shape;
        if (c.transpose) std::swap(seen[0], seen[1]);
        in.push_back(uniform_f64(g, seen));  // dy
        return in;
      };
    };
    auto x_of = [tr = c.transpose](const Tensor& x) { return tr ? x.t() : x; };
    const std::string name = shape_str(c.shape) + (c.transpose ? ".t()" : "") + (c.offset ? " + " + str(c.offset) : "");
    const Tols pt = tols(c.offset ? 1e-4 : 2e-5, 1e-12);  // f32 x near 1000: its ulps
    OpCase ln("layernorm " + name, make(true),
              [x_of](const Tensors& in, Device) {
                const Tensor x = x_of(in[0]);
                const LayerNormForward f = layernorm_forward(x, in[1], in[2]);
                CHECK(f.y.shape() == x.shape());
                CHECK(f.mean.shape() == without_last(x.shape()));
                const LayerNormBackward b = layernorm_backward(in[3], x, in[1], f.mean, f.rstd);
                return Tensors{f.y, f.mean, f.rstd, b.dx, b.dw, b.db};
              },
              {t, t, t, tdx, tr, tr});
    ln.with_reference([x_of](const Tensors& in) { return norm_ref(x_of(in[0]), in[1], &in[2], 1e-5); }, {pt});
    OpCase rms("rmsnorm " + name, make(false),
               [x_of](const Tensors& in, Device) {
                 const Tensor x = x_of(in[0]);
                 const RMSNormForward f = rmsnorm_forward(x, in[1]);
                 const RMSNormBackward b = rmsnorm_backward(in[2], x, in[1], f.rstd);
                 return Tensors{f.y, f.rstd, b.dx, b.dw};
               },
               {t, t, tdx, tr});
    rms.with_reference([x_of](const Tensors& in) { return norm_ref(x_of(in[0]), in[1], nullptr, 1e-6); }, {pt});
    if (c.fd) {
      ln.with_finite_diff({0, 3, {{0, 3}, {1, 4}, {2, 5}}});
      if (C > 1 || R == 1) rms.with_finite_diff({0, 2, {{0, 2}, {1, 3}}});
    }
    cases.push_back(ln);
    cases.push_back(rms);
  }
  return cases;
}

// ==== softmax / log-softmax / max ==================================================================

Values softmax_ref(const Tensor& xt) {
  const std::vector<double> x = values(xt);
  const size_t C = static_cast<size_t>(xt.size(-1));
  Values y(2, std::vector<double>(x.size()));
  for (size_t r = 0; r < x.size() / C; ++r) {
    const double* xr = &x[r * C];
    double m = -INFINITY, s = 0;
    for (size_t c = 0; c < C; ++c) m = std::max(m, xr[c]);
    for (size_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
    for (size_t c = 0; c < C; ++c) {
      y[0][r * C + c] = std::exp(xr[c] - m) / s;
      y[1][r * C + c] = xr[c] - m - std::log(s);
    }
  }
  return y;
}

std::vector<OpCase> softmax_cases() {
  enum Kind { Uniform, Masked, Huge };
  struct Config {
    Shape shape;
    double lo, hi;
    bool fd;
    Kind kind = Uniform;
  };
  std::vector<Config> configs;
  for (const Shape& s : std::vector<Shape>{{1, 1}, {1, 257}, {31, 1}, {3, 31}, {2, 3, 33}, {5, 257}, {4, 1013}, {257}})
    for (double offset : {0.0, 1000.0}) configs.push_back({s, offset - 8, offset + 8, false});  // exp(1000) overflows
  for (const Shape& s : std::vector<Shape>{{1, 7}, {3, 257}, {2, 3, 7}, {64, 768}, {5}})
    configs.push_back({s, -5, 5, false});
  for (const Shape& s : std::vector<Shape>{{1, 1}, {3, 5}, {2, 257}, {2, 2, 7}}) configs.push_back({s, -3, 3, true});
  // Masked (-inf) entries in rows below, at and above a SIMD packet, and with a scalar tail:
  // softmax exactly 0, log_softmax -inf (tests/test_nn_kernels_softmax.cpp checks the bits).
  for (int64_t C : {3, 8, 16, 33, 257}) configs.push_back({{2, C}, -5, 5, false, Masked});
  configs.push_back({{2, 3}, 0, 0, false, Huge});  // logits of 1e4 and 3e4
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    // f32 x - lse near 1000 loses the ulps of 1000; near 3e4, those of 3e4.
    const double at = c.kind == Huge ? 4e-3 : c.hi > 100 ? 1e-4 : 1e-5;
    const Tols y = tols({1e-5, 1e-6}, {1e-12, 1e-12}), ly = tols({1e-5, at}, {1e-12, 1e-12});
    const std::string kind = c.kind == Masked ? " masked" : c.kind == Huge ? " of 1e4" : "";
    OpCase row("softmax and log_softmax " + shape_str(c.shape) + kind + " in [" + str(c.lo) + ", " + str(c.hi) + ")",
               [c](Generator& g) {
                 std::vector<double> x = values(uniform_f64(g, c.shape, c.lo, c.hi));
                 const size_t C = static_cast<size_t>(c.shape.back());
                 for (size_t i = 0; i < x.size() && c.kind == Masked; ++i)
                   if (i % 3 == 1 || (i >= C && i % C > 1)) x[i] = -INFINITY;
                 if (c.kind == Huge) x = {1e4, -1e4, 9999, 3e4, 3e4, -3e4};
                 return Tensors{from_vector<double>(x, c.shape), uniform_f64(g, c.shape)};
               },
               [](const Tensors& in, Device) {
                 const Tensor y = softmax_forward(in[0]), ly = log_softmax_forward(in[0]);
                 return Tensors{y, ly, softmax_backward(in[1], y), log_softmax_backward(in[1], ly)};
               },
               {y, ly, y, ly});
    if (c.kind == Huge)
      row.with_dtypes({DType::f32}).with_reference([](const Tensors& in) { return softmax_ref(in[0]); },
                                                   {tols({1e-6, 1e-7}, {1e-12, 1e-12}), tols({1e-6, 1e-3}, {1e-12, 1e-12})});
    else
      row.with_reference([](const Tensors& in) { return softmax_ref(in[0]); }, {tols(1e-5), ly});
    if (c.fd) row.with_finite_diff({0, 1, {{0, 2}}}).with_finite_diff({1, 1, {{0, 3}}});
    cases.push_back(row);
  }
  return cases;
}

// The max along `axis` and its first index; a NaN is the maximum (the first NaN wins).
Values max_ref(const Tensor& xt, int64_t axis) {
  const std::vector<double> x = values(xt);
  const Shape& s = xt.shape();
  if (axis < 0) axis += static_cast<int64_t>(s.size());
  int64_t O = 1, I = 1;
  for (int64_t d = 0; d < axis; ++d) O *= s[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) I *= s[d];
  const int64_t A = s[axis];
  Values r(2);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      int64_t best = 0;
      for (int64_t a = 1; a < A; ++a) {
        const double v = x[(o * A + a) * I + i], b = x[(o * A + best) * I + i];
        if (!std::isnan(b) && (std::isnan(v) || v > b)) best = a;
      }
      r[0].push_back(x[(o * A + best) * I + i]);
      r[1].push_back(static_cast<double>(best));
    }
  return r;
}

std::vector<OpCase> max_cases() {
  struct Config {
    Shape shape;
    int64_t axis;
  };
  const std::vector<Config> configs = {{{257}, 0},      {{7, 33}, 1}, {{7, 33}, 0},    {{3, 5, 4}, 1},
                                       {{3, 5, 4}, -1}, {{1, 1}, 1},  {{2, 70, 3}, 1}, {{40, 1}, 0},
                                       {{3, 4, 5}, -3}, {{3, 4, 5}, -2}, {{3, 4, 5}, -1}, {{2, 3, 4}, 0}, {{2, 3, 4}, 1},
                                       {{2, 3, 4}, 2}};
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (int kind = 0; kind < 3; ++kind)  // 0: distinct values, 1: many ties, 2: ties and NaN
      for (bool keepdim : {false, true}) {
        Shape vs = c.shape;
        const size_t a = static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(vs.size()) : c.axis);
        if (keepdim) vs[a] = 1;
        else vs.erase(vs.begin() + static_cast<int64_t>(a));
        OpCase row("max_with_indices " + shape_str(c.shape) + " axis " + std::to_string(c.axis) +
                       (keepdim ? " keepdim" : "") + (kind == 0 ? "" : kind == 1 ? " ties" : " ties and NaN"),
                   [c, kind, vs](Generator& g) {
                     std::vector<double> v = values(uniform_f64(g, c.shape, -3, 3));
                     for (size_t i = 0; i < v.size(); ++i) {
                       if (kind >= 1) v[i] = std::floor(v[i]);  // 6 distinct values: the first maximum must win
                       if (kind == 2 && i % 5 == 2) v[i] = std::nan("");
                     }
                     return Tensors{from_vector<double>(v, c.shape), uniform_f64(g, vs)};
                   },
                   [c, keepdim](const Tensors& in, Device) {
                     const MaxWithIndices m = max_with_indices(in[0], c.axis, keepdim);
                     CHECK(m.indices.dtype() == DType::i64);
                     CHECK(m.values.shape() == in[1].shape());  // dy was made with the expected shape
                     return Tensors{m.values, m.indices, max_backward(in[1], m.indices, c.shape, c.axis)};
                   },
                   {kExact});
        row.with_reference([c](const Tensors& in) { return max_ref(in[0], c.axis); }, {kExact});
        if (kind == 0 && shape_numel(c.shape) <= 60) row.with_finite_diff({0, 1, {{0, 2}}});  // no ties within h
        cases.push_back(row);
      }
  return cases;
}

// ==== cross-entropy ================================================================================

// The reduced loss, the per-row losses, lse and the count of rows not ignored, of logits (N, V) with
// targets, in f64.
Values ce_ref(const Tensor& logits, const Tensor& targets, int64_t ignore, Reduction red) {
  const std::vector<double> x = values(logits), t = values(targets);
  const size_t V = static_cast<size_t>(logits.size(-1));
  std::vector<double> losses, lse;
  double sum = 0, count = 0;
  for (size_t n = 0; n < t.size(); ++n) {
    double m = -INFINITY, s = 0;
    for (size_t c = 0; c < V; ++c) m = std::max(m, x[n * V + c]);
    for (size_t c = 0; c < V; ++c) s += std::exp(x[n * V + c] - m);
    lse.push_back(m + std::log(s));
    const bool ignored = static_cast<int64_t>(t[n]) == ignore;
    losses.push_back(ignored ? 0.0 : lse.back() - x[n * V + static_cast<size_t>(t[n])]);
    sum += losses.back();
    count += ignored ? 0 : 1;
  }
  const std::vector<double> loss = red == Reduction::None ? losses
                                   : red == Reduction::Sum ? std::vector<double>{sum}
                                                           : std::vector<double>{count ? sum / count : 0};
  return {loss, losses, lse, {count}};
}

std::vector<OpCase> cross_entropy_cases() {
  enum Kind { Uniform, Ramp, Huge, Masked };
  struct Config {
    Shape shape;
    bool fd;
    Kind kind = Uniform;
    std::vector<int64_t> targets = {};  // else every third row ignored, the others spread over the classes
    double tol = 1e-5;                  // of the losses and lse, on the cpu and every device
  };
  const std::vector<Config> configs = {
      {{1, 1}, false}, {{4, 10}, false}, {{3, 257}, false}, {{2, 3, 11}, false}, {{5, 1013}, false}, {{33, 7}, false},
      {{5, 7}, true},
      {{5, 5000}, false, Ramp},                 // each 2048-wide block raises the running max (online rescaling)
      {{3, 4}, false, Huge, {1, 2, 0}, 1e-6},   // logits of 1e4: finite, exact losses
      {{2, 5000}, false, Masked, {4000, 1}},    // classes masked with -inf, a whole first block of them
  };
  const double g = 0.37;  // the fused grad_scale (a loss scale of an accumulation window) and dloss of Mean/Sum
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (DType tt : {DType::i32, DType::i64})
      for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
        const int64_t V = c.shape.back(), N = shape_numel(c.shape) / V;
        const int64_t ignore = V == 11 ? 5 : -100;  // a custom ignore_index that is a valid class
        std::vector<int64_t> t = c.targets;
        for (int64_t n = 0; t.size() < static_cast<size_t>(N); ++n) t.push_back(N > 1 && n % 3 == 1 ? ignore : (n * 7 + 3) % V);
        const Tols tl = tols(c.tol), td = tols(std::min(c.tol, 2e-6));
        OpCase row("cross_entropy " + shape_str(c.shape) + " " + dtype_name(tt) + " targets, " + reduction_name(red),
                   [c, t, tt, red, N, g](Generator& gen) {
                     std::vector<double> v = values(uniform_f64(gen, c.shape, -6, 6));
                     const size_t V = static_cast<size_t>(c.shape.back());
                     for (size_t i = 0; i < v.size(); ++i) {
                       if (c.kind == Ramp) v[i] += 0.01 * static_cast<double>(i % V);
                       if (c.kind == Masked && (i < 3000 || (i >= V && i % 2 == 0))) v[i] = -INFINITY;
                     }
                     if (c.kind == Huge) v = {1e4, -1e4, 1e4 - 1, 0, -1e4, 2e4, 2e4, -2e4, 5, 5, 5, 1e4};
                     const Tensor logits = from_vector<double>(v, c.shape);
                     const Tensor dloss = red == Reduction::None ? uniform_f64(gen, {N}).view(without_last(c.shape))
                                                                 : scalar_tensor(g, DType::f64);
                     return Tensors{logits, indices(t, without_last(c.shape), tt), dloss};
                   },
                   [red, ignore, g](const Tensors& in, Device d) {
                     const CrossEntropyForward f = cross_entropy_forward(in[0], in[1], red, ignore, g);
                     CHECK(f.loss.shape() == (red == Reduction::None ? in[1].shape() : Shape{}));
                     const CrossEntropyForward plain = cross_entropy_forward(in[0], in[1], red, ignore);
                     CHECK(!plain.dlogits.defined());
                     CHECK(plain.count == f.count);
                     return Tensors{f.loss, f.losses, f.lse, scalar_tensor(static_cast<double>(f.count), DType::i64, d),
                                    f.dlogits, plain.loss, cross_entropy_backward(in[2], in[0], in[1], f.lse, red, ignore)};
                   },
                   {tl, tl, tl, kExact, td, tl, td});
        row.with_reference([ignore, red](const Tensors& in) { return ce_ref(in[0], in[1], ignore, red); },
                           {tols(c.tol, 1e-12)});
        if (c.fd) {
          std::vector<GradPair> grads = {{0, 6}};  // the separate backward
          if (red != Reduction::None) grads.push_back({0, 4});  // the fused dlogits: grad_scale == dloss
          row.with_finite_diff({0, 2, grads});
        }
        cases.push_back(row);
      }
  return cases;
}

// ==== embedding ====================================================================================

std::vector<OpCase> embedding_cases() {
  struct Config {
    Shape ids;
    int64_t V, C;
    std::vector<int64_t> fixed;  // the ids, else a hot id V / 2 at every 4th position and a spread
  };
  // 300 positions: two scan tiles; V = 1100: more rows than owner blocks (several rows a block).
  const std::vector<Config> configs = {{{1}, 1, 1, {}},       {{2, 7}, 13, 31, {}},  {{300}, 257, 1, {}},
                                       {{3, 100}, 1100, 5, {}}, {{64}, 5, 257, {}},
                                       {{2, 3}, 7, 5, {3, 0, 6, 3, 1, 3}},
                                       {{7}, 6, 4, {1, 4, 1, 1, 0, 4, 2}}};  // ids 3 and 5 unused: zero rows
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (DType it : {DType::i32, DType::i64}) {
      const int64_t N = shape_numel(c.ids);
      std::vector<int64_t> ids = c.fixed;
      for (int64_t n = 0; ids.size() < static_cast<size_t>(N); ++n)
        ids.push_back(n % 4 == 0 ? c.V / 2 : (n * 7919) % c.V);
      Shape out = c.ids;
      out.push_back(c.C);
      // The backward adds in position order in the data type on every device: exact.
      OpCase row("embedding " + shape_str(c.ids) + " " + dtype_name(it) + " ids, table (" + std::to_string(c.V) +
                     ", " + std::to_string(c.C) + ")",
                 [c, ids, it, out](Generator& g) {
                   return Tensors{indices(ids, c.ids, it), uniform_f64(g, {c.V, c.C}), uniform_f64(g, out)};
                 },
                 [V = c.V, out](const Tensors& in, Device) {
                   const Tensor y = embedding_forward(in[0], in[1]), dtable = embedding_backward(in[2], in[0], V);
                   CHECK(y.shape() == out);
                   CHECK(dtable.shape() == Shape{V, in[1].size(1)});
                   return Tensors{y, dtable};
                 },
                 {kExact});
      row.with_reference(
          [c, ids](const Tensors& in) {
            const std::vector<double> table = values(in[1]), dout = values(in[2]);
            Values r(2);
            r[1].assign(static_cast<size_t>(c.V * c.C), 0.0);
            for (size_t n = 0; n < ids.size(); ++n)
              for (int64_t k = 0; k < c.C; ++k) {
                r[0].push_back(table[static_cast<size_t>(ids[n] * c.C + k)]);
                r[1][static_cast<size_t>(ids[n] * c.C + k)] += dout[n * c.C + k];
              }
            return r;
          },
          {tols(1e-7, 1e-15), tols(1e-5, 1e-12)});
      if (!c.fixed.empty() && c.ids.size() == 1) row.with_finite_diff({0, 2, {{1, 1}}});
      cases.push_back(row);
    }
  return cases;
}

// ==== attention ====================================================================================

// out, lse, dq, dk, dv of softmax(Q K^T scale + causal mask) V and its textbook backward, the whole
// score row materialised: the composed reference the fused kernels must reproduce.
Values attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double scale,
                     bool causal) {
  const std::vector<double> Q = values(q), K = values(k), Vv = values(v), dO = values(dout);
  const int64_t Tq = q.size(-2), D = q.size(-1), Tk = k.size(-2), Dv = v.size(-1);
  const int64_t BH = q.numel() / (Tq * D);
  Values r{std::vector<double>(BH * Tq * Dv, 0.0), std::vector<double>(BH * Tq, 0.0),
           std::vector<double>(Q.size(), 0.0), std::vector<double>(K.size(), 0.0), std::vector<double>(Vv.size(), 0.0)};
  for (int64_t b = 0; b < BH; ++b) {
    const double* qb = &Q[b * Tq * D];
    const double* kb = &K[b * Tk * D];
    const double* vb = &Vv[b * Tk * Dv];
    const double* dob = &dO[b * Tq * Dv];
    for (int64_t i = 0; i < Tq; ++i) {
      std::vector<double> P(Tk, 0.0), dP(Tk, 0.0);
      double m = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qb[i * D + d] * kb[j * D + d];
        P[j] = (causal && j > i) ? -INFINITY : s * scale;
        m = std::max(m, P[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j) sum += (P[j] = std::exp(P[j] - m));
      for (int64_t j = 0; j < Tk; ++j) P[j] /= sum;
      r[1][b * Tq + i] = m + std::log(sum);
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t d = 0; d < Dv; ++d) r[0][(b * Tq + i) * Dv + d] += P[j] * vb[j * Dv + d];
      // backward: dP = dO V^T, dS = P (dP - sum(P dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
      double Di = 0;
      for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t d = 0; d < Dv; ++d) dP[j] += dob[i * Dv + d] * vb[j * Dv + d];
        Di += P[j] * dP[j];
      }
      for (int64_t j = 0; j < Tk; ++j) {
        const double dS = P[j] * (dP[j] - Di);
        for (int64_t d = 0; d < D; ++d) {
          r[2][(b * Tq + i) * D + d] += scale * dS * kb[j * D + d];
          r[3][(b * Tk + j) * D + d] += scale * dS * qb[i * D + d];
        }
        for (int64_t d = 0; d < Dv; ++d) r[4][(b * Tk + j) * Dv + d] += P[j] * dob[i * Dv + d];
      }
    }
  }
  return r;
}

std::vector<OpCase> attention_cases() {
  struct Config {
    Shape q, k, v;
    bool causal;
    std::optional<double> scale;
    bool fd;
  };
  std::vector<Config> configs;
  for (int64_t T : {1, 7, 64, 129}) configs.push_back({{1, 2, T, 24}, {1, 2, T, 24}, {1, 2, T, 24}, true, {}, false});
  for (int64_t T : {1, 7, 64, 129})
    for (int64_t D : {1, 16}) {
      const Shape s = T > 64 ? Shape{1, 2, T, D} : Shape{2, 3, T, D};
      configs.push_back({s, s, s, true, {}, false});
    }
  configs.push_back({{2, 1, 33, 16}, {2, 1, 33, 16}, {2, 1, 33, 16}, true, {}, false});
  configs.push_back({{1, 1, 7, 128}, {1, 1, 7, 128}, {1, 1, 7, 128}, true, {}, false});  // the shared-memory budget
  configs.push_back({{2, 5, 8}, {2, 41, 8}, {2, 41, 12}, false, {}, false});             // Tq != Tk, Dv != D
  configs.push_back({{1, 3, 9, 33}, {1, 3, 9, 33}, {1, 3, 9, 65}, false, {}, false});
  configs.push_back({{2, 5, 8}, {2, 70, 8}, {2, 70, 3}, false, {}, false});  // (B, T, D): one batch dim
  configs.push_back({{1, 1, 130, 4}, {1, 1, 65, 4}, {1, 1, 65, 5}, false, {}, false});
  configs.push_back({{1, 2, 7, 4}, {1, 2, 7, 4}, {1, 2, 7, 4}, true, 0.8, true});
  configs.push_back({{1, 1, 66, 2}, {1, 1, 66, 2}, {1, 1, 66, 2}, true, 0.8, true});
  configs.push_back({{1, 3, 3}, {1, 9, 3}, {1, 9, 2}, false, 0.8, true});
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    Shape os = c.q;
    os.back() = c.v.back();
    OpCase row("attention q " + shape_str(c.q) + " k " + shape_str(c.k) + " v " + shape_str(c.v) +
                   (c.causal ? " causal" : " full") + (c.scale ? " scale " + str(*c.scale) : ""),
               [c, os](Generator& g) {
                 return Tensors{uniform_f64(g, c.q, -2, 2), uniform_f64(g, c.k, -2, 2), uniform_f64(g, c.v), uniform_f64(g, os)};
               },
               [c, os](const Tensors& in, Device) {
                 const AttentionForward f = attention_forward(in[0], in[1], in[2], c.scale, c.causal);
                 CHECK(f.out.shape() == os);
                 const AttentionBackward b =
                     attention_backward(in[3], in[0], in[1], in[2], f.out, f.lse, c.scale, c.causal);
                 return Tensors{f.out, f.lse, b.dq, b.dk, b.dv};
               },
               {tols(2e-5), tols(2e-5), tols(1e-4, 1e-11)});
    row.with_reference(
        [c](const Tensors& in) {
          const double scale = c.scale ? *c.scale : 1 / std::sqrt(static_cast<double>(c.q.back()));
          return attention_ref(in[0], in[1], in[2], in[3], scale, c.causal);
        },
        {tols(3e-5, 1e-11)});
    if (c.fd) row.with_finite_diff({0, 3, {{0, 2}, {1, 3}, {2, 4}}});
    cases.push_back(row);
  }
  return cases;
}

// ==== optimizer updates, the gradient norm, scale_ =================================================

// A parameter list with what one launch does not hold: 20 tensors (a launch has 16 slots), a
// tensor of 2 chunks of 16384 and, when `big`, one past the 320 chunks of a launch (5.3M elements);
// sizes 1, 31 x 33, 257, and one f64 tensor among the f32 ones. The "chunked" list: 40000 elements
// over three chunks, an empty tensor and a scalar, f64 and f32 alternating.
std::vector<std::pair<Shape, DType>> param_list(const std::string& kind) {
  std::vector<std::pair<Shape, DType>> l;
  if (kind == "chunked") {
    const std::vector<Shape> shapes = {{200, 200}, {7}, {0}, {}, {3, 5}};
    for (size_t i = 0; i < shapes.size(); ++i) l.push_back({shapes[i], i % 2 ? DType::f32 : DType::f64});
    return l;
  }
  l = {{{1}, DType::f32}, {{31, 33}, DType::f32}, {{257}, DType::f64}, {{20000}, DType::f32},
       {{kind == "big" ? 321 * 16384 + 5 : 5}, DType::f32}};
  for (int i = 0; i < 15; ++i) l.push_back({{3 + i}, DType::f32});
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
Tensors make_lists(Generator& g, const std::string& kind, const std::vector<std::pair<double, double>>& ranges) {
  Tensors all;
  for (const auto& [lo, hi] : ranges)
    for (const Tensor& t : make_list(g, kind, lo, hi)) all.push_back(t);
  return all;
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

std::vector<OpCase> optimizer_cases() {
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
               {upd});
    row.with_dtypes({}).with_reference(
        [r, n](const Tensors& in) { return sgd_ref(slice_of(in, 0, n), slice_of(in, 1, n), slice_of(in, 2, n), r.s, r.steps); },
        {ref});
    cases.push_back(row);
  }
  struct AdamRow {
    Adam a;
    std::string list;
    std::vector<int64_t> steps;
  };
  const std::vector<AdamRow> adams = {{{1e-3, 0.9, 0.95, 1e-8, 0.1, true}, "long", {1, 2, 3}},
                                      {{1e-3, 0.9, 0.95, 1e-8, 0.1, false}, "long", {1, 2, 3}},
                                      {{1e-2, 0.9, 0.95, 1e-8, 0.1, true}, "chunked", {3}}};
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
    row.device.assign(2 * n, upd);
    row.device.push_back(tols({1e-6, 1e-9}, {1e-12, 1e-12}));
    row.with_dtypes({}).with_reference(
        [r, n](const Tensors& in) {
          return adam_ref(slice_of(in, 0, n), slice_of(in, 1, n), slice_of(in, 2, n), slice_of(in, 3, n), r.a, r.steps);
        },
        {ref});
    cases.push_back(row);
  }
  // The global norm (accumulated in double: the cpu's value to 1e-12 on every device) and scale_.
  for (const std::string kind : {"long", "big", "chunked", "strided"}) {
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
               {tols(1e-12, 1e-12), kExact});
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
        {tols(1e-12, 1e-12), tols(1e-6, 1e-15)});
    cases.push_back(row);
  }
  return cases;
}

}  // namespace

// ==== the table, one test case per family (each runs every device) ==================================

TEST_CASE("unary ops: every op of the list has a reference row") {
  const auto refs = unary_refs();
  for (UnaryOp op : kUnaryOps) {
    const char* name = op_name(op);
    CAPTURE(name);
    CHECK(std::any_of(refs.begin(), refs.end(), [op](const auto& r) { return r.first == op; }));
  }
}
TEST_CASE("unary ops: every op, strided and broadcast views, NaN") { run_cases(unary_cases()); }
TEST_CASE("binary ops: every op, NumPy broadcasting, strided inputs, NaN") { run_cases(binary_cases()); }
TEST_CASE("tensor-scalar ops: scalar on either side") { run_cases(scalar_cases()); }
TEST_CASE("unary_backward: every op, fused, strided and broadcast views") { run_cases(unary_backward_cases()); }
TEST_CASE("compare and where: every compare op, broadcasting, NaN, masks and raw conditions") {
  run_cases(compare_where_cases());
}
TEST_CASE("matmul: transposes, 1-D, batched, broadcast batch, strided; the tiled SGEMM on cuda") {
  run_cases(matmul_cases());
}
TEST_CASE("reductions: sum, mean, max along each axis and in total, keepdim, NaN") { run_cases(reduce_cases()); }
TEST_CASE("fills, strided copies, dtype casts, rand and randn: every dtype") { run_cases(fill_copy_cast_cases()); }
TEST_CASE("dropout masks: the Philox formula, bit for bit") { run_cases(dropout_cases()); }
TEST_CASE("layernorm and rmsnorm: forward and backward") { run_cases(norm_cases()); }
TEST_CASE("softmax and log-softmax: forward and backward, large logits") { run_cases(softmax_cases()); }
TEST_CASE("max_with_indices and max_backward: every axis, keepdim, ties, NaN") { run_cases(max_cases()); }
TEST_CASE("cross-entropy: every reduction, i32 and i64 targets, ignored rows, fused and separate dlogits") {
  run_cases(cross_entropy_cases());
}
TEST_CASE("embedding: gather and the scatter-add of repeated ids") { run_cases(embedding_cases()); }
TEST_CASE("flash attention: T = 1, 7, 64, 129, D up to 128, causal and not") { run_cases(attention_cases()); }
TEST_CASE("optimizer updates, the global grad norm and scale_ over long mixed-dtype lists") {
  run_cases(optimizer_cases());
}
