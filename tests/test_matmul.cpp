// matmul edge cases (its values against an f64 reference, 2-D on awkward sizes, batched with broadcast
// batch dims, transposes and strided operands on every device, are rows of tests/test_ops.cpp): the
// output shapes of broadcast batches, 1-D operands and empty dims as numpy.matmul, shape errors.
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

TEST_CASE("batched matmul broadcasts batch dims: the output shapes") {
  CHECK(matmul(zeros({2, 1, 5, 3}), zeros({4, 3, 6})).shape() == Shape{2, 4, 5, 6});
  CHECK(matmul(zeros({2, 3, 7, 4}), zeros({2, 3, 7, 4}), false, true).shape() == Shape{2, 3, 7, 7});  // q k^T
}

TEST_CASE("1-D operands and empty dims follow numpy.matmul") {
  Tensor m = arange(6, DType::f64).view({2, 3});
  Tensor v = from_vector<double>({1, 1, 1}, {3});
  Tensor mv = matmul(m, v);
  CHECK(mv.shape() == Shape{2});
  check_close(mv, {3, 12});
  Tensor vm = matmul(from_vector<double>({1, 1}, {2}), m);
  CHECK(vm.shape() == Shape{3});
  check_close(vm, {3, 5, 7});
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, v).item() == 3.0);
  check_close(matmul(zeros({2, 0}), zeros({0, 3})), std::vector<double>(6, 0.0));
  CHECK(matmul(zeros({0, 4}), zeros({4, 3})).shape() == Shape{0, 3});
}

TEST_CASE("incompatible matmul shapes raise reel::Error naming both shapes") {
  CHECK_REEL_ERROR(matmul(zeros({4, 3}), zeros({5, 2})),
                   "matmul: shapes (4, 3) and (5, 2) are not compatible: inner dims 3 != 5");
  // Batch dims that do not broadcast: both full shapes, then the batch dims.
  CHECK_REEL_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})),
                   "matmul: shapes (2, 2, 3) and (3, 3, 2): batch dims (2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({4, 2, 5, 3}), zeros({3, 3, 2})),
                   "matmul: shapes (4, 2, 5, 3) and (3, 3, 2): batch dims (4, 2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({2, 3, 5}), zeros({3, 4, 3}), true, true),
                   "matmul: shapes (2, 3, 5)^T and (3, 4, 3)^T: batch dims (2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({3}), zeros({3}), true, false), "a transpose needs a 2-D or higher operand");
  CHECK_REEL_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, DType::f64)), "matmul: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(matmul(scalar_tensor(1), zeros({2})), "need at least one dim");
}
