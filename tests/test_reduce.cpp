// Reductions: sum/mean/max of known values along axes and in total, keepdim, a strided input,
// an exact large f32 sum, empty tensors, NaN, errors (random inputs on every device against the
// f64 run are rows of tests/test_ops.cpp).
#include <cmath>

#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;

TEST_CASE("reductions along each axis and in total") {
  Tensor x = arange(24, DType::f64).view({2, 3, 4});
  check_close(sum(x), {276});
  CHECK(sum(x).dim() == 0);
  check_close(mean(x), {11.5});
  check_close(max(x), {23});
  check_close(sum(x, {0}), {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  check_close(sum(x, {1}), {12, 15, 18, 21, 48, 51, 54, 57});
  check_close(sum(x, {-1}), {6, 22, 38, 54, 70, 86});
  check_close(sum(x, {0, 2}), {60, 92, 124});
  check_close(mean(x, {1}), {4, 5, 6, 7, 16, 17, 18, 19});
  check_close(max(x, {2}), {3, 7, 11, 15, 19, 23});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1});
  check_close(sum(x.transpose(0, 2), {0}), {6, 54, 22, 70, 38, 86});  // strided input, (3, 2)
}

TEST_CASE("a large f32 sum of ones is exact") {
  Tensor ones_big = ones({1 << 20});
  CHECK(sum(ones_big).item() == 1048576.0);
}

TEST_CASE("empty tensors and NaN") {
  CHECK(sum(zeros({0, 3}), {0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(std::isnan(mean(zeros({0})).item()));
  CHECK(sum(zeros({3, 0}), {0}).shape() == Shape{0});
  CHECK(std::isnan(max(from_vector<double>({1, NAN, 3}, {3})).item()));
  check_close(max(from_vector<double>({-5, -2, -9}, {3})), {-2});
}

TEST_CASE("bad reductions raise reel::Error") {
  CHECK_REEL_ERROR(sum(zeros({2, 3}), {2}), "sum: dim 2 is out of range for a tensor of rank 2");
  CHECK_REEL_ERROR(sum(zeros({2, 3}), {1, -1}), "sum: axis 1 repeated for shape (2, 3)");
  CHECK_REEL_ERROR(max(zeros({0, 3}), {0}), "max: cannot reduce over an empty dimension of shape (0, 3)");
  CHECK_REEL_ERROR(mean(zeros({2}, DType::i32)), "mean: dtype i32");
}
