// Reductions: sum/mean/max of known values along axes and in total, keepdim, a strided input,
// an exact large f32 sum, empty tensors, NaN, errors, the accumulation type the kernels' dispatch
// binds (random inputs on every device against the f64 run are rows of tests/op_table/reduce.cpp),
// bf16 and f16 sums that accumulate wide.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

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

// sum_into_: out (=, or += when accumulating) a sum over axes, in place; the bits equal those of
// out + sum(x), on every device; column sums (a bias gradient), long columns (split in two passes
// on cuda), rows, all dims.
TEST_CASE("sum_into_ writes or adds a sum into out in place on every device") {
  struct Case {
    Shape x;
    std::vector<int64_t> axes;
  };
  const std::vector<Case> cases = {
      {{6, 5}, {0}}, {{2, 3, 7}, {0, 1}}, {{5000, 3}, {0}}, {{4, 9}, {1}}, {{3, 4}, {}}, {{0, 3}, {0}}};
  uint64_t seed = 70;
  for (Device device : testing::devices()) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& c : cases) {
        CAPTURE(device);
        CAPTURE(dtype_name(dtype));
        CAPTURE(c.x);
        const Tensor x = testing::uniform_f64(c.x, ++seed).to(dtype).to(device);
        const Tensor expected_sum = sum(x, c.axes);
        const Tensor out = testing::uniform_f64(expected_sum.shape(), ++seed).to(dtype).to(device);
        const Tensor before = out.clone();
        const uint64_t version = out.version();
        sum_into_(out, x, c.axes, true);
        CHECK(out.version() > version);
        check_close(out, binary(BinaryOp::Add, before, expected_sum), 0.0, 0.0);
        sum_into_(out, x, c.axes, false);  // written: the old values are not read
        check_close(out, expected_sum, 0.0, 0.0);
      }
    }
  }
  CHECK_REEL_ERROR(sum_into_(zeros({4}), zeros({3, 5}), {0}, true),
                   "sum_into_: out (4) must be a contiguous tensor of shape (5) (x (3, 5) summed over the axes)");
  CHECK_REEL_ERROR(sum_into_(zeros({5, 2}).transpose(0, 1), zeros({3, 2, 5}), {0}, true), "must be a contiguous");
  CHECK_REEL_ERROR(sum_into_(zeros({5}, DType::f64), zeros({3, 5}), {0}, true),
                   "sum_into_: out (5) is f64, x (3, 5) is f32: one dtype expected");
  CHECK_REEL_ERROR(sum_into_(zeros({5}), zeros({3, 5}), {2}, true), "sum_into_: dim 2 is out of range");
  CHECK_REEL_ERROR(sum_into_(Tensor(), zeros({3, 5}), {0}, true), "sum_into_: out and x must be defined");
  if (cuda_available())
    CHECK_REEL_ERROR(sum_into_(zeros({5}), zeros({3, 5}, DType::f32, Device::cuda(0)), {0}, true),
                     "sum_into_: expected all tensors on one device, got (5) on cpu (3, 5) on cuda:0");
}

// Column sums are cut into column blocks and row chunks fixed by the shape: the result is within
// rounding of an f64 reference and bit-identical on 1, 2 and 3 threads.
TEST_CASE("column sums of many rows: against f64 and bit-identical at any thread count") {
  for (const Shape& shape : {Shape{5000, 3}, Shape{2048, 300}, Shape{1030, 700}}) {
    CAPTURE(shape);
    const Tensor x64 = testing::uniform_f64(shape, 81);
    const std::vector<double> v = x64.to_vector<double>();
    std::vector<double> ref(static_cast<size_t>(shape[1]), 0.0);
    for (int64_t r = 0; r < shape[0]; ++r)
      for (int64_t c = 0; c < shape[1]; ++c) ref[static_cast<size_t>(c)] += v[static_cast<size_t>(r * shape[1] + c)];
    const Tensor x = x64.to(DType::f32);
    std::vector<Tensor> sums;
    testing::for_thread_counts({1, 2, 3}, [&] { sums.push_back(sum(x, {0})); });
    check_close(sums[0], ref, 1e-6, 1e-5);
    CHECK(testing::bit_identical(sums[0], sums[1]));
    CHECK(testing::bit_identical(sums[0], sums[2]));
  }
}

// The dispatch's accumulation type (core/dtype.h): f32 for f32, f64 for f64, fixed at compile time
// and bound beside scalar_t in every REEL_DISPATCH_FLOATING.
static_assert(std::is_same_v<acc_type_t<float>, float>);
static_assert(std::is_same_v<acc_type_t<double>, double>);

TEST_CASE("the kernels' dispatch accumulates f32 in f32 and f64 in f64, and refuses other dtypes") {
  CHECK(acc_dtype(DType::f32) == DType::f32);
  CHECK(acc_dtype(DType::f64) == DType::f64);
  CHECK_THROWS_AS(acc_dtype(DType::i32), reel::Error);
  CHECK_THROWS_AS(acc_dtype(DType::i64), reel::Error);
}

// bf16 and f16 sum in f32 (cuda) or double (cpu) and round once: 4096 ones sum to 4096 exactly,
// where a 16-bit running sum would stop at 256 (bf16) or 2048 (f16); max is exact.
TEST_CASE("bf16 and f16 sums accumulate wide and round once; max is exact") {
  for (Device d : reel::testing::devices())
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(dt);
      const Tensor one = ones({4096}, dt, d);
      CHECK(sum(one).dtype() == dt);
      CHECK(sum(one).item() == 4096.0);
      CHECK(mean(one).item() == 1.0);
      CHECK(sum(ones({4096, 3}, dt, d), {0}).to(DType::f64).to_vector<double>() == std::vector<double>{4096, 4096, 4096});
      // 1 + 1000 * 2^-9: each term is below half an ulp of 1 in bf16, so a bf16 running sum would
      // stay 1; summed wide it is 2.953125, exact in both types.
      Tensor x = full({1001}, 0x1p-9, dt, d);
      x.narrow(0, 0, 1).fill_(1.0);
      CHECK(sum(x).item() == 2.953125);
      const Tensor m = from_vector<float>({-3, 7.5f, NAN, 7.5f}, {2, 2}).to(dt).to(d);
      CHECK(values(max(m, {1}))[0] == 7.5);
      CHECK(std::isnan(values(max(m, {1}))[1]));
    }
}
