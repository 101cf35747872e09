// kernels/cpu/half_simd.h, the vector 16-bit conversions of the CPU kernels (layernorm, attention,
// elementwise), against core/half.h's general integer paths (to_f32_general, from_f32_general:
// the reference test_half.cpp checks against an independent ldexp decoding): every bf16 and f16
// pattern widened; narrowed, every midpoint between neighbouring 16-bit values with the f32 values
// on either side of it, the extremes, and a random sample. Through widen / narrow (vector bodies
// and scalar tails) and, on AVX-512 builds, load16 / store16 with partial masks. This file is
// compiled with the library's -march=native (tests/CMakeLists.txt), so it runs the same code paths
// (F16C, AVX-512) as the kernels.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/half_simd.h"
#include "testing.h"

using namespace reel;
using reel::kernels::cpu::narrow;
using reel::kernels::cpu::widen;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
std::string hex(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", u);
  return buf;
}
float of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
constexpr int kE = std::is_same_v<T, bf16> ? 8 : 5;
template <typename T>
constexpr int kM = std::is_same_v<T, bf16> ? 7 : 10;

// The f32 inputs to narrow: for every finite positive 16-bit value, the midpoint to the next one
// (exact in f32) and the f32 values just below and above it, the value itself; each with both signs;
// then infinities, NaNs (quiet and signalling, with payloads), the largest f32, and a random sample.
template <typename T>
std::vector<float> narrow_inputs() {
  std::vector<float> v;
  const uint16_t inf = static_cast<uint16_t>(((1u << kE<T>) - 1) << kM<T>);
  for (uint32_t h = 0; h < inf; ++h) {
    const float a = half_detail::to_f32_general<kE<T>, kM<T>>(static_cast<uint16_t>(h));
    // The next value up: the following pattern, or past the largest finite the virtual next binade.
    const float b = h + 1 < inf ? half_detail::to_f32_general<kE<T>, kM<T>>(static_cast<uint16_t>(h + 1))
                                : a + (a - half_detail::to_f32_general<kE<T>, kM<T>>(static_cast<uint16_t>(h - 1)));
    const float mid = a + (b - a) / 2;  // exact: 16-bit values have spare f32 bits
    for (float x : {a, mid, of_bits(bits(mid) - 1), of_bits(bits(mid) + 1)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fbfffffu,
                     0x7fffffffu, 0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000001u, 0x007fffffu})
    v.push_back(of_bits(u));
  std::mt19937 rng(42);
  for (int i = 0; i < 1 << 20; ++i) v.push_back(of_bits(static_cast<uint32_t>(rng())));
  return v;
}

template <typename T>
void check_widen() {
  std::vector<T> src(1 << 16);
  for (uint32_t h = 0; h < src.size(); ++h) src[h] = T::from_bits(static_cast<uint16_t>(h));
  std::vector<float> dst(src.size());
  // Whole, and from an odd offset with an odd count (scalar head of the next call, scalar tail).
  widen(src.data(), dst.data(), static_cast<int64_t>(src.size()));
  widen(src.data() + 5, dst.data() + 5, static_cast<int64_t>(src.size()) - 12);
  int bad = 0;
  for (uint32_t h = 0; h < src.size(); ++h)
    if (bits(dst[h]) != bits(half_detail::to_f32_general<kE<T>, kM<T>>(static_cast<uint16_t>(h))) && ++bad <= 5)
      FAIL_CHECK("widen of " << hex(h) << " gave " << hex(bits(dst[h])));
  CHECK(bad == 0);
#if defined(REEL_HALF_SIMD_AVX512)
  // load16 with every partial mask length: lanes past it read as 0.
  for (int64_t n = 0; n <= 16; ++n) {
    for (uint32_t h0 = 0; h0 < src.size(); h0 += 16) {
      alignas(64) float out[16];
      _mm512_store_ps(out, kernels::cpu::load16(src.data() + h0, kernels::cpu::lanes(n)));
      for (int64_t i = 0; i < 16; ++i) {
        const uint32_t want = i < n ? bits(half_detail::to_f32_general<kE<T>, kM<T>>(static_cast<uint16_t>(h0 + i))) : 0u;
        if (bits(out[i]) != want && ++bad <= 5) FAIL_CHECK("load16 of " << hex(static_cast<uint32_t>(h0 + i)) << " lanes " << n);
      }
    }
  }
  CHECK(bad == 0);
#endif
}

template <typename T>
void check_narrow() {
  const std::vector<float> in = narrow_inputs<T>();
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<T> out(in.size());
  narrow(in.data(), out.data(), n);
  narrow(in.data() + 3, out.data() + 3, n - 10);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (out[i].bits != half_detail::from_f32_general<kE<T>, kM<T>>(in[i]) && ++bad <= 5)
      FAIL_CHECK("narrow of " << hex(bits(in[i])) << " gave " << hex(out[i].bits));
  CHECK(bad == 0);
#if defined(REEL_HALF_SIMD_AVX512)
  // store16 with partial masks: lanes past the mask keep what was there.
  for (int64_t i0 = 0; i0 + 16 <= n; i0 += 16) {
    const int64_t lanes = i0 / 16 % 17;
    alignas(64) T got[16];
    for (T& g : got) g = T::from_bits(0x1234);
    kernels::cpu::store16(got, kernels::cpu::lanes(lanes), _mm512_loadu_ps(in.data() + i0));
    for (int64_t i = 0; i < 16; ++i) {
      const uint16_t want = i < lanes ? half_detail::from_f32_general<kE<T>, kM<T>>(in[i0 + i]) : 0x1234;
      if (got[i].bits != want && ++bad <= 5) FAIL_CHECK("store16 of " << hex(bits(in[i0 + i])));
    }
  }
  CHECK(bad == 0);
#endif
}

}  // namespace

TEST_CASE("half_simd: widen gives core/half.h's bits for every bf16 and f16 pattern") {
  check_widen<bf16>();
  check_widen<f16>();
}

TEST_CASE("half_simd: narrow gives core/half.h's bits at every rounding boundary, NaN and infinity") {
  check_narrow<bf16>();
  check_narrow<f16>();
}

TEST_CASE("half_simd: hand-checked patterns") {
  // 1 + 2^-8 is bf16's tie between 1 and 1 + 2^-7: to even (1); just above it rounds up. f16's
  // largest finite 65504 and the tie above it, 65520, which overflows; f16's smallest subnormal
  // 2^-24 and half of it (a tie to even: 0). Signalling NaNs come back quieted, payload kept.
  const float f[] = {1.00390625f, of_bits(0x3f808001u), 65504.0f, 65520.0f, 0x1p-24f, 0x1p-25f, of_bits(0x7f800001u)};
  bf16 b[7];
  f16 h[7];
  narrow(f, b, 7);
  narrow(f, h, 7);
  CHECK(b[0].bits == 0x3f80);
  CHECK(b[1].bits == 0x3f81);
  CHECK(b[6].bits == 0x7fc0);
  CHECK(h[2].bits == 0x7bff);
  CHECK(h[3].bits == 0x7c00);
  CHECK(h[4].bits == 0x0001);
  CHECK(h[5].bits == 0x0000);
  CHECK(h[6].bits == 0x7e00);
  const f16 hp[] = {f16::from_bits(0x7c01), f16::from_bits(0x0001), f16::from_bits(0x83ff)};
  float w[3];
  widen(hp, w, 3);
  CHECK(bits(w[0]) == 0x7fc02000u);
  CHECK(w[1] == 0x1p-24f);
  CHECK(w[2] == -1023 * 0x1p-24f);
}
