// Vec<S>: one SIMD register of S (float or double; Eigen's packet type for S, 16 floats on an
// AVX-512 build) with the arithmetic, comparisons and math functions that kernels/op_kinds.h's
// scalar formulas use, so that a CPU loop runs those very formulas a register at a time:
// unary_fn<op>(Vec<float>) is the formula the CUDA kernels and the CPU's strided loops run on one
// element. That keeps each op's math in one place (op_kinds.h) while the contiguous loops stay
// vectorised: exp, log, log1p and tanh are Eigen's packet functions (the ones its array
// expressions call), where Eigen has no packet form for S (tanh and log1p of double) each lane
// calls the std:: function.
//
// * Arithmetic (+ - * /, unary -) and sqrt, fabs: IEEE, exactly as on a scalar.
// * x > y, x < y: a VecMask (false where either is NaN, as the scalar compare); select_fn(mask, a,
//   b) picks a where the mask holds, the overload of op_kinds.h's select_fn(bool, a, b).
// * exp: flushed to exactly 0 below the normal range (kernels/cpu/exp_ftz.h: Eigen's packet exp
//   gives a tiny nonzero for exp(-inf)); the other functions: Eigen's packet accuracy (a few ulp).
// * Vec(s) broadcasts a scalar constant (op_kinds.h writes T(0.5), T(1), ...).
//
// vec_map / vec_map2 run a formula over contiguous arrays, two registers per step (two independent
// chains for the out-of-order core); the tail (n not a multiple of the register width) goes
// through a padded register, so an element's result does not depend on where
// it sits in its array.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "kernels/cpu/exp_ftz.h"

// On the loops below: inline everything they call. In a file of many instantiations (elementwise.cpp)
// GCC stopped inlining Eigen's packet tanh into the loop body, and a call per register (its
// argument spilled to memory) made GELU's backward slower than Eigen's own array loop.
#if defined(__GNUC__)
#define REEL_VEC_FLATTEN __attribute__((flatten))
#else
#define REEL_VEC_FLATTEN
#endif

namespace reel::kernels::cpu {

template <typename S>
struct Vec {
  using Packet = typename Eigen::internal::packet_traits<S>::type;
  static constexpr int kSize = Eigen::internal::unpacket_traits<Packet>::size;
  Packet p;

  Vec() = default;
  explicit Vec(Packet v) : p(v) {}
  template <typename N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, Packet>, int> = 0>
  explicit Vec(N s) : p(Eigen::internal::pset1<Packet>(static_cast<S>(s))) {}

  static Vec load(const S* a) { return Vec(Eigen::internal::ploadu<Packet>(a)); }
  void store(S* o) const { Eigen::internal::pstoreu(o, p); }
};

// Lanes where a comparison holds: all bits set, else 0 (Eigen's packet compare masks).
template <typename S>
struct VecMask {
  typename Vec<S>::Packet p;
};

template <typename S>
inline Vec<S> operator+(const Vec<S>& a, const Vec<S>& b) { return Vec<S>(Eigen::internal::padd(a.p, b.p)); }
template <typename S>
inline Vec<S> operator-(const Vec<S>& a, const Vec<S>& b) { return Vec<S>(Eigen::internal::psub(a.p, b.p)); }
template <typename S>
inline Vec<S> operator*(const Vec<S>& a, const Vec<S>& b) { return Vec<S>(Eigen::internal::pmul(a.p, b.p)); }
template <typename S>
inline Vec<S> operator/(const Vec<S>& a, const Vec<S>& b) { return Vec<S>(Eigen::internal::pdiv(a.p, b.p)); }
template <typename S>
inline Vec<S> operator-(const Vec<S>& a) { return Vec<S>(Eigen::internal::pnegate(a.p)); }

template <typename S>
inline VecMask<S> operator<(const Vec<S>& a, const Vec<S>& b) { return {Eigen::internal::pcmp_lt(a.p, b.p)}; }
template <typename S>
inline VecMask<S> operator>(const Vec<S>& a, const Vec<S>& b) { return {Eigen::internal::pcmp_lt(b.p, a.p)}; }

template <typename S>
inline Vec<S> select_fn(const VecMask<S>& m, const Vec<S>& a, const Vec<S>& b) {
  return Vec<S>(Eigen::internal::pselect(m.p, a.p, b.p));
}

// f applied to each lane (for functions Eigen has no packet form of, for S).
template <typename S, typename F>
inline Vec<S> lanewise(const Vec<S>& v, F f) {
  alignas(64) S a[Vec<S>::kSize];
  v.store(a);
  for (S& e : a) e = f(e);
  return Vec<S>::load(a);
}

template <typename S>
inline Vec<S> exp(const Vec<S>& x) {
  if constexpr (Eigen::internal::packet_traits<S>::HasExp && Eigen::internal::packet_traits<S>::HasCmp)
    return Vec<S>(ExpFtzOp<S>().packetOp(x.p));
  else
    return lanewise(x, ExpFtzOp<S>());
}
template <typename S>
inline Vec<S> log(const Vec<S>& x) {
  if constexpr (Eigen::internal::packet_traits<S>::HasLog) return Vec<S>(Eigen::internal::plog(x.p));
  else return lanewise(x, [](S e) { return std::log(e); });
}
template <typename S>
inline Vec<S> log1p(const Vec<S>& x) {
  if constexpr (Eigen::internal::packet_traits<S>::HasLog1p) return Vec<S>(Eigen::internal::plog1p(x.p));
  else return lanewise(x, [](S e) { return std::log1p(e); });
}
template <typename S>
inline Vec<S> tanh(const Vec<S>& x) {
  if constexpr (Eigen::internal::packet_traits<S>::HasTanh) return Vec<S>(Eigen::internal::ptanh(x.p));
  else return lanewise(x, [](S e) { return std::tanh(e); });
}
template <typename S>
inline Vec<S> sqrt(const Vec<S>& x) {
  if constexpr (Eigen::internal::packet_traits<S>::HasSqrt) return Vec<S>(Eigen::internal::psqrt(x.p));
  else return lanewise(x, [](S e) { return std::sqrt(e); });
}
template <typename S>
inline Vec<S> fabs(const Vec<S>& x) { return Vec<S>(Eigen::internal::pabs(x.p)); }

// o[i] = f(Vec a[i])[lane] for i < n: f a generic lambda over Vec<S> (a formula of op_kinds.h).
// o may be a (in place).
template <typename S, typename F>
REEL_VEC_FLATTEN inline void vec_map(const S* a, S* o, int64_t n, F f) {
  constexpr int64_t W = Vec<S>::kSize;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {  // two registers at a time: two independent chains in flight
    const Vec<S> y0 = f(Vec<S>::load(a + i)), y1 = f(Vec<S>::load(a + i + W));
    y0.store(o + i);
    y1.store(o + i + W);
  }
  for (; i + W <= n; i += W) f(Vec<S>::load(a + i)).store(o + i);
  if (i < n) {  // the tail in a register padded with 1 (inside every op's domain)
    alignas(64) S buf[W];
    std::fill_n(buf, W, S(1));
    std::copy(a + i, a + n, buf);
    f(Vec<S>::load(buf)).store(buf);
    std::copy(buf, buf + (n - i), o + i);
  }
}

// o[i] = f(Vec a[i], Vec b[i])[lane] for i < n; o may be a or b.
template <typename S, typename F>
REEL_VEC_FLATTEN inline void vec_map2(const S* a, const S* b, S* o, int64_t n, F f) {
  constexpr int64_t W = Vec<S>::kSize;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const Vec<S> y0 = f(Vec<S>::load(a + i), Vec<S>::load(b + i));
    const Vec<S> y1 = f(Vec<S>::load(a + i + W), Vec<S>::load(b + i + W));
    y0.store(o + i);
    y1.store(o + i + W);
  }
  for (; i + W <= n; i += W) f(Vec<S>::load(a + i), Vec<S>::load(b + i)).store(o + i);
  if (i < n) {
    alignas(64) S bufa[W], bufb[W];
    std::fill_n(bufa, W, S(1));
    std::fill_n(bufb, W, S(1));
    std::copy(a + i, a + n, bufa);
    std::copy(b + i, b + n, bufb);
    f(Vec<S>::load(bufa), Vec<S>::load(bufb)).store(bufa);
    std::copy(bufa, bufa + (n - i), o + i);
  }
}

}  // namespace reel::kernels::cpu
