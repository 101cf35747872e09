// tests/op_table/elementwise.cpp: the op table's elementwise family. Kernel rows: every unary op
// (forward against its f64 formula, the fused unary_backward), every binary op under NumPy
// broadcasting, tensor-scalar ops on either side, compare masks and where, on strided, broadcast
// and NaN inputs. Tape rows: + - * / (broadcast, scalar, inputs without grad), every unary op of
// the list through its user function, sigmoid and SiLU, where and compare masks (no gradient).
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: each element widened to f32, computed as in f32, rounded once to the output type.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

// A row's tolerances at bf16 and f16, added to its f32 ones {rtol, atol}. The runner rounds the
// inputs to the dtype before the reference sees them, so against the f64 reference what is left is
// the f32 computation's error (the row's f32 tolerance) and the one rounding of the f32 result to
// the output type: half an ulp, a relative u = 2^-8 (bf16, 8 significant bits) or 2^-11 (f16, 11
// bits); values of these rows stay in f16's normal range or below its 2^-24 absolute subnormal
// step, which the f32 atol covers. cpu vs cuda (`device`): both round an f32 result once, but the
// two f32 results differ a little (Eigen's vectorised exp/tanh on the cpu, libm's on cuda), so an
// element whose two f32 values fall either side of a rounding boundary differs by one ulp, 2u
// relative. Exact rows (compare, where: tolerance 0) stay exact: they scale to 0.
// (op_table.h: with_16bit(t, device), shared by the families that round each output once.)
using kernels::BinaryOp;
using kernels::UnaryOp;

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
  using namespace kernels;
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
                 {with_16bit(tols({1e-5, 1e-6}, {1e-12, 1e-14}), true)})
              .with_reference([ref = ref, f = v.apply](const Tensors& in) { return Values{map(f(in[0]), ref)}; },
                              {with_16bit(tols(2e-6, 1e-13), false)}));
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
  using namespace kernels;
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
  const Tols device = with_16bit(tols({1e-6, 1e-7}, {1e-15, 1e-15}), true);
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
                  {with_16bit(tols(1e-6, 1e-15), false)}));
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
  using namespace kernels;
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
                               // A 16-bit y is made on the cpu for every device: a y one ulp apart
                               // (cpu vs cuda forward) would move f'(y) = 1 - y^2 near |y| = 1 far
                               // more than the backward's own rounding; this row tests the backward.
                               const Tensor y = is_16bit_floating(x.dtype()) ? unary(op, x.to(Device::cpu())).to(x.device())
                                                                              : unary(op, x);
                               const Tensor saved = unary_saves(op) == UnarySaves::Output ? y : x;
                               return Tensors{unary_backward(op, f(in[0]), saved)};
                             },
                             {with_16bit(tols({1e-5, 1e-6}, {1e-12, 1e-14}), true)}));
    }
  return cases;
}

std::vector<OpCase> compare_where_cases() {
  using namespace kernels;
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
                             return Tensors{kernels::where(mask, in[1], in[2]), kernels::where(in[0], in[1], in[2])};
                           },
                           {exact}));
  return cases;
}

std::vector<OpCase> scalar_cases() {
  using namespace kernels;
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
                   {with_16bit(tols({1e-6, 1e-7}, {1e-15, 1e-15}), true)})
                .with_reference(
                    [ref = ref, left, f = v.apply](const Tensors& in) {
                      return Values{map(f(in[0]), [&](double x) { return left ? ref(0.75, x) : ref(x, 0.75); })};
                    },
                    {with_16bit(tols({1e-6, 1e-7}, {1e-15, 1e-15}), false)}));
  return cases;
}

// Where a tape row draws a list op's inputs (its Domain in kernels/op_kinds.h).
Domain domain_of(kernels::UnaryOp op) {
  switch (kernels::unary_domain(op)) {
    case kernels::UnaryDomain::Positive: return Domain::Positive;
    case kernels::UnaryDomain::Kink: return Domain::AwayFromZero;
    case kernels::UnaryDomain::Real: break;
  }
  return Domain::Any;
}

std::vector<OpCase> elementwise_tape_cases() {
  auto add_ = [](const Tensor& a, const Tensor& b) { return a + b; };
  auto sub_ = [](const Tensor& a, const Tensor& b) { return a - b; };
  auto mul_ = [](const Tensor& a, const Tensor& b) { return a * b; };
  auto div_ = [](const Tensor& a, const Tensor& b) { return a / b; };
  return {
      tape_binary("add", add_, {3, 4}, {3, 4}),
      tape_binary("add", add_, {3, 4}, {4}),
      tape_binary("add", add_, {2, 3, 1}, {1, 4}),
      tape_binary("add", add_, {}, {2, 3}),
      tape_binary("add", add_, {2, 1}, {2, 3}, Domain::Any, {false, true}),
      tape_binary("sub", sub_, {3, 4}, {4}),
      tape_binary("sub", sub_, {4}, {2, 3, 4}),
      tape_binary("sub", sub_, {2, 3}, {2, 1}, Domain::Any, {false, true}),
      tape_binary("mul", mul_, {2, 3}, {2, 3}),
      tape_binary("mul", mul_, {2, 3, 4}, {3, 1}),
      tape_binary("mul", mul_, {4}, {2, 3, 4}, Domain::Any, {true, false}),
      tape_binary("mul", mul_, {4}, {2, 3, 4}, Domain::Any, {false, true}),
      tape_binary("div", div_, {2, 3}, {2, 3}, Domain::Positive),
      tape_binary("div", div_, {2, 3}, {3}, Domain::Positive),
      tape_binary("div", div_, {3, 1}, {1, 4}, Domain::Positive),
      tape_binary("div", div_, {2, 3}, {2, 3}, Domain::Positive, {true, false}),
      tape_binary("div", div_, {3}, {2, 3}, Domain::Positive, {false, true}),
      tape_unary("add_scalar", [](const Tensor& x) { return x + 2.5; }, {3, 4}),
      tape_unary("radd_scalar", [](const Tensor& x) { return 2.5 + x; }, {3, 4}),
      tape_unary("sub_scalar", [](const Tensor& x) { return x - 1.5; }, {3, 4}),
      tape_unary("rsub_scalar", [](const Tensor& x) { return 1.5 - x; }, {3, 4}),
      tape_unary("mul_scalar", [](const Tensor& x) { return x * -3.0; }, {3, 4}),
      tape_unary("rmul_scalar", [](const Tensor& x) { return -3.0 * x; }, {3, 4}),
      tape_unary("div_scalar", [](const Tensor& x) { return x / 4.0; }, {3, 4}),
      tape_unary("rdiv_scalar", [](const Tensor& x) { return 4.0 / x; }, {3, 4}, Domain::Positive),
      tape_unary("neg", [](const Tensor& x) { return -x; }, {3, 4}),
      tape_unary("relu", [](const Tensor& x) { return relu(x); }, {3, 4}, Domain::AwayFromZero),
      tape_unary("tanh", [](const Tensor& x) { return tanh(x); }, {3, 4}),
      tape_unary("gelu", [](const Tensor& x) { return gelu(x * 2.0); }, {3, 4}),
      tape_unary("exp", [](const Tensor& x) { return exp(x); }, {3, 4}),
      tape_unary("log", [](const Tensor& x) { return log(x); }, {3, 4}, Domain::Positive),
      // ---- every unary op of the list, through its user function; where and compare ----
#define REEL_UNARY_ROW(Name, name, ...) \
  tape_unary("list: " #name, [](const Tensor& x) { return reel::name(x); }, {3, 4}, domain_of(kernels::UnaryOp::Name)),
      REEL_UNARY_OPS(REEL_UNARY_ROW)
#undef REEL_UNARY_ROW
      // where: differentiable in a and b (broadcast: summed down), never in cond; compare masks.
      tape_ternary("where(c > 0, a, b)", [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(gt(c, 0.0), a, b); },
                   {3, 4}, {3, 4}, {3, 4}, {false, true, true}),
      tape_ternary("where broadcast cond (3, 1), a (1, 4), b ()",
                   [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(le(c, 0.0), a, b); }, {3, 1}, {1, 4},
                   {}, {false, true, true}),
      tape_ternary("where, only b needs grad",
                   [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(ne(c, 0.0), a, b * 2.0); }, {2, 3},
                   {2, 3}, {3}, {false, false, true}),
      tape_binary("where(a > b, a, b) (maximum)", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); },
                  {3, 4}, {4}),
      tape_binary("where with a cond that requires grad", [](const Tensor& a, const Tensor& b) { return where(a, a, b) * a; },
                  {2, 3}, {2, 3}),
      tape_unary("x * gt(x, 0) (a mask has no gradient)", [](const Tensor& x) { return x * gt(x, 0.0); }, {3, 4},
                 Domain::AwayFromZero),
      tape_binary("x * lt(x, y) + y * ge(x, y)",
                  [](const Tensor& x, const Tensor& y) { return x * lt(x, y) + y * ge(x, y) + eq(x, y) * x; }, {3, 4},
                  {3, 4}),

      tape_unary("sigmoid", [](const Tensor& x) { return sigmoid(x * 3.0); }, {3, 4}),
      tape_unary("silu", [](const Tensor& x) { return silu(x * 3.0); }, {3, 4}),
  };
}

TEST_CASE("unary ops: every op of the list has a reference row") {
  const auto refs = unary_refs();
  for (UnaryOp op : kernels::kUnaryOps) {
    const char* name = kernels::op_name(op);
    CAPTURE(name);
    CHECK(std::any_of(refs.begin(), refs.end(), [op](const auto& r) { return r.first == op; }));
  }
}
TEST_CASE("unary ops: every op, strided and broadcast views, NaN") { run_cases(unary_cases(), kDTypes); }
TEST_CASE("binary ops: every op, NumPy broadcasting, strided inputs, NaN") { run_cases(binary_cases(), kDTypes); }
TEST_CASE("tensor-scalar ops: scalar on either side") { run_cases(scalar_cases(), kDTypes); }
TEST_CASE("unary_backward: every op, fused, strided and broadcast views") { run_cases(unary_backward_cases(), kDTypes); }
TEST_CASE("compare and where: every compare op, broadcasting, NaN, masks and raw conditions") {
  run_cases(compare_where_cases(), kDTypes);
}TEST_CASE("elementwise tape ops: + - * / broadcast and scalar, every unary op, where and compare") {
  run_cases(elementwise_tape_cases(), kDTypes);
}
TEST_CASE("compare functions record nothing and their masks never require grad; where gives cond no gradient") {
  Tensor x = from_vector<double>({-1, 0, 2, NAN}, {4}).set_requires_grad();
  Tensor y = from_vector<double>({-1, 1, 1, 0}, {4});
  const Tensor masks[] = {eq(x, y), ne(x, y), lt(x, y), le(x, y), gt(x, y), ge(x, 0.0)};
  for (const Tensor& m : masks) CHECK_FALSE(m.requires_grad());
  CHECK(autograd::Tape::current().empty());
  CHECK(values(eq(x, y)) == std::vector<double>{1, 0, 0, 0});
  CHECK(values(ne(x, y)) == std::vector<double>{0, 1, 1, 1});
  CHECK(values(ge(x, 0.0)) == std::vector<double>{0, 1, 1, 0});
  Tensor c = from_vector<double>({1, 0, 1, 0}, {4}).set_requires_grad();
  Tensor a = from_vector<double>({1, 2, 3, 4}, {4}).set_requires_grad();
  autograd::backward(sum(where(c, a, x)));
  CHECK_FALSE(c.grad().defined());
  CHECK(values(a.grad()) == std::vector<double>{1, 0, 1, 0});
  CHECK(values(x.grad()) == std::vector<double>{0, 1, 0, 1});
  CHECK_REEL_ERROR(where(c, a, zeros({3}, DType::f64)), "where: shapes (4) (cond), (4) (a) and (3) (b)");
}
}  // namespace
}  // namespace reel::op_table
