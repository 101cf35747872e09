// matmul against a naive f64 reference: 2-D, batched with broadcast batch dims, 1-D operands,
// transposes (flags and strided views), awkward sizes, empty dims, and shape errors.
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

namespace {
// Reference for 2-D a (M, K) and b (K, N), given as contiguous value vectors.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K,
                               int64_t N) {
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}
}  // namespace

TEST_CASE("2-D matmul on awkward sizes, f32 and f64") {
  Generator g(3);
  for (DType dt : {DType::f32, DType::f64}) {
    // The last three are large enough to be cut into a block of rows (M >= N) or of columns per
    // thread (kernels/cpu/matmul.cpp); odd sizes so the blocks are uneven.
    for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 1}, {4, 3, 2}, {31, 17, 33}, {64, 257, 5}, {128, 128, 128}, {201, 161, 151}, {97, 131, 333},
             {3, 2001, 701}}) {
      CAPTURE(M);
      CAPTURE(K);
      CAPTURE(N);
      Tensor a = randn({M, K}, dt, Device::cpu(), &g);
      Tensor b = randn({K, N}, dt, Device::cpu(), &g);
      const std::vector<double> expected = matmul_ref(values(a), values(b), M, K, N);
      const double tol = dt == DType::f32 ? 1e-4 : 1e-12;
      check_close(matmul(a, b), expected, tol, tol);
      // The same product through transposed storage: flags, and explicit transposed views.
      check_close(matmul(a.t().contiguous(), b, true, false), expected, tol, tol);
      check_close(matmul(a, b.t().contiguous(), false, true), expected, tol, tol);
      check_close(matmul(a.t().contiguous().t(), b.t().contiguous().t()), expected, tol, tol);
      // A sliced (non-unit outer stride) operand.
      Tensor wide = zeros({M, K + 3}, dt);
      wide.narrow(1, 1, K).copy_(a);
      check_close(matmul(wide.narrow(1, 1, K), b), expected, tol, tol);
    }
  }
}

TEST_CASE("batched matmul broadcasts batch dims") {
  Generator g(4);
  Tensor a = randn({2, 1, 5, 3}, DType::f64, Device::cpu(), &g);
  Tensor b = randn({4, 3, 6}, DType::f64, Device::cpu(), &g);
  Tensor c = matmul(a, b);
  CHECK(c.shape() == Shape{2, 4, 5, 6});
  const std::vector<double> av = values(a), bv = values(b), cv = values(c);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      std::vector<double> am(av.begin() + i * 15, av.begin() + (i + 1) * 15);
      std::vector<double> bm(bv.begin() + j * 18, bv.begin() + (j + 1) * 18);
      const std::vector<double> ref = matmul_ref(am, bm, 5, 3, 6);
      for (int k = 0; k < 30; ++k) CHECK(cv[(i * 4 + j) * 30 + k] == doctest::Approx(ref[k]).epsilon(1e-12));
    }
  // Attention-shaped: (B, H, T, D) @ (B, H, T, D)^T.
  Tensor q = randn({2, 3, 7, 4}, DType::f64, Device::cpu(), &g);
  Tensor k = randn({2, 3, 7, 4}, DType::f64, Device::cpu(), &g);
  Tensor s = matmul(q, k, false, true);
  CHECK(s.shape() == Shape{2, 3, 7, 7});
  check_close(s.select(0, 1).select(0, 2), matmul(q.select(0, 1).select(0, 2), k.select(0, 1).select(0, 2).t()),
              1e-12, 1e-12);
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
  CHECK_REEL_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), "matmul: shapes (2) and (3) cannot be broadcast");
  CHECK_REEL_ERROR(matmul(zeros({3}), zeros({3}), true, false), "a transpose needs a 2-D or higher operand");
  CHECK_REEL_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, DType::f64)), "matmul: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(matmul(scalar_tensor(1), zeros({2})), "need at least one dim");
}
