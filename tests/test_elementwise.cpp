// Elementwise kernels: the edge cases (every op's values against f64 references, broadcasting,
// strided and scalar operands on every device are rows of tests/test_ops.cpp): exp(-inf) on every
// path, exact scalar ops over large tensors and strided operands, NaN through maximum/minimum,
// bad inputs.
#include <cmath>
#include <functional>

#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

TEST_CASE("exp(-inf) is exactly 0 in rows of every width (vectorised and scalar paths)") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 3, 8, 17, 1000}) {
      CAPTURE(n);
      const Tensor x = full({n}, -INFINITY, dt);
      for (double v : values(unary(UnaryOp::Exp, x))) CHECK(v == 0.0);
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
