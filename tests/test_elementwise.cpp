// Elementwise kernels against f64 references: every unary and binary op, NumPy broadcasting
// edge cases (size-1 dims, scalars, empty tensors, strided inputs), scalar ops, bad inputs.
#include <cmath>
#include <functional>

#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

namespace {
double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// Reference broadcasting: value of `t` at the output multi-index of `shape`.
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
}  // namespace

TEST_CASE("unary ops match f64 references in f32 and f64") {
  const std::vector<std::pair<UnaryOp, std::function<double(double)>>> cases = {
      {UnaryOp::Neg, [](double x) { return -x; }},
      {UnaryOp::Exp, [](double x) { return std::exp(x); }},
      {UnaryOp::Log, [](double x) { return std::log(std::fabs(x) + 0.1); }},
      {UnaryOp::Tanh, [](double x) { return std::tanh(x); }},
      {UnaryOp::Relu, [](double x) { return x > 0 ? x : 0; }},
      {UnaryOp::Gelu, gelu_ref},
      {UnaryOp::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {UnaryOp::Silu, [](double x) { return x / (1 + std::exp(-x)); }},
      {UnaryOp::Sqrt, [](double x) { return std::sqrt(std::fabs(x) + 0.1); }},
      {UnaryOp::Abs, [](double x) { return std::fabs(x); }},
      {UnaryOp::Square, [](double x) { return x * x; }},
      {UnaryOp::Reciprocal, [](double x) { return 1 / (std::fabs(x) + 0.1); }},
  };
  Generator g(1);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = randn({7, 33}, dt, Device::cpu(), &g);
    for (const auto& [op, ref] : cases) {
      CAPTURE(op_name(op));
      CAPTURE(dtype_name(dt));
      // Log, sqrt and reciprocal get positive inputs away from 0.
      const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Reciprocal;
      Tensor in = positive ? binary(BinaryOp::Add, unary(UnaryOp::Abs, x), 0.1) : x;
      const std::vector<double> xv = values(x);
      std::vector<double> expected(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) expected[i] = ref(xv[i]);
      const double tol = dt == DType::f32 ? 2e-6 : 1e-13;
      check_close(unary(op, in), expected, tol, tol);
      // Strided input (a transposed view) gives the same values, transposed.
      check_close(unary(op, in.t()).t(), expected, tol, tol);
    }
  }
}

TEST_CASE("exp(-inf) is exactly 0 in rows of every width (vectorised and scalar paths)") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 3, 8, 17, 1000}) {
      CAPTURE(n);
      const Tensor x = full({n}, -INFINITY, dt);
      for (double v : values(unary(UnaryOp::Exp, x))) CHECK(v == 0.0);
    }
  }
}

TEST_CASE("binary ops broadcast like NumPy") {
  const std::vector<std::pair<Shape, Shape>> shape_pairs = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}},       {{3, 1}, {1, 4}},    {{2, 3, 4}, {3, 1}},
      {{1}, {5, 2}},    {{}, {2, 3}},        {{2, 3}, {}},        {{0, 3}, {3}},
      {{4, 1, 3}, {1, 5, 1}}, {{257}, {1}}, {{2, 1, 1, 3}, {2, 3}},
  };
  const std::vector<std::pair<BinaryOp, std::function<double(double, double)>>> ops = {
      {BinaryOp::Add, std::plus<double>()},         {BinaryOp::Sub, std::minus<double>()},
      {BinaryOp::Mul, std::multiplies<double>()},   {BinaryOp::Div, std::divides<double>()},
      {BinaryOp::Maximum, [](double a, double b) { return std::max(a, b); }},
      {BinaryOp::Minimum, [](double a, double b) { return std::min(a, b); }},
  };
  Generator g(2);
  for (const auto& [sa, sb] : shape_pairs) {
    Tensor a = randn(sa, DType::f64, Device::cpu(), &g);
    Tensor b = binary(BinaryOp::Add, rand(sb, DType::f64, Device::cpu(), &g), 0.5);  // no division by ~0
    const Shape out_shape = broadcast_shapes(sa, sb, "test");
    const std::vector<double> av = values(a), bv = values(b);
    for (const auto& [op, ref] : ops) {
      CAPTURE(op_name(op));
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      Tensor out = binary(op, a, b);
      CHECK(out.shape() == out_shape);
      std::vector<double> expected(static_cast<size_t>(shape_numel(out_shape)));
      for (int64_t i = 0; i < shape_numel(out_shape); ++i)
        expected[i] = ref(at_broadcast(a, av, out_shape, i), at_broadcast(b, bv, out_shape, i));
      check_close(out, expected, 1e-15, 1e-15);
    }
  }
}

TEST_CASE("scalar ops on either side, large tensors and strided operands") {
  Tensor a = arange(100000, DType::f32);
  std::vector<double> expected(100000);
  for (int i = 0; i < 100000; ++i) expected[i] = 3.0 - i;
  check_close(binary(BinaryOp::Sub, 3.0, a), expected, 0, 0);
  for (int i = 0; i < 100000; ++i) expected[i] = i * 0.5;
  check_close(binary(BinaryOp::Mul, a, 0.5), expected, 0, 0);
  Tensor m = arange(12, DType::f64).view({3, 4});
  check_close(binary(BinaryOp::Add, m.t(), m.t()), {0, 8, 16, 2, 10, 18, 4, 12, 20, 6, 14, 22}, 0, 0);
  check_close(binary(BinaryOp::Mul, m.slice(1, 0, 4, 2), tensor({1, 10}).to(DType::f64)), {0, 20, 4, 60, 8, 100}, 0, 0);
}

TEST_CASE("NaN propagates through maximum and minimum") {
  Tensor a = from_vector<double>({NAN, 1.0, 2.0}, {3});
  Tensor b = from_vector<double>({0.0, NAN, 1.0}, {3});
  const std::vector<double> mx = values(binary(BinaryOp::Maximum, a, b));
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2.0);
}

TEST_CASE("bad elementwise inputs raise reel::Error naming op and shapes") {
  CHECK_REEL_ERROR(binary(BinaryOp::Add, zeros({2, 3}), zeros({4})),
                   "add: shapes (2, 3) and (4) cannot be broadcast: dim 1 has sizes 3 and 4");
  CHECK_REEL_ERROR(binary(BinaryOp::Mul, zeros({2}), zeros({2}, DType::f64)), "mul: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(unary(UnaryOp::Exp, zeros({2}, DType::i32)), "exp: dtype i32 of the (2) tensor is not supported");
  CHECK_REEL_ERROR(binary(BinaryOp::Div, zeros({2}, DType::i64), 2.0), "div: dtype i64");
}
