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

// Checkpointed and plain gradients are compared bit for bit, and a run should not change its results
// with --threads: the CPU GEMM (oneDNN for f32 where reel is built with it, Eigen for f64 and
// otherwise) must not let the thread count change how a product's sums are ordered, e.g. by
// splitting K across threads. The shapes: an MLP's forward and both backward products, a long K
// with a small output (where a library is most tempted to split K), a 1024-wide layer, a batched
// q k^T, and a row stride larger than the row (a narrowed operand: oneDNN's gemm:jit would take it).
// Built without oneDNN, the f32 rows check reel's own split of Eigen's GEMM, which failed here
// before its block edges were aligned (kernels/cpu/matmul.cpp).
TEST_CASE("CPU matmul is bit-identical across thread counts") {
  using reel::testing::bit_identical;
  using reel::testing::for_thread_counts;
  using reel::testing::uniform_f64;
  struct Case {
    Shape a, b;
    bool ta, tb;
    int64_t a_cols;  // a is narrowed to this many columns (0: a whole)
  };
  const std::vector<Case> cases = {
      {{128, 784}, {512, 784}, false, true, 0},   // x W^T
      {{128, 512}, {128, 784}, true, false, 0},   // dW = g^T x
      {{128, 512}, {512, 784}, false, false, 0},  // dx = g W
      {{16, 8192}, {8192, 16}, false, false, 0},  // long K, 16x16 output
      {{256, 1024}, {1024, 1024}, false, true, 0},
      {{8, 64, 32}, {8, 64, 32}, false, true, 0},
      {{16, 8200}, {8192, 16}, false, false, 8192},
  };
  uint64_t seed = 40;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      CAPTURE(shape_str(c.a));
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      Tensor a = uniform_f64(c.a, ++seed).to(dtype);
      const Tensor b = uniform_f64(c.b, ++seed).to(dtype);
      if (c.a_cols) a = a.narrow(-1, 0, c.a_cols);
      std::vector<Tensor> runs;
      for_thread_counts({1, 2, 3, 8}, [&] { runs.push_back(matmul(a, b, c.ta, c.tb)); });
      for (size_t i = 1; i < runs.size(); ++i) CHECK(bit_identical(runs[i], runs[0]));
    }
  }
}
