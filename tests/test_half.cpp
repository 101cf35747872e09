// The 16-bit dtypes bf16 and f16 (core/half.h): conversions against an independent reference for
// every class of value (normals, subnormals, zeros, infinities, NaNs, the overflow threshold, ties
// at several exponents), all 65536 bit patterns through f32 and back, the same bits from the CPU
// and the CUDA backend's conversion kernel, Tensor::to / copy_ / fills / printing, safetensors
// BF16 and F16 bytes and round trips, and batch_norm in 16 bits (f32 statistics, mixed dtypes
// refused with a reel::Error that names them).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "nn/safetensors.h"
#include "testing.h"

using namespace reel;

namespace {

float f32_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
double f64_of_bits(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

// The reference: a format described by its field widths, decoded with ldexp (independent of
// core/half.h's bit code), and rounding by search over every finite value of the format.
struct Format {
  int E, M;  // exponent and fraction bits
  int bias() const { return (1 << (E - 1)) - 1; }
  uint16_t inf() const { return static_cast<uint16_t>(((1u << E) - 1) << M); }
  bool is_nan(uint16_t h) const { return (h & 0x7fff) > inf(); }
  // The value of a non-NaN pattern, exactly (every 16-bit value is a double).
  double value(uint16_t h) const {
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    const int exp = (h >> M) & ((1 << E) - 1);
    const int frac = h & ((1 << M) - 1);
    if (exp == (1 << E) - 1) return sign * HUGE_VAL;
    if (exp == 0) return sign * std::ldexp(frac, 1 - bias() - M);
    return sign * std::ldexp((1 << M) + frac, exp - bias() - M);
  }
  // Round-to-nearest-even of a non-NaN double: the two neighbours among the finite values (or the
  // virtual next binade past the largest finite, which is infinity), compared with their exact
  // midpoint (M + 2 bits: a double).
  uint16_t round(double x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(x);
    const uint16_t top = static_cast<uint16_t>(inf() - 1);  // the largest finite
    // Past the largest finite the next "value" is 2^(bias + 1), whose pattern is inf's.
    uint16_t lo = 0, hi = top;
    if (a >= value(top)) {
      lo = top;
      hi = inf();
    } else {
      while (hi - lo > 1) {  // value(lo) <= a < value(hi)
        const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
        if (value(mid) <= a) lo = mid;
        else hi = mid;
      }
    }
    const double vhi = hi == inf() ? std::ldexp(1.0, bias() + 1) : value(hi);
    const double midpoint = (value(lo) + vhi) / 2;  // exact
    uint16_t r;
    if (a == value(lo)) r = lo;
    else if (a < midpoint) r = lo;
    else if (a > midpoint) r = hi;
    else r = (lo & 1) ? hi : lo;
    return static_cast<uint16_t>(sign | r);
  }
};
const Format kBF16{8, 7};
const Format kF16{5, 10};


template <typename H> uint16_t bits(float x) { return H(x).bits; }
template <typename H> uint16_t bits(double x) { return H(x).bits; }

// Tensor bits, as uint16 patterns.
std::vector<uint16_t> patterns(const Tensor& t) {
  REQUIRE(dtype_size(t.dtype()) == 2);
  Tensor host = t.to(Device::cpu()).contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * 2);
  return out;
}

Tensor from_patterns(const std::vector<uint16_t>& p, DType dt, Device d = Device::cpu()) {
  Tensor t = empty({static_cast<int64_t>(p.size())}, dt, Device::cpu());
  if (!p.empty()) std::memcpy(t.data_ptr(), p.data(), p.size() * 2);
  return t.to(d);
}

// For messages: a pattern in hex, a float or double in hex-float.
std::string hex(uint16_t h) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", h);
  return buf;
}
std::string hex(double x) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

std::vector<uint16_t> all_patterns() {
  std::vector<uint16_t> p(65536);
  for (uint32_t i = 0; i < 65536; ++i) p[i] = static_cast<uint16_t>(i);
  return p;
}

}  // namespace

TEST_CASE("the dtypes: sizes, names, floating, accumulation type") {
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
  CHECK(std::string(dtype_name(DType::f16)) == "f16");
  CHECK(is_floating(DType::bf16));
  CHECK(is_floating(DType::f16));
  CHECK(acc_dtype(DType::bf16) == DType::f32);
  CHECK(acc_dtype(DType::f16) == DType::f32);
  CHECK(dtype_of<bf16>::value == DType::bf16);
  CHECK(dtype_of<f16>::value == DType::f16);
  int seen = 0;
  dispatch_any(DType::bf16, [&](auto zero) { seen = std::is_same_v<decltype(zero), bf16> ? 1 : -1; });
  CHECK(seen == 1);
  dispatch_any(DType::f16, [&](auto zero) { seen = std::is_same_v<decltype(zero), f16> ? 2 : -1; });
  CHECK(seen == 2);
}

TEST_CASE("f16: every class of value, by its expected bits") {
  CHECK(bits<f16>(1.0f) == 0x3C00);
  CHECK(bits<f16>(-2.0f) == 0xC000);
  CHECK(bits<f16>(0.0f) == 0x0000);
  CHECK(bits<f16>(-0.0f) == 0x8000);
  CHECK(bits<f16>(65504.0f) == 0x7BFF);                  // largest finite
  CHECK(bits<f16>(65519.99f) == 0x7BFF);                 // below the tie to infinity
  CHECK(bits<f16>(65520.0f) == 0x7C00);                  // the tie: to even, which is infinity
  CHECK(bits<f16>(-65520.0f) == 0xFC00);
  CHECK(bits<f16>(1e10f) == 0x7C00);
  CHECK(bits<f16>(HUGE_VALF) == 0x7C00);
  CHECK(bits<f16>(-HUGE_VALF) == 0xFC00);
  CHECK(bits<f16>(std::ldexp(1.0f, -14)) == 0x0400);     // smallest normal
  CHECK(bits<f16>(std::ldexp(1023.0f, -24)) == 0x03FF);  // largest subnormal
  CHECK(bits<f16>(std::ldexp(1.0f, -24)) == 0x0001);     // smallest subnormal
  CHECK(bits<f16>(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(bits<f16>(std::ldexp(1.0f, -25)) == 0x0000);     // half of it: tie to even (0)
  CHECK(bits<f16>(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(bits<f16>(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 x smallest: tie to even (2)
  CHECK(bits<f16>(std::ldexp(2047.0f, -25)) == 0x0400);  // rounds up out of the subnormals
  CHECK(bits<f16>(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(bits<f16>(f32_of_bits(0x00000001)) == 0x0000);   // an f32 subnormal
  CHECK(bits<f16>(-f32_of_bits(0x00000001)) == 0x8000);
  // Ties to even at several exponents.
  CHECK(bits<f16>(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(bits<f16>(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);
  CHECK(bits<f16>(2049.0f) == 0x6800);
  CHECK(bits<f16>(2051.0f) == 0x6802);
  CHECK(bits<f16>(0.1f) == 0x2E66);
  CHECK(bits<f16>(std::ldexp(2049.0f, -21)) == 0x1400);  // 2^-10 * (1 + 2^-11): tie, even
  CHECK(bits<f16>(std::ldexp(2051.0f, -21)) == 0x1402);
  // NaN: quiet, sign and top payload bits kept.
  CHECK(bits<f16>(std::nanf("")) == 0x7E00);
  CHECK(bits<f16>(-std::nanf("")) == 0xFE00);
  CHECK(bits<f16>(f32_of_bits(0x7F802000)) == 0x7E01);   // signalling, payload in f16's last bit
  CHECK(bits<f16>(f32_of_bits(0x7F800001)) == 0x7E00);   // signalling, payload below f16's bits
  // Back to f32: exact.
  CHECK(static_cast<float>(f16::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(f16::from_bits(0x7BFF)) == 65504.0f);
  CHECK(std::isinf(static_cast<float>(f16::from_bits(0xFC00))));
  CHECK(bits_of_f32(f16::from_bits(0x8000)) == 0x80000000u);
  CHECK(bits_of_f32(f16::from_bits(0x7E01)) == 0x7FC02000u);
  CHECK(bits_of_f32(f16::from_bits(0x7C01)) == 0x7FC02000u);  // signalling: quieted, payload kept
}

TEST_CASE("bf16: every class of value, by its expected bits") {
  CHECK(bits<bf16>(1.0f) == 0x3F80);
  CHECK(bits<bf16>(-2.0f) == 0xC000);
  CHECK(bits<bf16>(-0.0f) == 0x8000);
  CHECK(bits<bf16>(0.1f) == 0x3DCD);
  CHECK(bits<bf16>(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie, even
  CHECK(bits<bf16>(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);
  CHECK(bits<bf16>(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3F81);
  CHECK(bits<bf16>(std::ldexp(257.0f, 100)) == 0x7580);     // tie at 2^108
  CHECK(bits<bf16>(std::ldexp(259.0f, -120)) == 0x0782);    // tie at 2^-112
  // Largest finite 0x1.FEp127; the f32 maximum (past the tie above it) and the tie round to inf.
  CHECK(bits<bf16>(f32_of_bits(0x7F7F0000)) == 0x7F7F);
  CHECK(bits<bf16>(f32_of_bits(0x7F7F7FFF)) == 0x7F7F);
  CHECK(bits<bf16>(f32_of_bits(0x7F7F8000)) == 0x7F80);
  CHECK(bits<bf16>(f32_of_bits(0x7F7FFFFF)) == 0x7F80);
  CHECK(bits<bf16>(f32_of_bits(0xFF7F8000)) == 0xFF80);
  CHECK(bits<bf16>(HUGE_VALF) == 0x7F80);
  CHECK(bits<bf16>(-HUGE_VALF) == 0xFF80);
  // Subnormals: f32's, rounded to 7 fraction bits.
  CHECK(bits<bf16>(f32_of_bits(0x00800000)) == 0x0080);  // smallest normal
  CHECK(bits<bf16>(std::ldexp(1.0f, -133)) == 0x0001);   // smallest subnormal
  CHECK(bits<bf16>(std::ldexp(1.0f, -134)) == 0x0000);   // half of it: tie to even
  CHECK(bits<bf16>(std::ldexp(3.0f, -134)) == 0x0002);
  CHECK(bits<bf16>(f32_of_bits(0x00018000)) == 0x0002);  // tie, odd below: up
  CHECK(bits<bf16>(f32_of_bits(0x00028000)) == 0x0002);  // tie, even below: stays
  CHECK(bits<bf16>(f32_of_bits(0x00008001)) == 0x0001);
  CHECK(bits<bf16>(f32_of_bits(0x007FFFFF)) == 0x0080);  // the largest f32 subnormal rounds up to normal
  CHECK(bits<bf16>(f32_of_bits(0x80000001)) == 0x8000);
  // NaN.
  CHECK(bits<bf16>(std::nanf("")) == 0x7FC0);
  CHECK(bits<bf16>(-std::nanf("")) == 0xFFC0);
  CHECK(bits<bf16>(f32_of_bits(0x7FA00000)) == 0x7FE0);  // signalling with payload: quieted, payload kept
  CHECK(bits<bf16>(f32_of_bits(0x7F800001)) == 0x7FC0);
  CHECK(bits_of_f32(bf16::from_bits(0x0001)) == 0x00010000u);
  CHECK(bits_of_f32(bf16::from_bits(0x7F81)) == 0x7FC10000u);
}

TEST_CASE("from double and from 64-bit integers: one rounding, not two through f32") {
  // 1 + 2^-11 + 2^-40: f32 keeps only 1 + 2^-11 (a tie for f16, which would go down).
  CHECK(bits<f16>(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3C01);
  CHECK(bits<bf16>(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) == 0x3F81);
  CHECK(bits<f16>(65519.999999) == 0x7BFF);
  CHECK(bits<f16>(65520.0) == 0x7C00);
  CHECK(bits<f16>(f64_of_bits(1)) == 0x0000);         // a double subnormal
  CHECK(bits<f16>(-f64_of_bits(1)) == 0x8000);
  CHECK(bits<bf16>(1e300) == 0x7F80);
  CHECK(bits<bf16>(std::ldexp(1.0, -134) * (1 + 1e-9)) == 0x0001);  // above the tie: up
  CHECK(f16(std::nan("")).bits == 0x7E00);
  // 2^62 + 2^54 + 1 is just above a bf16 tie; through double (53 bits) it would be the tie itself.
  CHECK(bf16(int64_t{(1LL << 62) + (1LL << 54) + 1}).bits == 0x5E81);
  CHECK(bf16(int64_t{(1LL << 62) + (1LL << 54)}).bits == 0x5E80);
  CHECK(bf16(INT64_MIN).bits == 0xDF00);
  CHECK(f16(int32_t{65519}).bits == 0x7BFF);
  CHECK(f16(int32_t{65520}).bits == 0x7C00);
  CHECK(f16(int32_t{-3}).bits == 0xC200);
  CHECK(f16(int32_t{0}).bits == 0x0000);
  CHECK(f16(int32_t{2049}).bits == 0x6800);
  // Between the two 16-bit types: through f32, which holds both exactly.
  CHECK(bf16(f16::from_bits(0x3C01)).bits == 0x3F80);  // 1 + 2^-10 to 7 bits
  CHECK(f16(bf16::from_bits(0x7F7F)).bits == 0x7C00);  // bf16's maximum overflows f16
  CHECK(f16(bf16::from_bits(0x0001)).bits == 0x0000);
  CHECK(static_cast<int32_t>(f16::from_bits(0xC200)) == -3);
  CHECK(static_cast<double>(bf16::from_bits(0x3DCD)) == static_cast<double>(f32_of_bits(0x3DCD0000)));
}

TEST_CASE("every 16-bit pattern to f32 and back: exact, signalling NaNs quieted") {
  for (const Format* fmt : {&kBF16, &kF16}) {
    CAPTURE(fmt->M);
    int mismatches = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const uint16_t h = static_cast<uint16_t>(i);
      const float f = fmt == &kBF16 ? static_cast<float>(bf16::from_bits(h)) : static_cast<float>(f16::from_bits(h));
      const uint16_t back = fmt == &kBF16 ? bf16(f).bits : f16(f).bits;
      const uint16_t back64 = fmt == &kBF16 ? bf16(static_cast<double>(f)).bits : f16(static_cast<double>(f)).bits;
      uint16_t want = h;
      bool ok;
      if (fmt->is_nan(h)) {
        want = static_cast<uint16_t>(h | (1u << (fmt->M - 1)));  // quieted
        ok = std::isnan(f) && std::signbit(f) == ((h & 0x8000) != 0) && (bits_of_f32(f) & 0x400000u);
      } else {
        ok = static_cast<double>(f) == fmt->value(h) && std::signbit(f) == ((h & 0x8000) != 0);
      }
      ok = ok && back == want && back64 == want;
      if (!ok && mismatches++ < 5) FAIL_CHECK("pattern " << hex(h) << ": f32 " << hex(f) << ", back " << hex(back));
    }
    CHECK(mismatches == 0);
  }
}

// Mismatches of the branch-free shortcut against the general integer path: every 65536-th f32
// pattern offset by each low half in `lows` and by a varying one, and every 16-bit pattern back to
// f32.
template <int E, int M>
int shortcut_mismatches(std::initializer_list<uint32_t> lows) {
  int bad = 0;
  for (uint64_t hi = 0; hi < 65536; ++hi) {
    auto check = [&](uint32_t lo) {
      const float f = f32_of_bits(static_cast<uint32_t>(hi << 16) | lo);
      const uint16_t fast = half_detail::from_f32<E, M>(f), general = half_detail::from_f32_general<E, M>(f);
      if (fast != general && bad++ < 5) FAIL_CHECK("f32 " << hex(f) << ": shortcut " << hex(fast) << ", general " << hex(general));
    };
    for (uint32_t lo : lows) check(lo);
    check(static_cast<uint32_t>(hi * 40503u) & 0xffffu);
    const uint16_t h = static_cast<uint16_t>(hi);
    const uint32_t fast = bits_of_f32(half_detail::to_f32<E, M>(h)), general = bits_of_f32(half_detail::to_f32_general<E, M>(h));
    if (fast != general && bad++ < 5) FAIL_CHECK("16-bit " << hex(h) << ": shortcut " << std::hex << fast << ", general " << general);
  }
  return bad;
}

TEST_CASE("bf16's branch-free shortcut gives the general integer path's bits") {
  // Low halves: ties, halfway-minus-one, NaN payloads in the low bits.
  CHECK(shortcut_mismatches<8, 7>({0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) == 0);
}

TEST_CASE("f16's branch-free shortcut gives the general integer path's bits") {
  // f16 keeps 10 of f32's 23 fraction bits: ties and their neighbours at bit 12 (normal results),
  // at bits 13-15 (subnormal results shifted by 14-16; larger shifts put the tie in the high
  // half, which the loop walks), with the kept last bit even and odd, and NaN payloads. Checked
  // once against all 2^32 f32 patterns when written (no mismatch); this is the quick version.
  CHECK(shortcut_mismatches<5, 10>({0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x3000u, 0x2000u, 0x4000u, 0x6000u,
                                    0x8000u, 0xa000u, 0x7fffu, 0xffffu}) == 0);
}

TEST_CASE("f32 and f64 to 16 bits against the reference, and cpu and cuda give the same bits") {
  std::mt19937_64 rng(27);
  const int n = 1 << 18;
  std::vector<float> xs(n);
  std::vector<double> ds(n);
  for (int i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0: xs[i] = f32_of_bits(static_cast<uint32_t>(rng())); break;  // any pattern: NaNs, huge, tiny
      case 1: xs[i] = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), static_cast<int>(rng() % 50) - 30); break;
      case 2: {  // exact ties and their neighbours for f16 and bf16
        const Format& fmt = (i & 4) ? kF16 : kBF16;
        const uint16_t h = static_cast<uint16_t>(rng() % fmt.inf());
        const double m = (fmt.value(h) + (h + 1 == fmt.inf() ? std::ldexp(1.0, fmt.bias() + 1) : fmt.value(h + 1))) / 2;
        const float t = static_cast<float>(m);
        const int wiggle = static_cast<int>(rng() % 3) - 1;
        xs[i] = wiggle == 0 ? t : std::nextafter(t, wiggle > 0 ? HUGE_VALF : 0.0f);
        if (rng() & 1) xs[i] = -xs[i];
        break;
      }
      default: xs[i] = f32_of_bits(static_cast<uint32_t>(rng() % 0x00800000u) | (rng() & 1 ? 0x80000000u : 0));  // f32 subnormals
    }
    // doubles: random patterns in the 16-bit ranges, with bits below f32's precision
    ds[i] = std::ldexp(static_cast<double>(rng() >> 11) / std::ldexp(1.0, 53), static_cast<int>(rng() % 180) - 150);
    if (rng() & 1) ds[i] = -ds[i];
  }
  const Tensor x = from_vector(xs, {n});
  const Tensor xd = from_vector(ds, {n});
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dt);
    const Format& fmt = dt == DType::bf16 ? kBF16 : kF16;
    for (Device d : reel::testing::devices()) {
      CAPTURE(d);
      const std::vector<uint16_t> got = patterns(x.to(d).to(dt));
      const std::vector<uint16_t> got64 = patterns(xd.to(d).to(dt));
      int bad = 0;
      for (int i = 0; i < n; ++i) {
        uint16_t want;
        if (std::isnan(xs[i])) {
          const uint32_t u = bits_of_f32(xs[i]);
          want = static_cast<uint16_t>(((u >> 16) & 0x8000u) | fmt.inf() | (1u << (fmt.M - 1)) | ((u & 0x7fffffu) >> (23 - fmt.M)));
        } else {
          want = fmt.round(xs[i]);
        }
        if (got[i] != want && bad++ < 5) FAIL_CHECK("f32 " << hex(xs[i]) << ": got " << hex(got[i]) << ", want " << hex(want));
        const uint16_t want64 = fmt.round(ds[i]);
        if (got64[i] != want64 && bad++ < 5)
          FAIL_CHECK("f64 " << hex(ds[i]) << ": got " << hex(got64[i]) << ", want " << hex(want64));
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("Tensor::to between every pair of dtypes, strided sources, cpu and cuda") {
  const std::vector<float> v{0.0f, -0.0f, 1.0f, -1.5f, 0.1f, 3.0f, 65504.0f, -7.0f, 1e-3f, 250.0f, 2.0f, -4.0f};
  const Tensor base = from_vector(v, {3, 4});
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    for (DType h : {DType::bf16, DType::f16}) {
      CAPTURE(h);
      const Format& fmt = h == DType::bf16 ? kBF16 : kF16;
      const Tensor x = base.to(d).to(h);
      CHECK(x.dtype() == h);
      CHECK(x.device() == d);
      CHECK(x.nbytes() == 24);
      std::vector<double> want;
      for (float f : v) want.push_back(fmt.value(fmt.round(f)));
      reel::testing::check_close(x.to(DType::f32), want, 0, 0);
      reel::testing::check_close(x.to(DType::f64), want, 0, 0);
      // A round trip through the wider types gives back the same bits.
      CHECK(patterns(x.to(DType::f32).to(h)) == patterns(x));
      CHECK(patterns(x.to(DType::f64).to(h)) == patterns(x));
      // Through the other 16-bit type and the integers.
      const DType other = h == DType::bf16 ? DType::f16 : DType::bf16;
      const Tensor ints = from_vector<int32_t>({-3, 0, 7, 255}, {4}).to(d);
      reel::testing::check_close(ints.to(h), {-3, 0, 7, 255}, 0, 0);
      reel::testing::check_close(ints.to(h).to(DType::i64), {-3, 0, 7, 255}, 0, 0);
      reel::testing::check_close(ints.to(h).to(other).to(h), {-3, 0, 7, 255}, 0, 0);
      // A transposed (strided) source, and a strided destination through copy_.
      const Tensor xt = x.t();
      reel::testing::check_close(xt.to(DType::f32), x.to(DType::f32).t(), 0, 0);
      reel::testing::check_close(base.to(d).t().to(h), x.t(), 0, 0);
      const Tensor dst = zeros({4, 3}, h, d);
      dst.t().copy_(base.to(d));  // f32 source into the 16-bit transposed view
      CHECK(patterns(dst.t().contiguous()) == patterns(x));
      // Across devices in the 16-bit dtype itself.
      CHECK(patterns(x.to(Device::cpu()).to(d)) == patterns(x));
      CHECK(x.to(h).same(x));
    }
  }
}

TEST_CASE("factories, item and printing of 16-bit tensors") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    CHECK(patterns(ones({3}, DType::bf16, d)) == std::vector<uint16_t>{0x3F80, 0x3F80, 0x3F80});
    CHECK(patterns(ones({2}, DType::f16, d)) == std::vector<uint16_t>{0x3C00, 0x3C00});
    CHECK(patterns(zeros({2}, DType::f16, d)) == std::vector<uint16_t>{0, 0});
    CHECK(patterns(full({2}, 0.1, DType::bf16, d)) == std::vector<uint16_t>{0x3DCD, 0x3DCD});
    CHECK(patterns(full({1}, 1e6, DType::f16, d)) == std::vector<uint16_t>{0x7C00});
    const Tensor t = full({2, 3}, 2.5, DType::f16, d);
    t.slice(1, 1, 3).fill_(-1.0);  // non-contiguous fill: through copy_
    CHECK(patterns(t) == std::vector<uint16_t>{0x4100, 0xBC00, 0xBC00, 0x4100, 0xBC00, 0xBC00});
    CHECK(scalar_tensor(0.1, DType::bf16, d).item() == static_cast<double>(f32_of_bits(0x3DCD0000)));
    CHECK(scalar_tensor(-3, DType::f16, d).item() == -3.0);
    CHECK(arange(4, DType::bf16, d).to(DType::f32).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
    const std::vector<bf16> hv{bf16(1.0f), bf16(-0.5f)};
    CHECK(from_vector(hv, {2}, d).to_vector<bf16>()[1].bits == 0xBF00);
    CHECK_REEL_ERROR(rand({2}, DType::bf16, d), "rand: dtype bf16 is not supported yet");
    CHECK_REEL_ERROR(randn({2}, DType::f16, d), "randn: dtype f16 is not supported yet");
  }
  const std::string s = from_vector<float>({1.0f, 0.1f, -65504.0f}, {3}).to(DType::f16).str();
  CHECK(s.find("[1, 0.09998, -6.55e+04]") != std::string::npos);
  CHECK(s.find("dtype=f16") != std::string::npos);
  const std::string b = from_vector<float>({1.0f, 0.1f}, {2}).to(DType::bf16).str();
  CHECK(b.find("[1, 0.1]") != std::string::npos);
  CHECK(b.find("dtype=bf16") != std::string::npos);
}

TEST_CASE("batch_norm, the last family ported: 16-bit y and gradients, f32 statistics, mixed dtypes refused") {
  // Every op family computes in 16 bits now (its rows in tests/op_table/; batchnorm's kernel rows in
  // norm.cpp). Through the tape op: x, w, b in the 16-bit type, the running statistics f32.
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    for (DType h : {DType::bf16, DType::f16}) {
      CAPTURE(h);
      const Tensor x0 = reel::testing::uniform_f64({4, 3, 2, 2}, 61, -2, 3).to(h);  // 16-bit values
      const Tensor w0 = reel::testing::uniform_f64({3}, 62, 0.5, 1.5).to(h), b0 = reel::testing::uniform_f64({3}, 63).to(h);
      const Tensor c0 = reel::testing::uniform_f64({4, 3, 2, 2}, 64).to(h);  // dL/dy
      auto run = [&](DType t) {  // the op on x0, w0, b0 in dtype t (exact widenings of the 16-bit values)
        const Tensor x = x0.to(t).to(d).set_requires_grad(), w = w0.to(t).to(d).set_requires_grad(),
                     b = b0.to(t).to(d).set_requires_grad();
        const Tensor rm = zeros({3}, DType::f32, d), rv = ones({3}, DType::f32, d);
        const Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1);
        autograd::backward(sum(y * c0.to(t).to(d)));
        return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad(), rm, rv};
      };
      const std::vector<Tensor> low = run(h), f32 = run(DType::f32);
      const double u = h == DType::bf16 ? 0x1p-8 : 0x1p-11;
      for (size_t i = 0; i < 4; ++i) {  // y and the gradients: 16-bit, the f32 run's values rounded
        CAPTURE(i);
        CHECK(low[i].dtype() == h);
        reel::testing::check_close(low[i], f32[i].to(DType::f64), 4 * u, 4 * u);
      }
      for (size_t i = 4; i < 6; ++i) {  // the running statistics: f32, the same double sums
        CHECK(low[i].dtype() == DType::f32);
        reel::testing::check_close(low[i], f32[i], 1e-6, 1e-6);
      }
      // x, w, b of one dtype; the statistics f32.
      const Tensor x = ones({2, 3, 2, 2}, h, d), w = ones({3}, h, d), rm = zeros({3}, DType::f32, d);
      const std::string name = dtype_name(h);
      CHECK_REEL_ERROR(batch_norm(x, rm, rm, ones({3}, DType::f32, d), w, true),
                       ("batch_norm: dtypes differ: " + name + " and f32").c_str());
      CHECK_REEL_ERROR(batch_norm(x, rm.to(h), rm.to(h), w, w, true),
                       ("batch_norm: running_mean (3) is " + name + " but x (2, 3, 2, 2) is " + name + ": f32 expected")
                           .c_str());
      autograd::Tape::current().clear();
    }
  }
}

TEST_CASE("safetensors: BF16 and F16 bytes as the format lays them out") {
  nn::TensorDict in;
  in["h"] = from_vector<float>({1.0f, -2.0f, 0.5f}, {3}).to(DType::f16);
  in["b"] = from_vector<float>({1.0f, -2.0f}, {1, 2}).to(DType::bf16);
  const std::string bytes = nn::to_safetensors_bytes(in);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian length
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  CHECK(header.rfind(R"({"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},)"
                     R"("h":{"dtype":"F16","shape":[3],"data_offsets":[4,10]}})", 0) == 0);
  CHECK(header.find_first_not_of(' ', header.find("}}") + 2) == std::string::npos);  // space padding
  REQUIRE(bytes.size() == 8 + n + 10);
  const unsigned char want[10] = {0x80, 0x3F, 0x00, 0xC0,                // bf16 1, -2 (little-endian)
                                  0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38};   // f16 1, -2, 0.5
  CHECK(std::memcmp(bytes.data() + 8 + n, want, 10) == 0);

  // A file built by hand, as another writer would.
  std::string json = R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"y":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  file += json;
  const unsigned char data[8] = {0x01, 0x00, 0xFF, 0x7B, 0x80, 0xBF, 0xC0, 0x7F};  // 2^-24, 65504, -1, NaN
  file.append(reinterpret_cast<const char*>(data), 8);
  const nn::TensorDict t = nn::from_safetensors_bytes(file);
  CHECK(t.at("x").dtype() == DType::f16);
  CHECK(t.at("y").dtype() == DType::bf16);
  CHECK(patterns(t.at("x")) == std::vector<uint16_t>{0x0001, 0x7BFF});
  CHECK(patterns(t.at("y")) == std::vector<uint16_t>{0xBF80, 0x7FC0});
  reel::testing::check_close(t.at("x"), {std::ldexp(1.0, -24), 65504.0}, 0, 0);
}

TEST_CASE("safetensors: every BF16 and F16 bit pattern round-trips through a file, on every device") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    nn::TensorDict in;
    in["bf16"] = from_patterns(all_patterns(), DType::bf16, d).view({256, 256});
    in["f16"] = from_patterns(all_patterns(), DType::f16, d);
    in["bf16_t"] = in["bf16"].t();  // non-contiguous: saved as its logical values
    const std::string path = "test_half_roundtrip.safetensors";
    nn::save_safetensors(path, in);
    const nn::TensorDict out = nn::load_safetensors(path, d);
    std::remove(path.c_str());
    CHECK(out.at("bf16").dtype() == DType::bf16);
    CHECK(out.at("bf16").shape() == Shape{256, 256});
    CHECK(out.at("f16").dtype() == DType::f16);
    CHECK(out.at("bf16").device() == d);
    CHECK(patterns(out.at("bf16")) == all_patterns());
    CHECK(patterns(out.at("f16")) == all_patterns());
    CHECK(patterns(out.at("bf16_t")) == patterns(in["bf16"].t().contiguous()));
  }
}
