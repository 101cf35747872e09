// The 16-bit floating storage types of DType::bf16 and DType::f16: reel::bf16 (bfloat16: 1 sign,
// 8 exponent, 7 fraction bits: f32's range, 8 significant bits) and reel::f16 (IEEE binary16:
// 1, 5, 10 bits; largest finite 65504, smallest subnormal 2^-24). Each is a uint16_t of bits,
// trivially copyable, usable in host code, in CUDA device code under nvcc and in the simt
// emulation (REEL_HOST_DEVICE), with conversions written here in integer bit code so that every
// build and device produces the same bits (no cuda_bf16.h intrinsics, no FTZ, no host F16C).
//
// Conversions:
// * to 16 bits (explicit constructors from float, double, integers and the other 16-bit type):
//   one rounding, to nearest with ties to even, as IEEE 754 converts: subnormal results exact
//   to the last bit (f16 down to 2^-24; bf16 down to 2^-133, f32 subnormals included), below half
//   the smallest subnormal -> signed 0, at or past the overflow threshold -> signed inf (f16:
//   65520 and up, the tie above 65504; bf16: past 0x1.fefp127 + half an ulp). From double and
//   from 64-bit integers the rounding is direct, not through f32 (no double rounding); f16 <-> bf16
//   goes through f32, which holds both exactly.
// * from 16 bits (implicit operator float): exact. double(x) is exact through it.
// * NaN: the sign and the top fraction bits (payload) are kept and the quiet bit set, both ways,
//   as x86 F16C and Arm FCVT do. So 16 -> f32 -> 16 gives back every bit pattern except a
//   signalling NaN, which comes back quieted (same sign and payload); there is no canonical NaN.
// bf16 and f16 take branch-free shortcuts both ways (bf16: a shift and an integer rounding add; f16:
// every case in 32-bit integers, one picked by selects), so that loops over 16-bit data vectorise;
// the general integer paths (from_f32_general, to_f32_general) are their reference in the tests.
// Only storage and conversion: no arithmetic operators. A kernel computes in float (the implicit
// conversion, AccType in core/dtype.h) and stores with bf16(x) / f16(x).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/host_device.h"  // REEL_HOST_DEVICE

// The f32 <-> 16-bit conversions are forced inline: in a file of many kernels GCC kept f16's out of
// line, and a call per element keeps a conversion loop from vectorising.
#if defined(__CUDACC__)
#define REEL_HALF_INLINE __forceinline__
#else
#define REEL_HALF_INLINE __attribute__((always_inline)) inline
#endif

namespace reel {

namespace half_detail {

REEL_HOST_DEVICE inline uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

REEL_HOST_DEVICE inline uint64_t bits_of(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}

REEL_HOST_DEVICE inline float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The position of the highest set bit of x (x != 0).
REEL_HOST_DEVICE inline int msb(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(static_cast<long long>(x));
#else
  return 63 - __builtin_clzll(x);
#endif
}

// The bits, without the sign, of the magnitude sig * 2^(e - P) (sig in [2^P, 2^(P+1)), so e is
// the value's unbiased exponent) in the format with E exponent and M fraction bits, rounded to
// nearest, ties to even: a normal, a subnormal (2^M, the smallest normal, when rounding carries
// into it), 0 below half the smallest subnormal, or infinity at or past the overflow threshold.
template <int E, int M>
REEL_HOST_DEVICE inline uint32_t round_magnitude(int e, uint64_t sig, int P) {
  constexpr int kBias = (1 << (E - 1)) - 1;
  constexpr uint32_t kInf = ((1u << E) - 1) << M;
  if (e > kBias) return kInf;
  const int below = 1 - kBias - e;  // > 0: the value is below the smallest normal, its result subnormal
  // The bits of sig below the result's last place: P - M for a normal, more for a subnormal.
  const int shift = P - M + (below > 0 ? below : 0);
  uint64_t kept;
  if (shift <= 0) {
    kept = sig << -shift;  // exact (a small integer)
  } else {
    if (shift > P + 1) return 0;  // below half the smallest subnormal
    kept = sig >> shift;
    const uint64_t rest = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (kept & 1))) ++kept;
  }
  if (below > 0) return static_cast<uint32_t>(kept);
  // kept carries the implicit bit at 2^M, so adding it to exponent - 1 lets a carry of the
  // rounding step into the next binade (and into infinity).
  const uint32_t out = (static_cast<uint32_t>(e + kBias - 1) << M) + static_cast<uint32_t>(kept);
  return out >= kInf ? kInf : out;
}

// NaN with the given sign, quiet, with the top fraction bits of `payload` (`bits` wide).
template <int E, int M>
REEL_HOST_DEVICE inline uint16_t quiet_nan(uint32_t sign, uint64_t payload, int bits) {
  constexpr uint32_t kInf = ((1u << E) - 1) << M;
  return static_cast<uint16_t>(sign | kInf | (1u << (M - 1)) | static_cast<uint32_t>(payload >> (bits - M)));
}

template <int E, int M>
REEL_HOST_DEVICE inline uint16_t from_f32_general(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t exp = (u >> 23) & 0xffu, frac = u & 0x7fffffu;
  if (exp == 0xffu) {
    if (frac != 0) return quiet_nan<E, M>(sign, frac, 23);
    return static_cast<uint16_t>(sign | (((1u << E) - 1) << M));
  }
  if (exp == 0) {  // zero or an f32 subnormal: frac * 2^-149
    if (frac == 0) return static_cast<uint16_t>(sign);
    const int p = msb(frac);
    return static_cast<uint16_t>(sign | round_magnitude<E, M>(p - 149, frac, p));
  }
  return static_cast<uint16_t>(sign | round_magnitude<E, M>(static_cast<int>(exp) - 127, frac | 0x800000u, 23));
}

template <int E, int M>
REEL_HOST_DEVICE REEL_HALF_INLINE uint16_t from_f32(float f) {
  if constexpr (E == 8 && M == 7) {
    const uint32_t u = bits_of(f);
    // bf16 shares f32's exponent field, so rounding the low 16 bits away is the whole conversion
    // for every non-NaN value (subnormals, the carry into the next binade and into infinity
    // included): adding 0x7fff plus the kept part's last bit rounds to nearest, ties to even.
    // Branch free, so a loop of these vectorises; the same bits as the general path below.
    const uint16_t rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const uint16_t nan = static_cast<uint16_t>((u >> 16) | 0x0040u);  // quieted, sign and payload kept
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  } else if constexpr (E == 5 && M == 10) {
    // f16: every case computed in 32-bit integers and one chosen by selects, no branch, so a loop
    // of these vectorises; the same bits as the general path below.
    const uint32_t u = bits_of(f);
    const uint32_t a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // quieted, payload kept
    // A normal f16 (|f| >= 2^-14): rebias the exponent (f32 127 -> f16 15) and round the low 13
    // bits away to nearest even; a carry past 65504's binade, and f32's inf, give 0x7c00 or more:
    // inf.
    const uint32_t r = a - 0x38000000u;
    const uint32_t normal_raw = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    const uint32_t normal = normal_raw < 0x7c00u ? normal_raw : 0x7c00u;
    // A subnormal f16 (|f| < 2^-14): the 24-bit significand in units of 2^-24 is significand >>
    // (126 - exponent), rounded to nearest even (a carry into 0x400 is the smallest normal, its
    // right encoding). Shifts of 25 and more round to zero; every shift is kept in 1..31, so that
    // the unused results (of normals, of tiny values) are computed without undefined behaviour.
    const uint32_t e = a >> 23;
    const uint32_t shift = e < 95u ? 31u : e <= 125u ? 126u - e : 1u;  // 1: unused (a normal), but defined
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    const uint32_t sub = (sig + (1u << (shift - 1u)) - 1u + ((sig >> shift) & 1u)) >> shift;  // < 2^31: no wrap
    // Narrowed before the selects, as bf16's: GCC vectorises selects of 16-bit values here.
    const uint16_t nan16 = static_cast<uint16_t>(sign | nan), normal16 = static_cast<uint16_t>(sign | normal);
    const uint16_t sub16 = static_cast<uint16_t>(sign | sub);
    return a > 0x7f800000u ? nan16 : a >= 0x38800000u ? normal16 : sub16;
  } else {
    return from_f32_general<E, M>(f);
  }
}

template <int E, int M>
REEL_HOST_DEVICE inline uint16_t from_f64(double d) {
  const uint64_t u = bits_of(d);
  const uint32_t sign = static_cast<uint32_t>(u >> 48) & 0x8000u;
  const uint32_t exp = static_cast<uint32_t>(u >> 52) & 0x7ffu;
  const uint64_t frac = u & ((uint64_t{1} << 52) - 1);
  if (exp == 0x7ffu) {
    if (frac != 0) return quiet_nan<E, M>(sign, frac, 52);
    return static_cast<uint16_t>(sign | (((1u << E) - 1) << M));
  }
  // A double subnormal (below 2^-1022) is far below half of either format's smallest subnormal.
  if (exp == 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | round_magnitude<E, M>(static_cast<int>(exp) - 1023, frac | (uint64_t{1} << 52), 52));
}

template <int E, int M, typename I>
REEL_HOST_DEVICE inline uint16_t from_int(I i) {
  bool negative = false;
  uint64_t mag = static_cast<uint64_t>(i);
  if constexpr (std::is_signed_v<I>) {
    negative = i < 0;
    if (negative) mag = uint64_t{0} - mag;  // |INT64_MIN| too
  }
  if (mag == 0) return 0;
  const int p = msb(mag);
  return static_cast<uint16_t>((negative ? 0x8000u : 0u) | round_magnitude<E, M>(p, mag, p));
}

template <int E, int M>
REEL_HOST_DEVICE inline float to_f32_general(uint16_t h) {
  constexpr int kBias = (1 << (E - 1)) - 1;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> M) & ((1u << E) - 1);
  const uint32_t frac = h & ((1u << M) - 1);
  if (exp == (1u << E) - 1) {  // inf, or NaN (quieted, payload kept)
    return float_of(sign | 0x7f800000u | (frac != 0 ? 0x400000u | (frac << (23 - M)) : 0u));
  }
  if (exp == 0) {
    if (frac == 0) return float_of(sign);
    const int p = msb(frac);
    const int e = p + 1 - kBias - M;  // the subnormal frac * 2^(1 - bias - M) is 1.x * 2^e
    if (e + 127 >= 1) return float_of(sign | static_cast<uint32_t>(e + 127) << 23 | ((frac << (23 - p)) & 0x7fffffu));
    return float_of(sign | (frac << (23 - M)));  // an f32 subnormal too (bf16 shares f32's exponents)
  }
  return float_of(sign | static_cast<uint32_t>(static_cast<int>(exp) - kBias + 127) << 23 | (frac << (23 - M)));
}

template <int E, int M>
REEL_HOST_DEVICE REEL_HALF_INLINE float to_f32(uint16_t h) {
  if constexpr (E == 8 && M == 7) {
    // Exact by a shift for every value (bf16 is f32's top half); a NaN gets the quiet bit.
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    return float_of((u & 0x7fffffffu) > 0x7f800000u ? u | 0x400000u : u);
  } else if constexpr (E == 5 && M == 10) {
    // f16: each case computed and one chosen by selects, no branch (a loop vectorises); the same
    // bits as the general path. A subnormal's frac * 2^-24 comes from an exact int -> float
    // conversion, scaled in its exponent bits: no float arithmetic, no flush-to-zero mode to mind.
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, frac = h & 0x3ffu;
    const uint32_t quiet = ((frac + 0x3ffu) >> 10) << 22;  // the quiet bit, for a NaN (frac != 0) only
    const uint32_t special = 0x7f800000u | quiet | (frac << 13);  // inf, or NaN quieted, payload kept
    const uint32_t normal = ((exp + 112u) << 23) | (frac << 13);
    // frac * 2^-24: frac converted exactly, its exponent field lowered by 24 (still >= 103: an f32
    // normal); for frac = 0 the wrapped difference is the larger one and the min keeps 0.
    const uint32_t whole = bits_of(static_cast<float>(static_cast<int32_t>(frac)));
    const uint32_t scaled = whole - (24u << 23);
    const uint32_t sub = scaled < whole ? scaled : whole;
    // Picked by masks rather than selects: GCC would move the (possibly trapping, to it) int ->
    // float conversion into a branch of the selects and then not vectorise.
    const uint32_t is_special = 0u - static_cast<uint32_t>(exp == 0x1fu), is_sub = 0u - static_cast<uint32_t>(exp == 0u);
    return float_of(sign | (special & is_special) | (sub & is_sub) | (normal & ~(is_special | is_sub)));
  } else {
    return to_f32_general<E, M>(h);
  }
}

}  // namespace half_detail

struct f16;

// bfloat16: the top half of an f32, rounded to nearest even.
struct bf16 {
  uint16_t bits;

  bf16() = default;
  REEL_HOST_DEVICE REEL_HALF_INLINE explicit bf16(float f) : bits(half_detail::from_f32<8, 7>(f)) {}
  REEL_HOST_DEVICE explicit bf16(double d) : bits(half_detail::from_f64<8, 7>(d)) {}
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  REEL_HOST_DEVICE explicit bf16(I i) : bits(half_detail::from_int<8, 7>(i)) {}
  REEL_HOST_DEVICE explicit bf16(f16 h);
  REEL_HOST_DEVICE REEL_HALF_INLINE operator float() const { return half_detail::to_f32<8, 7>(bits); }
  REEL_HOST_DEVICE static bf16 from_bits(uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }
};

// IEEE 754 binary16.
struct f16 {
  uint16_t bits;

  f16() = default;
  REEL_HOST_DEVICE REEL_HALF_INLINE explicit f16(float f) : bits(half_detail::from_f32<5, 10>(f)) {}
  REEL_HOST_DEVICE explicit f16(double d) : bits(half_detail::from_f64<5, 10>(d)) {}
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  REEL_HOST_DEVICE explicit f16(I i) : bits(half_detail::from_int<5, 10>(i)) {}
  REEL_HOST_DEVICE explicit f16(bf16 b) : f16(static_cast<float>(b)) {}
  REEL_HOST_DEVICE REEL_HALF_INLINE operator float() const { return half_detail::to_f32<5, 10>(bits); }
  REEL_HOST_DEVICE static f16 from_bits(uint16_t b) {
    f16 x;
    x.bits = b;
    return x;
  }
};

REEL_HOST_DEVICE inline bf16::bf16(f16 h) : bf16(static_cast<float>(h)) {}

static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "16-bit storage");
static_assert(std::is_trivially_copyable_v<bf16> && std::is_trivially_copyable_v<f16>, "copied as bytes");
static_assert(std::is_trivially_default_constructible_v<bf16> && std::is_trivially_default_constructible_v<f16>,
              "empty() leaves them uninitialised, as it does floats");

}  // namespace reel
