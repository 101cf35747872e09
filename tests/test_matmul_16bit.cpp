// The GEMM's reduced-precision paths beyond the op table's rows (tests/op_table/matmul.cpp):
// bf16 / f16 with a bias, accumulating into an output, and cut along K on the CPU, each the f32
// result rounded once; mixed dtypes refused; TF32 on cuda (off by default, emulated with TF32's
// rounding) against the f64 product of TF32-rounded inputs, with and without a bias.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "autograd/nn_functions.h"
#include "testing.h"

using namespace reel;
using reel::testing::values;

namespace {

using reel::testing::ref_matmul;

// The unit roundoff of a 16-bit type: half an ulp, relative.
double unit_roundoff(DType t) { return t == DType::bf16 ? 0x1p-8 : 0x1p-11; }

// f32 rounded to TF32 (10 fraction bits), to nearest even: written here, apart from the emulator's.
float tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t lsb = (u >> 13) & 1u;
  u = (u + 0xfffu + lsb) & ~0x1fffu;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Tf32Guard {  // restores the process-wide switch however a test ends
  bool saved = allow_tf32();
  ~Tf32Guard() { set_allow_tf32(saved); }
};

}  // namespace

TEST_CASE("bf16 / f16 matmul with a bias, accumulating, and cut along K: the f32 result rounded once") {
  Generator gen(7);
  // (32, 4096) @ (4096, 32): the CPU cuts it into K slices summed in f32 (kernels/cpu/matmul.cpp);
  // rounding each slice to 16 bits would miss u by up to the slice count.
  for (const auto& mkn : std::vector<std::array<int64_t, 3>>{{37, 53, 41}, {201, 161, 151}, {32, 4096, 32}})
    for (DType dt : {DType::bf16, DType::f16})
      for (Device dev : testing::devices()) {
        const int64_t M = mkn[0], K = mkn[1], N = mkn[2];  // not a structured binding: CAPTURE takes it
        CAPTURE(M);
        CAPTURE(K);
        CAPTURE(dt);
        CAPTURE(dev);
        const Tensor a = randn({M, K}, DType::f32, Device::cpu(), &gen).to(dt);
        const Tensor b = randn({K, N}, DType::f32, Device::cpu(), &gen).to(dt);
        const Tensor bias = randn({N}, DType::f32, Device::cpu(), &gen).to(dt);
        const Tensor init = randn({M, N}, DType::f32, Device::cpu(), &gen).to(dt);
        const std::vector<double> p = ref_matmul(values(a), values(b), M, K, N);
        const std::vector<double> bv = values(bias), iv = values(init);
        const Tensor with_bias = kernels::matmul(a.to(dev), b.to(dev), false, false, bias.to(dev));
        const Tensor acc = init.to(dev).clone();
        kernels::matmul_into_(acc, a.to(dev), b.to(dev), false, false, /*accumulate=*/true);
        REQUIRE(with_bias.dtype() == dt);
        const std::vector<double> got_bias = values(with_bias), got_acc = values(acc);
        // |got - exact| <= u |exact| + the f32 sum's error (K terms of |a b| ~ 1: 4 eps32 K).
        const double u = unit_roundoff(dt), atol = 4 * 0x1p-24 * static_cast<double>(K);
        int bad = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const double e1 = p[i * N + j] + bv[j], e2 = p[i * N + j] + iv[i * N + j];
            bad += std::abs(got_bias[i * N + j] - e1) > u * std::abs(e1) + atol;
            bad += std::abs(got_acc[i * N + j] - e2) > u * std::abs(e2) + atol;
          }
        CHECK(bad == 0);
      }
}

TEST_CASE("matmul and linear refuse mixed dtypes with a reel::Error naming the op, shapes and dtypes") {
  const Tensor a = randn({3, 4}).to(DType::bf16), b = randn({4, 5});
  try {
    (void)kernels::matmul(a, b);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("matmul") != std::string::npos);
    CHECK(m.find("bf16") != std::string::npos);
    CHECK(m.find("f32") != std::string::npos);
    CHECK(m.find("(3, 4)") != std::string::npos);
    CHECK(m.find("(4, 5)") != std::string::npos);
  }
  const Tensor x = randn({2, 4}).to(DType::f16), w = randn({3, 4}).to(DType::bf16);
  try {
    (void)linear(x, w);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("linear") != std::string::npos);
    CHECK(m.find("f16") != std::string::npos);
    CHECK(m.find("bf16") != std::string::npos);
    CHECK(m.find("(2, 4)") != std::string::npos);
  }
  // A family not ported to 16 bits (one still on REEL_DISPATCH_FLOATING) names itself.
  const auto unported = [](DType dt) { REEL_DISPATCH_FLOATING(dt, "unported_op", (void)sizeof(scalar_t)) };
  CHECK_THROWS_WITH_AS(unported(DType::bf16), doctest::Contains("unported_op: dtype bf16 is not supported"), Error);
}

TEST_CASE("the CPU's 16-bit GEMM path is chosen once and printable") {
  const std::string path = kernels::cpu_gemm16_path();
  CHECK(path.find("bf16: ") != std::string::npos);
  CHECK(path.find("f16: ") != std::string::npos);
  CHECK(kernels::cpu_gemm16_path() == kernels::cpu_gemm16_path());  // the same text, made once
}

TEST_CASE("TF32 on cuda: off by default; on, the f64 product of TF32-rounded inputs, not the f32 one") {
  CHECK_FALSE(allow_tf32());
  Tf32Guard guard;
  const int64_t M = 9, K = 64, N = 7;
  Generator gen(3);
  std::vector<float> av = randn({M, K}, DType::f32, Device::cpu(), &gen).to_vector<float>();
  std::vector<float> bv = randn({K, N}, DType::f32, Device::cpu(), &gen).to_vector<float>();
  // Row 0 of a all 1 + 2^-12 and column 0 of b all 1: TF32 rounds 1 + 2^-12 to 1 (10 fraction
  // bits), so element (0, 0) is K in TF32 and K (1 + 2^-12) = K + 1/64 in f32.
  for (int64_t k = 0; k < K; ++k) av[k] = 1.0f + 0x1p-12f, bv[k * N] = 1.0f;
  const Tensor a = from_vector<float>(av, {M, K}), b = from_vector<float>(bv, {K, N});
  std::vector<double> a64(av.begin(), av.end()), b64(bv.begin(), bv.end()), at, bt;
  for (float v : av) at.push_back(tf32(v));
  for (float v : bv) bt.push_back(tf32(v));
  const std::vector<double> plain = ref_matmul(a64, b64, M, K, N), rounded = ref_matmul(at, bt, M, K, N);
  // The f32 sums' error: K terms of |a b| ~ 1.
  const double atol = 4 * 0x1p-24 * K * 4;
  const auto max_diff = [](const std::vector<double>& x, const std::vector<double>& y) {
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
    return d;
  };
  CHECK(std::abs(plain[0] - rounded[0]) == doctest::Approx(K * 0x1p-12));  // the inputs show the difference
  // With a bias (on cuda cuBLASLt's bias epilogue, kernels/cuda/matmul.cu): the same product, the
  // bias (not rounded to TF32) added to each f32 sum.
  const Tensor bias = randn({N}, DType::f32, Device::cpu(), &gen);
  const std::vector<double> bias_v = values(bias);
  std::vector<double> plain_b = plain, rounded_b = rounded;
  for (int64_t i = 0; i < M * N; ++i) plain_b[i] += bias_v[i % N], rounded_b[i] += bias_v[i % N];
  for (Device dev : testing::devices()) {
    CAPTURE(dev);
    set_allow_tf32(false);
    const std::vector<double> off = values(kernels::matmul(a.to(dev), b.to(dev)));
    const std::vector<double> off_b = values(kernels::matmul(a.to(dev), b.to(dev), false, false, bias.to(dev)));
    CHECK(max_diff(off, plain) <= atol);
    CHECK(max_diff(off_b, plain_b) <= atol);
    set_allow_tf32(true);
    const std::vector<double> on = values(kernels::matmul(a.to(dev), b.to(dev)));
    const std::vector<double> on_b = values(kernels::matmul(a.to(dev), b.to(dev), false, false, bias.to(dev)));
    if (dev.is_cpu()) {  // the CPU has no TF32: the switch leaves its f32 GEMM alone
      CHECK(max_diff(on, off) == 0);
      CHECK(max_diff(on_b, off_b) == 0);
    } else {
      CHECK(max_diff(on, rounded) <= atol);
      CHECK(std::abs(on[0] - off[0]) >= K * 0x1p-12 / 2);
      CHECK(max_diff(on_b, rounded_b) <= atol);
      CHECK(std::abs(on_b[0] - off_b[0]) >= K * 0x1p-12 / 2);
    }
    set_allow_tf32(false);
  }
}
