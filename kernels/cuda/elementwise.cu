// kernels/cuda/elementwise.cu: unary and its fused backward, binary and compare (with NumPy
// broadcasting), tensor-scalar ops and where. One grid-stride kernel per family, templated on
// the op: the scalar math is op_kinds.h's unary_fn / unary_backward_fn / binary_fn / compare_fn /
// where_fn, the very functions the CPU loops call. Inputs arrive expanded to the
// output shape, so broadcasting is just stride 0 in an input's OffsetCalc; the output is
// contiguous, so its offset is the loop index. When every operand is contiguous (the common
// case) the kernel skips the index arithmetic altogether (the Contig template flag).
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

// ---- kernels ---------------------------------------------------------------------------------

// out[i] = f(x[calc(i)]). out: (n) contiguous; x: any strides over out's shape.
template <UnaryOp op, typename T, bool Contig>
__global__ void unary_kernel(T* out, const T* x, int64_t n, OffsetCalc<1> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    if (Contig) {
      out[i] = unary_fn<op>(x[i]);
    } else {
      int64_t off[1];
      calc.get(i, off);
      out[i] = unary_fn<op>(x[off[0]]);
    }
  }
}

// out[i] = a[calc(i)[0]] op b[calc(i)[1]]. out: (n) contiguous; a, b: expanded to out's shape.
template <BinaryOp op, typename T, bool Contig>
__global__ void binary_kernel(T* out, const T* a, const T* b, int64_t n, OffsetCalc<2> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    if (Contig) {
      out[i] = binary_fn<op>(a[i], b[i]);
    } else {
      int64_t off[2];
      calc.get(i, off);
      out[i] = binary_fn<op>(a[off[0]], b[off[1]]);
    }
  }
}

// out[i] = s op a[calc(i)] (ScalarLeft) or a[calc(i)] op s.
template <BinaryOp op, typename T, bool Contig, bool ScalarLeft>
__global__ void scalar_kernel(T* out, const T* a, T s, int64_t n, OffsetCalc<1> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    T v;
    if (Contig) {
      v = a[i];
    } else {
      int64_t off[1];
      calc.get(i, off);
      v = a[off[0]];
    }
    out[i] = ScalarLeft ? binary_fn<op>(s, v) : binary_fn<op>(v, s);
  }
}

// dx[i] = dy * f'(s) at calc(i) (unary_backward_fn): GELU's and SiLU's backward in one pass.
template <UnaryOp op, typename T, bool Contig>
__global__ void unary_backward_kernel(T* out, const T* dy, const T* s, int64_t n, OffsetCalc<2> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    if (Contig) {
      out[i] = unary_backward_fn<op>(dy[i], s[i]);
    } else {
      int64_t off[2];
      calc.get(i, off);
      out[i] = unary_backward_fn<op>(dy[off[0]], s[off[1]]);
    }
  }
}

// out[i] = a op b ? 1 : 0, a and b at calc(i), expanded to out's shape.
template <CompareOp op, typename T, bool Contig>
__global__ void compare_kernel(T* out, const T* a, const T* b, int64_t n, OffsetCalc<2> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    if (Contig) {
      out[i] = T(compare_fn<op>(a[i], b[i]));
    } else {
      int64_t off[2];
      calc.get(i, off);
      out[i] = T(compare_fn<op>(a[off[0]], b[off[1]]));
    }
  }
}

// out[i] = a[calc(i)] op s ? 1 : 0.
template <CompareOp op, typename T, bool Contig>
__global__ void compare_scalar_kernel(T* out, const T* a, T s, int64_t n, OffsetCalc<1> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t off[1] = {i};
    if (!Contig) calc.get(i, off);
    out[i] = T(compare_fn<op>(a[off[0]], s));
  }
}

// out[i] = cond != 0 ? a : b, the three at calc(i), expanded to out's shape.
template <typename T, bool Contig>
__global__ void where_kernel(T* out, const T* cond, const T* a, const T* b, int64_t n, OffsetCalc<3> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    if (Contig) {
      out[i] = where_fn(cond[i], a[i], b[i]);
    } else {
      int64_t off[3];
      calc.get(i, off);
      out[i] = where_fn(cond[off[0]], a[off[1]], b[off[2]]);
    }
  }
}

// ---- launchers -------------------------------------------------------------------------------

// An OffsetCalc for inputs over out's shape; inputs whose dims do not coalesce into kMaxDims are
// made contiguous first (`inputs` then holds the copies).
template <int N>
OffsetCalc<N> input_calc(const Tensor& out, std::array<Tensor, N>& inputs) {
  OffsetCalc<N> calc;
  std::array<const Shape*, N> strides;
  for (int k = 0; k < N; ++k) strides[k] = &inputs[k].strides();
  if (make_offset_calc<N>(out.shape(), strides, calc)) return calc;
  for (int k = 0; k < N; ++k) {
    inputs[k] = inputs[k].contiguous();
    strides[k] = &inputs[k].strides();
  }
  const bool ok = make_offset_calc<N>(out.shape(), strides, calc);
  REEL_CHECK(ok, "elementwise: cannot index shape ", out.shape());
  return calc;
}

template <UnaryOp op, typename T>
void unary_launch(const Tensor& x_in, const Tensor& out) {
  std::array<Tensor, 1> in{x_in};
  const OffsetCalc<1> calc = input_calc<1>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  if (calc.contiguous())
    launch("unary_kernel", unary_kernel<op, T, true>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(), n, calc);
  else
    launch("unary_kernel", unary_kernel<op, T, false>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(), n, calc);
}

template <BinaryOp op, typename T>
void binary_launch(const Tensor& a, const Tensor& b, const Tensor& out) {
  std::array<Tensor, 2> in{a, b};
  const OffsetCalc<2> calc = input_calc<2>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  if (calc.contiguous())
    launch("binary_kernel", binary_kernel<op, T, true>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(),
           in[1].data<T>(), n, calc);
  else
    launch("binary_kernel", binary_kernel<op, T, false>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(),
           in[1].data<T>(), n, calc);
}

template <BinaryOp op, typename T>
void scalar_launch(const Tensor& a, double s, bool scalar_left, const Tensor& out) {
  std::array<Tensor, 1> in{a};
  const OffsetCalc<1> calc = input_calc<1>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  const T sv = static_cast<T>(s);
  T* po = out.data<T>();
  const T* pa = in[0].data<T>();
  if (calc.contiguous()) {
    if (scalar_left) launch("scalar_kernel", scalar_kernel<op, T, true, true>, grid, kThreads, 0, po, pa, sv, n, calc);
    else launch("scalar_kernel", scalar_kernel<op, T, true, false>, grid, kThreads, 0, po, pa, sv, n, calc);
  } else {
    if (scalar_left) launch("scalar_kernel", scalar_kernel<op, T, false, true>, grid, kThreads, 0, po, pa, sv, n, calc);
    else launch("scalar_kernel", scalar_kernel<op, T, false, false>, grid, kThreads, 0, po, pa, sv, n, calc);
  }
}

template <UnaryOp op, typename T>
void unary_backward_launch(const Tensor& dy, const Tensor& saved, const Tensor& out) {
  std::array<Tensor, 2> in{dy, saved};
  const OffsetCalc<2> calc = input_calc<2>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  if (calc.contiguous())
    launch("unary_backward_kernel", unary_backward_kernel<op, T, true>, grid, kThreads, 0, out.data<T>(),
           in[0].data<T>(), in[1].data<T>(), n, calc);
  else
    launch("unary_backward_kernel", unary_backward_kernel<op, T, false>, grid, kThreads, 0, out.data<T>(),
           in[0].data<T>(), in[1].data<T>(), n, calc);
}

template <CompareOp op, typename T>
void compare_launch(const Tensor& a, const Tensor& b, const Tensor& out) {
  std::array<Tensor, 2> in{a, b};
  const OffsetCalc<2> calc = input_calc<2>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  if (calc.contiguous())
    launch("compare_kernel", compare_kernel<op, T, true>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(),
           in[1].data<T>(), n, calc);
  else
    launch("compare_kernel", compare_kernel<op, T, false>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(),
           in[1].data<T>(), n, calc);
}

template <CompareOp op, typename T>
void compare_scalar_launch(const Tensor& a, double s, const Tensor& out) {
  std::array<Tensor, 1> in{a};
  const OffsetCalc<1> calc = input_calc<1>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  const T sv = static_cast<T>(s);
  if (calc.contiguous())
    launch("compare_scalar_kernel", compare_scalar_kernel<op, T, true>, grid, kThreads, 0, out.data<T>(),
           in[0].data<T>(), sv, n, calc);
  else
    launch("compare_scalar_kernel", compare_scalar_kernel<op, T, false>, grid, kThreads, 0, out.data<T>(),
           in[0].data<T>(), sv, n, calc);
}

template <typename T>
void where_launch(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  std::array<Tensor, 3> in{cond, a, b};
  const OffsetCalc<3> calc = input_calc<3>(out, in);
  const int64_t n = out.numel();
  const unsigned grid = grid_for(n, kThreads);
  if (calc.contiguous())
    launch("where_kernel", where_kernel<T, true>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(),
           in[1].data<T>(), in[2].data<T>(), n, calc);
  else
    launch("where_kernel", where_kernel<T, false>, grid, kThreads, 0, out.data<T>(), in[0].data<T>(),
           in[1].data<T>(), in[2].data<T>(), n, calc);
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(x.dtype(), op_name(op), REEL_UNARY_SWITCH(op, unary_launch, x, out))
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(out.dtype(), op_name(op), REEL_BINARY_SWITCH(op, binary_launch, a, b, out))
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_left, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(out.dtype(), op_name(op), REEL_BINARY_SWITCH(op, scalar_launch, a, s, scalar_left, out))
}

void unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(out.dtype(), op_name(op), REEL_UNARY_SWITCH(op, unary_backward_launch, dy, saved, out))
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(out.dtype(), op_name(op), REEL_COMPARE_SWITCH(op, compare_launch, a, b, out))
}

void compare_scalar(CompareOp op, const Tensor& a, double s, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(out.dtype(), op_name(op), REEL_COMPARE_SWITCH(op, compare_scalar_launch, a, s, out))
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING(out.dtype(), "where", where_launch<scalar_t>(cond, a, b, out))
}

}  // namespace reel::kernels::cuda
