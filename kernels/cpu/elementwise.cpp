// CPU elementwise kernels: unary and its fused backward, binary and compare (inputs pre-expanded
// to the output shape), tensor-scalar, where. One StridedLoop; the innermost run is a plain loop
// the compiler vectorises when the strides are 1. The op math runs in the dispatch's acc_t (loads
// convert T -> acc_t, stores acc_t -> T); for f32 and f64 acc_t is T and the conversions vanish.
// Unary ops and their backward are kernels/op_kinds.h's formulas (unary_fn, unary_backward_fn),
// the same ones the CUDA kernels run: on one element in strided runs, and on a contiguous run a
// SIMD register at a time (T = kernels/cpu/vec.h's Vec, whose exp, log and tanh are Eigen's
// vectorised ones: glibc's scalar tanhf would make GELU compute-bound, not memory-bound), so a new
// unary op needs nothing here.
// bf16 and f16 (acc_t f32): each element widened to f32, computed, rounded once on store (RNE,
// core/half.h); their contiguous unary runs go a chunk at a time through an f32 buffer
// (kernels/cpu/half_simd.h's widen / narrow) and the f32 code, so a 16-bit result is the f32
// path's result rounded once. Comparisons and where compare the widened values (exact) and store
// 0, 1 or an input's bits.
#include <algorithm>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cpu/half_simd.h"  // kIs16, widen, narrow
#include "kernels/cpu/strided_loop.h"
#include "kernels/cpu/vec.h"

namespace reel::kernels::cpu {

namespace {

// Chunk of a 16-bit contiguous run widened into f32 stack buffers (fits in L1 with two inputs).
constexpr int64_t kWidenChunk = 256;

// f32 or f64 (acc_t is T): y = unary_fn(x) over a contiguous run, a register at a time.
template <UnaryOp op, typename T>
void unary_contiguous(const T* a, T* o, int64_t n) {
  vec_map(a, o, n, [](const Vec<T>& x) { return unary_fn<op>(x); });
}

// The same for bf16 / f16: a chunk widened to f32 in a stack buffer, the f32 code run on it in
// place, each result rounded once on store; a 16-bit result is the f32 path's on the widened input.
template <UnaryOp op, typename T>
void unary_contiguous_16(const T* a, T* o, int64_t n) {
  alignas(64) float buf[kWidenChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kWidenChunk) {
    const int64_t m = std::min(kWidenChunk, n - i0);
    widen(a + i0, buf, m);
    unary_contiguous<op, float>(buf, buf, m);
    narrow(buf, o + i0, m);
  }
}

// No special contiguous loop: the plain one (the compiler vectorises it).
struct PlainLoop {};

// out = f(a) elementwise, a any strides over out's shape. A contiguous run goes to
// contiguous(a, out, n) when given, else to a plain loop.
template <typename T, typename F, typename C = PlainLoop>
void map1(const Tensor& a, const Tensor& out, F f, C contiguous = {}) {
  const T* src = a.data<T>();
  T* dst = out.data<T>();
  StridedLoop<2> loop(out.shape(), {&out.strides(), &a.strides()});
  loop.for_each_run([&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t n) {
    T* o = dst + off[0];
    const T* x = src + off[1];
    if (st[0] == 1 && st[1] == 1) {
      if constexpr (std::is_same_v<C, PlainLoop>) {
        for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
      } else {
        contiguous(x, o, n);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]]);
    }
  });
}

// out = f(a, b) elementwise, a and b expanded to out's shape (stride 0 where broadcast). A
// contiguous run goes to contiguous(a, b, out, n) when given, else to a plain loop; runs against
// a broadcast scalar (a row plus a bias element) get their own loop.
template <typename T, typename F, typename C = PlainLoop>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F f, C contiguous = {}) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* dst = out.data<T>();
  StridedLoop<3> loop(out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  loop.for_each_run([&](const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& st, int64_t n) {
    T* o = dst + off[0];
    const T* x = pa + off[1];
    const T* y = pb + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      if constexpr (std::is_same_v<C, PlainLoop>) {
        for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
      } else {
        contiguous(x, y, o, n);
      }
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {  // row op broadcast scalar
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]], y[i * st[2]]);
    }
  });
}

template <UnaryOp op, typename T, typename acc_t>
void unary_loop(const Tensor& x, const Tensor& out) {
  map1<T>(
      x, out, [](T v) { return static_cast<T>(unary_fn<op>(static_cast<acc_t>(v))); },
      [](const T* a, T* o, int64_t n) {
        if constexpr (kIs16<T>) unary_contiguous_16<op>(a, o, n);
        else unary_contiguous<op, T>(a, o, n);
      });
}

template <BinaryOp op, typename T, typename acc_t>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out) {
  map2<T>(a, b, out, [](T x, T y) { return static_cast<T>(binary_fn<op>(static_cast<acc_t>(x), static_cast<acc_t>(y))); });
}

// The scalar is rounded to T first, as a tensor operand would be, then computed with in acc_t.
template <BinaryOp op, typename T, typename acc_t>
void scalar_loop(const Tensor& a, double s, bool scalar_left, const Tensor& out) {
  const acc_t sv = static_cast<acc_t>(static_cast<T>(s));
  if (scalar_left) map1<T>(a, out, [sv](T x) { return static_cast<T>(binary_fn<op>(sv, static_cast<acc_t>(x))); });
  else map1<T>(a, out, [sv](T x) { return static_cast<T>(binary_fn<op>(static_cast<acc_t>(x), sv)); });
}

// f32 or f64 (acc_t is T): dx = unary_backward_fn(dy, s) over a contiguous run, a register at a
// time.
template <UnaryOp op, typename T>
void unary_backward_contiguous(const T* dy, const T* s, T* dx, int64_t n) {
  vec_map2(dy, s, dx, n, [](const Vec<T>& g, const Vec<T>& x) { return unary_backward_fn<op>(g, x); });
}

// The same for bf16 / f16, as unary_contiguous_16: dy and s widened a chunk at a time, the f32
// code run on them (dx into dy's buffer), each result rounded once on store. An op whose backward
// reads nothing (UnarySaves::Nothing: neg) does not widen s: reading it cost a third of the time.
template <UnaryOp op, typename T>
void unary_backward_contiguous_16(const T* dy, const T* s, T* dx, int64_t n) {
  constexpr bool kReadsSaved = unary_saves(op) != UnarySaves::Nothing;
  alignas(64) float g[kWidenChunk], x[kWidenChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kWidenChunk) {
    const int64_t m = std::min(kWidenChunk, n - i0);
    widen(dy + i0, g, m);
    if constexpr (kReadsSaved) widen(s + i0, x, m);
    unary_backward_contiguous<op, float>(g, kReadsSaved ? x : g, g, m);
    narrow(g, dx + i0, m);
  }
}

template <UnaryOp op, typename T, typename acc_t>
void unary_backward_loop(const Tensor& dy, const Tensor& saved, const Tensor& out) {
  map2<T>(
      dy, saved, out,
      [](T g, T x) { return static_cast<T>(unary_backward_fn<op>(static_cast<acc_t>(g), static_cast<acc_t>(x))); },
      [](const T* g, const T* x, T* o, int64_t n) {
        if constexpr (kIs16<T>) unary_backward_contiguous_16<op>(g, x, o, n);
        else unary_backward_contiguous<op, T>(g, x, o, n);
      });
}

// Comparisons and where are exact in T: no acc_t.
template <CompareOp op, typename T>
void compare_loop(const Tensor& a, const Tensor& b, const Tensor& out) {
  map2<T>(a, b, out, [](T x, T y) { return T(compare_fn<op>(x, y)); });
}

template <CompareOp op, typename T>
void compare_scalar_loop(const Tensor& a, double s, const Tensor& out) {
  const T sv = static_cast<T>(s);
  map1<T>(a, out, [sv](T x) { return T(compare_fn<op>(x, sv)); });
}

template <typename T>
void where_loop(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const T* pc = cond.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* dst = out.data<T>();
  StridedLoop<4> loop(out.shape(), {&out.strides(), &cond.strides(), &a.strides(), &b.strides()});
  loop.for_each_run([&](const std::array<int64_t, 4>& off, const std::array<int64_t, 4>& st, int64_t n) {
    T* o = dst + off[0];
    const T* c = pc + off[1];
    const T* x = pa + off[2];
    const T* y = pb + off[3];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = where_fn(c[i], x[i], y[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 0) {  // where(mask, g, 0): b a scalar
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = where_fn(c[i], x[i], yv);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0 && st[3] == 1) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = where_fn(c[i], xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = where_fn(c[i * st[1]], x[i * st[2]], y[i * st[3]]);
    }
  });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), op_name(op), REEL_UNARY_SWITCH(op, unary_loop, x, out))
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_BINARY_SWITCH(op, binary_loop, a, b, out))
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_left, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_BINARY_SWITCH(op, scalar_loop, a, s, scalar_left, out))
}

void unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_UNARY_SWITCH(op, unary_backward_loop, dy, saved, out))
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_COMPARE_SWITCH(op, compare_loop, a, b, out))
}

void compare_scalar(CompareOp op, const Tensor& a, double s, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_COMPARE_SWITCH(op, compare_scalar_loop, a, s, out))
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "where", where_loop<scalar_t>(cond, a, b, out))
}

}  // namespace reel::kernels::cpu
