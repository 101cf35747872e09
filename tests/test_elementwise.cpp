// Elementwise kernels: the edge cases (every op's values against f64 references, broadcasting,
// strided and scalar operands on every device are rows of tests/op_table/elementwise.cpp): exp(-inf) on every
// path, exact scalar ops over large tensors and strided operands, NaN through maximum/minimum,
// bad inputs; the fused unary backward against finite differences, compare masks and where; bf16
// and f16 bit for bit against the f32 op rounded once, NaN, inf and overflow in them.
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <vector>

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

// ---- unary_backward, compare and where -------------------------------------------------------

namespace {
// Inputs where `op` is smooth (its list Domain), as the autograd table draws them.
Tensor domain_input(UnaryOp op, const Shape& shape, DType dt, Generator& g) {
  std::vector<double> v = values(randn(shape, DType::f64, Device::cpu(), &g));
  for (double& x : v) {
    if (unary_domain(op) == UnaryDomain::Positive) x = std::fabs(x) + 0.5;
    if (unary_domain(op) == UnaryDomain::Kink) x += x >= 0 ? 0.1 : -0.1;
  }
  return from_vector(v, shape).to(dt);
}

// What the list says backward reads: x, y, or nothing (undefined).
Tensor saved_for(UnaryOp op, const Tensor& x) {
  switch (unary_saves(op)) {
    case UnarySaves::Input: return x;
    case UnarySaves::Output: return unary(op, x);
    case UnarySaves::Nothing: break;
  }
  return Tensor();
}
}  // namespace

TEST_CASE("unary_backward of every op is dy * f'(x): central differences in f64, f32, strided") {
  Generator g(3);
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(op_name(op));
    const Tensor x = domain_input(op, {5, 13}, DType::f64, g);
    const Tensor dy = randn({5, 13}, DType::f64, Device::cpu(), &g);
    const double h = 1e-6;
    const std::vector<double> up = values(unary(op, binary(BinaryOp::Add, x, h)));
    const std::vector<double> down = values(unary(op, binary(BinaryOp::Sub, x, h)));
    const std::vector<double> gv = values(dy);
    std::vector<double> expected(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) expected[i] = gv[i] * (up[i] - down[i]) / (2 * h);
    check_close(unary_backward(op, dy, saved_for(op, x)), expected, 1e-6, 1e-6);
    // f32: the same to f32 rounding; strided operands (transposed views) give the same values.
    const Tensor x32 = x.to(DType::f32), dy32 = dy.to(DType::f32);
    check_close(unary_backward(op, dy32, saved_for(op, x32)), expected, 1e-5, 1e-5);
    const Tensor saved_t = saved_for(op, x32.t().contiguous());  // (13, 5): .t() is a strided (5, 13)
    check_close(unary_backward(op, dy32.t().contiguous().t(), saved_t.defined() ? saved_t.t() : saved_t), expected,
                1e-5, 1e-5);
  }
}

TEST_CASE("unary_backward: fused GELU and SiLU round like the composed formulas they replace") {
  Generator g(4);
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    // 1000 elements: the chunked vectorised path on whole chunks and a tail.
    const Tensor x = binary(BinaryOp::Mul, randn({1000}, dt, Device::cpu(), &g), 3.0);
    const Tensor dy = randn({1000}, dt, Device::cpu(), &g);
    auto mul = [](const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); };
    auto scale = [](const Tensor& a, double s) { return binary(BinaryOp::Mul, a, s); };
    const double k = 0.7978845608028654, c = 0.044715;
    const Tensor x2 = unary(UnaryOp::Square, x);
    const Tensor t = unary(UnaryOp::Tanh, scale(binary(BinaryOp::Add, x, scale(mul(x2, x), c)), k));
    const Tensor dinner = binary(BinaryOp::Add, scale(x2, 3 * c * k), k);
    const Tensor sech2 = binary(BinaryOp::Sub, 1.0, unary(UnaryOp::Square, t));
    const Tensor gelu_d = binary(BinaryOp::Add, scale(binary(BinaryOp::Add, t, 1.0), 0.5),
                                 scale(mul(mul(x, sech2), dinner), 0.5));
    // Rounding only: the fused pass keeps its terms in registers (and the compiler may contract
    // a * b + c into one FMA), so where t = tanh(...) is near -1 and 0.5 (1 + t) cancels against
    // the other term, the results differ by a few ulps of the O(1) terms, not of the result.
    const double rtol = dt == DType::f32 ? 1e-6 : 1e-14, atol = dt == DType::f32 ? 1e-5 : 1e-13;
    check_close(unary_backward(UnaryOp::Gelu, dy, x), mul(dy, gelu_d), rtol, atol);
    const Tensor s = unary(UnaryOp::Sigmoid, x);
    const Tensor silu_d = mul(s, binary(BinaryOp::Add, mul(x, binary(BinaryOp::Sub, 1.0, s)), 1.0));
    check_close(unary_backward(UnaryOp::Silu, dy, x), mul(dy, silu_d), rtol, atol);
  }
}

TEST_CASE("unary_backward: relu's mask is y > 0, abs's sign is 0 at 0, exact where exact") {
  const Tensor dy = from_vector<double>({2.5, -1.5, 3.0, 4.0}, {4});
  const Tensor y = from_vector<double>({0.0, 1e-310, 7.0, INFINITY}, {4});  // relu outputs (y >= 0)
  CHECK(values(unary_backward(UnaryOp::Relu, dy, y)) == std::vector<double>{0.0, -1.5, 3.0, 4.0});
  CHECK(values(unary_backward(UnaryOp::Relu, dy, unary(UnaryOp::Relu, from_vector<double>({NAN, -1, 0, 2}, {4})))) ==
        std::vector<double>{0.0, 0.0, 0.0, 4.0});  // relu(NaN) is 0, so no gradient
  const std::vector<double> a = values(unary_backward(UnaryOp::Abs, dy, from_vector<double>({0.0, -2.0, 3.0, NAN}, {4})));
  CHECK(a[0] == 0.0);
  CHECK(a[1] == 1.5);
  CHECK(a[2] == 3.0);
  CHECK(std::isnan(a[3]));
  CHECK(values(unary_backward(UnaryOp::Neg, dy, Tensor())) == std::vector<double>{-2.5, 1.5, -3.0, -4.0});
  CHECK(values(unary_backward(UnaryOp::Tanh, dy, from_vector<double>({0.5, 0, 1, -1}, {4}))) ==
        std::vector<double>{2.5 * 0.75, -1.5, 0.0, 0.0});
  CHECK(unary_backward(UnaryOp::Exp, zeros({0, 3}), zeros({0, 3})).shape() == Shape{0, 3});
}

TEST_CASE("compare: exact masks in the inputs' dtype, NaN false except ne, tensor and scalar forms") {
  const std::vector<double> av = {1, 2, NAN, 3, -0.0}, bv = {1, 3, NAN, 2, 0.0};
  struct Expect {
    CompareOp op;
    std::vector<double> tensor, scalar;  // a op b; a op 2
  };
  const std::vector<Expect> expect = {
      {CompareOp::Eq, {1, 0, 0, 0, 1}, {0, 1, 0, 0, 0}}, {CompareOp::Ne, {0, 1, 1, 1, 0}, {1, 0, 1, 1, 1}},
      {CompareOp::Lt, {0, 1, 0, 0, 0}, {1, 0, 0, 0, 1}}, {CompareOp::Le, {1, 1, 0, 0, 1}, {1, 1, 0, 0, 1}},
      {CompareOp::Gt, {0, 0, 0, 1, 0}, {0, 0, 0, 1, 0}}, {CompareOp::Ge, {1, 0, 0, 1, 1}, {0, 1, 0, 1, 0}},
  };
  REQUIRE(expect.size() == std::size(kCompareOps));
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = from_vector(av, {5}).to(dt), b = from_vector(bv, {5}).to(dt);
    for (const Expect& e : expect) {
      CAPTURE(op_name(e.op));
      CAPTURE(dtype_name(dt));
      const Tensor m = compare(e.op, a, b);
      CHECK(m.dtype() == dt);
      CHECK(values(m) == e.tensor);
      CHECK(values(compare(e.op, a, 2.0)) == e.scalar);
      CHECK(values(compare(e.op, a.slice(0, 0, 5, 2), b.slice(0, 0, 5, 2))) ==
            std::vector<double>{e.tensor[0], e.tensor[2], e.tensor[4]});  // strided
    }
  }
}

TEST_CASE("compare and where broadcast like NumPy") {
  Generator g(5);
  const Tensor a = randn({3, 1}, DType::f64, Device::cpu(), &g), b = randn({1, 4}, DType::f64, Device::cpu(), &g);
  const std::vector<double> av = values(a), bv = values(b);
  const Tensor m = compare(CompareOp::Lt, a, b);
  REQUIRE(m.shape() == Shape{3, 4});
  const std::vector<double> mv = values(m);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(mv[i * 4 + j] == (av[i] < bv[j] ? 1.0 : 0.0));
  // where: cond (3, 1), a (1, 4), b () -> (3, 4); cond nonzero (NaN included) picks a, +-0 picks b.
  const Tensor cond = from_vector<double>({1, -0.0, NAN}, {3, 1});
  const Tensor w = where(cond, b, full({}, 9.0, DType::f64));
  REQUIRE(w.shape() == Shape{3, 4});
  const std::vector<double> wv = values(w);
  for (int j = 0; j < 4; ++j) {
    CHECK(wv[j] == bv[j]);
    CHECK(wv[4 + j] == 9.0);
    CHECK(wv[8 + j] == bv[j]);
  }
  // A mask from compare selects: relu's backward, where(y > 0, dy, 0).
  const Tensor y = from_vector<double>({0, 2, 0, 5}, {4}), dy = from_vector<double>({1, 2, 3, 4}, {4});
  CHECK(values(where(compare(CompareOp::Gt, y, 0.0), dy, zeros({}, DType::f64))) == std::vector<double>{0, 2, 0, 4});
  CHECK(where(zeros({0, 1}), ones({1, 3}), zeros({})).shape() == Shape{0, 3});  // empty
}

TEST_CASE("bad compare, where and unary_backward inputs raise reel::Error naming op and shapes") {
  CHECK_REEL_ERROR(compare(CompareOp::Gt, zeros({2, 3}), zeros({4})),
                   "gt: shapes (2, 3) and (4) cannot be broadcast: dim 1 has sizes 3 and 4");
  CHECK_REEL_ERROR(compare(CompareOp::Lt, zeros({2}), zeros({2}, DType::f64)), "lt: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(compare(CompareOp::Eq, zeros({2}, DType::i64), 1.0), "eq: dtype i64");
  CHECK_REEL_ERROR(where(zeros({2}), zeros({3}), zeros({1})),
                   "where: shapes (2) (cond), (3) (a) and (1) (b) cannot be broadcast");
  CHECK_REEL_ERROR(where(zeros({2}, DType::f64), zeros({2}), zeros({2})), "where: dtypes differ: f64 and f32");
  CHECK_REEL_ERROR(unary_backward(UnaryOp::Gelu, zeros({2}), zeros({3})),
                   "gelu_backward: dy (2) and the saved (3) differ in shape");
  CHECK_REEL_ERROR(unary_backward(UnaryOp::Exp, zeros({2}), Tensor()), "exp_backward: undefined");
  CHECK_REEL_ERROR(unary_backward(UnaryOp::Silu, zeros({2}), zeros({2}, DType::i32)), "silu_backward: dtype i32");
}

TEST_CASE("binary_ in place: equals binary on every device, broadcasts b, bumps the version, refuses bad targets") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
      CAPTURE(op_name(op));
      Generator gen(3);
      const Tensor a0 = randn({33, 17}, DType::f32, Device::cpu(), &gen).to(d);
      for (const Tensor& b : {randn({33, 17}, DType::f32, Device::cpu(), &gen).to(d),
                              randn({17}, DType::f32, Device::cpu(), &gen).to(d),
                              randn({33, 1}, DType::f32, Device::cpu(), &gen).to(d),
                              randn({17, 33}, DType::f32, Device::cpu(), &gen).to(d).t()}) {  // strided b
        const Tensor expected = binary(op, a0, b);
        const Tensor a = a0.clone();
        const uint64_t version = a.version();
        binary_(op, a, b);
        CHECK(a.version() == version + 1);
        check_close(a, values(expected), 0, 0);  // the same arithmetic, bit for bit
      }
    }
    // b a view of a's own storage (here its transpose): read from a copy, not half-overwritten.
    const Tensor m = arange(16, DType::f64).view({4, 4}).to(d);
    const Tensor expected = binary(BinaryOp::Add, m, m.t());
    binary_(BinaryOp::Add, m, m.t());
    check_close(m, values(expected), 0, 0);
    const Tensor a = zeros({4, 3}, DType::f32, d);
    CHECK_REEL_ERROR(binary_(BinaryOp::Add, a, zeros({2, 4, 3}, DType::f32, d)),
                     "add_: (2, 4, 3) does not broadcast to (4, 3), the shape written in place");
    CHECK_REEL_ERROR(binary_(BinaryOp::Add, a.t(), zeros({3, 4}, DType::f32, d)), "add_: the tensor written in place, (3, 4)");
    CHECK_REEL_ERROR(binary_(BinaryOp::Add, a, zeros({4, 3}, DType::f64, d)), "add_");
  }
}

// ---- bf16 and f16 ----------------------------------------------------------------------------

namespace {
// The bit patterns of a 16-bit tensor (any device).
std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint16_t> b;
  if (c.dtype() == DType::bf16)
    for (bf16 v : c.to_vector<bf16>()) b.push_back(v.bits);
  else
    for (f16 v : c.to_vector<f16>()) b.push_back(v.bits);
  return b;
}
// N(0, 2) values, then the specials: NaN, +-inf, +-0, a value past f16's range, an f16 subnormal.
// The largest distance in 16-bit ulps between two same-length bit vectors of dtype dt
// (sign-magnitude ordered; equal bits are 0 apart, and so are two NaNs, whatever their signs).
int max_ulps16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, DType dt) {
  const int inf = dt == DType::bf16 ? 0x7f80 : 0x7c00;
  const auto nan = [&](uint16_t v) { return (v & 0x7fff) > inf; };
  const auto ordered = [](uint16_t v) { return (v & 0x8000) ? -static_cast<int>(v & 0x7fff) : static_cast<int>(v); };
  int worst = a.size() == b.size() ? 0 : 1 << 16;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i] && !(nan(a[i]) && nan(b[i]))) worst = std::max(worst, std::abs(ordered(a[i]) - ordered(b[i])));
  return worst;
}

Tensor specials_f32(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v = randn({n}, DType::f32, Device::cpu(), &g).to_vector<float>();
  for (float& x : v) x *= 2;
  const float s[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e5f, 3e-6f, -0.75f};
  for (size_t i = 0; i < std::size(s) && i < v.size(); ++i) v[i * 7 % v.size()] = s[i];
  return from_vector<float>(v, {n});
}
}  // namespace

// The 16-bit contract: widen to f32, compute as f32 does, round once. So a 16-bit op's bits equal
// those of the same op on the widened f32 tensor, rounded to the 16-bit type (contiguous, aligned
// tensors of one length: the cpu's f32 buffer cuts vectorised runs where the f32 path does).
TEST_CASE("bf16 and f16: every unary, binary and fused backward op is the f32 op rounded once, on every device") {
  for (Device d : reel::testing::devices())
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(dt);
      const Tensor x = specials_f32(1000, 1).to(dt).to(d), y = specials_f32(1000, 2).to(dt).to(d);
      const Tensor xw = x.to(DType::f32), yw = y.to(DType::f32);  // exact widenings
      for (UnaryOp op : kUnaryOps) {
        CAPTURE(op_name(op));
        const Tensor got = unary(op, x);
        CHECK(got.dtype() == dt);
        CHECK(bits16(got) == bits16(unary(op, xw).to(dt)));
        // The fused backward's products and sums may be contracted into FMAs differently in the
        // 16-bit and f32 instantiations (clang contracts by default): one ulp apart at most, and a
        // NaN's sign (inf * 0 under another contraction) is not compared.
        CHECK(max_ulps16(bits16(unary_backward(op, y, x)), bits16(unary_backward(op, yw, xw).to(dt)), dt) <= 1);
      }
      for (BinaryOp op : kBinaryOps) {
        CAPTURE(op_name(op));
        CHECK(bits16(binary(op, x, y)) == bits16(binary(op, xw, yw).to(dt)));
        // The scalar is rounded to the dtype first, as a tensor operand would be (0.1 is not exact).
        const double s = static_cast<double>(static_cast<float>(scalar_tensor(0.1, dt).item()));
        CHECK(bits16(binary(op, x, 0.1)) == bits16(binary(op, xw, s).to(dt)));
        CHECK(bits16(binary(op, 0.1, x)) == bits16(binary(op, s, xw).to(dt)));
      }
      for (CompareOp op : kCompareOps) {  // exact masks: 1 or 0 in the dtype
        CAPTURE(op_name(op));
        CHECK(values(compare(op, x, y)) == values(compare(op, xw, yw)));
      }
      CHECK(bits16(where(x, x, y)) == bits16(where(xw, xw, yw).to(dt)));  // NaN cond picks a; bits copied
    }
}

TEST_CASE("bf16 and f16: NaN, inf and overflow through the elementwise ops") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Tensor h = from_vector<float>({NAN, INFINITY, -INFINITY, 60000, -0.0f}, {5}).to(DType::f16).to(d);
    const std::vector<double> a = values(unary(UnaryOp::Abs, h));
    CHECK(std::isnan(a[0]));
    CHECK(a[1] == INFINITY);
    CHECK(a[2] == INFINITY);
    CHECK(a[4] == 0);
    // 60000 * 2 is past f16's largest finite (65504): inf, as IEEE rounding gives.
    CHECK(values(binary(BinaryOp::Mul, h, 2.0))[3] == INFINITY);
    CHECK(std::isnan(values(binary(BinaryOp::Maximum, h, 1.0))[0]));  // NaN propagates
    // bf16 has f32's range: 1e38 * 2 is finite, 1e38 * 4 overflows to inf.
    const Tensor b = from_vector<float>({1e38f}, {1}).to(DType::bf16).to(d);
    CHECK(std::isfinite(values(binary(BinaryOp::Mul, b, 2.0))[0]));
    CHECK(values(binary(BinaryOp::Mul, b, 4.0))[0] == INFINITY);
  }
  CHECK_REEL_ERROR(binary(BinaryOp::Add, zeros({2}, DType::bf16), zeros({2}, DType::f16)), "add: dtypes differ: bf16 and f16");
}
