// kernels/cuda/elementwise.cu: unary and its fused backward, binary and compare (with NumPy
// broadcasting), tensor-scalar ops and where. ONE grid-stride kernel, map_kernel, templated on a
// functor holding the op: the scalar math is op_kinds.h's unary_fn / unary_backward_fn /
// binary_fn / compare_fn / where_fn, the very functions the CPU loops call. Inputs arrive
// expanded to the output shape, so broadcasting is just stride 0 in an input's OffsetCalc; the
// output is contiguous, so its offset is the loop index. When every operand is contiguous (the
// common case) the kernel skips the index arithmetic altogether (the Contig template flag).
// Unary and binary math runs in the dispatch's acc_t (the functors convert each loaded T to acc_t
// and the result back: no-ops for f32 and f64; bf16 and f16 are widened to f32 and the result
// rounded once, RNE, by core/half.h's host+device conversions); comparisons and where are exact in
// T (a 16-bit value compares as its exact f32 widening; where copies an input's bits).
#include "kernels/backends.h"
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

// ---- the ops, as functors a kernel can take by value -------------------------------------------

template <UnaryOp op, typename acc_t>
struct UnaryFn {
  template <typename T> REEL_HOST_DEVICE T operator()(T x) const {
    return static_cast<T>(unary_fn<op>(static_cast<acc_t>(x)));
  }
};
template <UnaryOp op, typename acc_t>
struct UnaryBackwardFn {  // (dy, saved) -> dx
  template <typename T> REEL_HOST_DEVICE T operator()(T dy, T s) const {
    return static_cast<T>(unary_backward_fn<op>(static_cast<acc_t>(dy), static_cast<acc_t>(s)));
  }
};
template <BinaryOp op, typename acc_t>
struct BinaryFn {
  template <typename T> REEL_HOST_DEVICE T operator()(T a, T b) const {
    return static_cast<T>(binary_fn<op>(static_cast<acc_t>(a), static_cast<acc_t>(b)));
  }
};
template <BinaryOp op, typename T, typename acc_t, bool ScalarLeft>
struct BinaryScalarFn {  // s op x (ScalarLeft) or x op s; s already rounded to T, held as acc_t
  acc_t s;
  REEL_HOST_DEVICE T operator()(T x) const {
    const acc_t v = static_cast<acc_t>(x);
    return static_cast<T>(ScalarLeft ? binary_fn<op>(s, v) : binary_fn<op>(v, s));
  }
};
template <CompareOp op>
struct CompareFn {
  template <typename T> REEL_HOST_DEVICE T operator()(T a, T b) const { return T(compare_fn<op>(a, b)); }
};
template <CompareOp op, typename T>
struct CompareScalarFn {
  T s;
  REEL_HOST_DEVICE T operator()(T x) const { return T(compare_fn<op>(x, s)); }
};
struct WhereFn {
  template <typename T> REEL_HOST_DEVICE T operator()(T cond, T a, T b) const { return where_fn(cond, a, b); }
};

template <typename T, int N>
struct Inputs {
  const T* p[N];
};

// ---- kernel ------------------------------------------------------------------------------------

// out[i] = fn(in_0[calc(i)[0]], ..., in_{N-1}[calc(i)[N-1]]). out: (n) contiguous; the N inputs:
// any strides over out's shape (0 where broadcast).
template <typename Fn, typename T, int N, bool Contig>
__global__ void __launch_bounds__(kThreads) map_kernel(T* out, Inputs<T, N> in, int64_t n, OffsetCalc<N> calc, Fn fn) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t off[N];
    if (Contig) {
      for (int k = 0; k < N; ++k) off[k] = i;
    } else {
      calc.get(i, off);
    }
    if constexpr (N == 1) out[i] = fn(in.p[0][off[0]]);
    else if constexpr (N == 2) out[i] = fn(in.p[0][off[0]], in.p[1][off[1]]);
    else if constexpr (N == 3) out[i] = fn(in.p[0][off[0]], in.p[1][off[1]], in.p[2][off[2]]);
    else static_assert(dependent_false_v<N>, "map_kernel: 1 to 3 inputs");
  }
}

// ---- launcher ----------------------------------------------------------------------------------

// An OffsetCalc for inputs over out's shape; inputs whose dims do not coalesce into kMaxDims are
// made contiguous first (`inputs` then holds the copies).
template <int N>
OffsetCalc<N> input_calc(const Tensor& out, std::array<Tensor, N>& inputs) {
  OffsetCalc<N> calc;
  std::array<const Shape*, N> strides;
  for (int k = 0; k < N; ++k) strides[k] = &inputs[k].strides();
  if (make_offset_calc<N>(out.shape(), strides, calc)) return calc;
  for (int k = 0; k < N; ++k) {
    inputs[k] = untracked::contiguous(inputs[k]);
    strides[k] = &inputs[k].strides();
  }
  const bool ok = make_offset_calc<N>(out.shape(), strides, calc);
  REEL_CHECK(ok, "elementwise: cannot index shape ", out.shape());
  return calc;
}

// out = fn(inputs...) elementwise, through map_kernel; `name` is what the profiler shows.
template <typename T, int N, typename Fn>
void launch_map(const char* name, const Tensor& out, std::array<Tensor, N> in, Fn fn) {
  const OffsetCalc<N> calc = input_calc<N>(out, in);
  Inputs<T, N> ptrs;
  for (int k = 0; k < N; ++k) ptrs.p[k] = in[k].template data<T>();
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  if (calc.contiguous())
    launch(name, map_kernel<Fn, T, N, true>, grid, kThreads, 0, out.data<T>(), ptrs, n, calc, fn);
  else
    launch(name, map_kernel<Fn, T, N, false>, grid, kThreads, 0, out.data<T>(), ptrs, n, calc, fn);
}

template <UnaryOp op, typename T, typename acc_t>
void unary_launch(const Tensor& x, const Tensor& out) {
  launch_map<T, 1>("unary_kernel", out, {x}, UnaryFn<op, acc_t>{});
}

template <UnaryOp op, typename T, typename acc_t>
void unary_backward_launch(const Tensor& dy, const Tensor& saved, const Tensor& out) {
  launch_map<T, 2>("unary_backward_kernel", out, {dy, saved}, UnaryBackwardFn<op, acc_t>{});
}

template <BinaryOp op, typename T, typename acc_t>
void binary_launch(const Tensor& a, const Tensor& b, const Tensor& out) {
  launch_map<T, 2>("binary_kernel", out, {a, b}, BinaryFn<op, acc_t>{});
}

// The scalar is rounded to T first, as a tensor operand would be, then computed with in acc_t.
template <BinaryOp op, typename T, typename acc_t>
void scalar_launch(const Tensor& a, double s, bool scalar_left, const Tensor& out) {
  const acc_t sv = static_cast<acc_t>(static_cast<T>(s));
  if (scalar_left) launch_map<T, 1>("scalar_kernel", out, {a}, BinaryScalarFn<op, T, acc_t, true>{sv});
  else launch_map<T, 1>("scalar_kernel", out, {a}, BinaryScalarFn<op, T, acc_t, false>{sv});
}

template <CompareOp op, typename T>
void compare_launch(const Tensor& a, const Tensor& b, const Tensor& out) {
  launch_map<T, 2>("compare_kernel", out, {a, b}, CompareFn<op>{});
}

template <CompareOp op, typename T>
void compare_scalar_launch(const Tensor& a, double s, const Tensor& out) {
  launch_map<T, 1>("compare_scalar_kernel", out, {a}, CompareScalarFn<op, T>{static_cast<T>(s)});
}

template <typename T>
void where_launch(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  launch_map<T, 3>("where_kernel", out, {cond, a, b}, WhereFn{});
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), op_name(op), REEL_UNARY_SWITCH(op, unary_launch, x, out))
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_BINARY_SWITCH(op, binary_launch, a, b, out))
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_left, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_BINARY_SWITCH(op, scalar_launch, a, s, scalar_left, out))
}

void unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_UNARY_SWITCH(op, unary_backward_launch, dy, saved, out))
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_COMPARE_SWITCH(op, compare_launch, a, b, out))
}

void compare_scalar(CompareOp op, const Tensor& a, double s, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), op_name(op), REEL_COMPARE_SWITCH(op, compare_scalar_launch, a, s, out))
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "where", where_launch<scalar_t>(cond, a, b, out))
}

}  // namespace reel::kernels::cuda
