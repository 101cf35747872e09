// CPU reductions. The caller permutes the input so that reduced dims trail; each output element
// then reduces one sub-tensor. When those sub-tensors are not contiguous runs (e.g. a column sum,
// the bias gradient of a linear layer), the input is copied contiguous first: one streaming pass
// beats strided access per output. f32 sums accumulate in double.
#include <limits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/strided_loop.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using Acc = double;  // accumulator for both f32 and f64

template <typename T>
void reduce_impl(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out) {
  const int64_t rank = x.dim();
  const int64_t kept = rank - reduced_dims;
  Shape red_shape(x.shape().begin() + kept, x.shape().end());
  Shape red_strides(x.strides().begin() + kept, x.strides().end());
  const int64_t R = shape_numel(red_shape);
  const int64_t O = out.numel();
  const T* src = x.data<T>();
  T* dst = out.data<T>();
  StridedLoop<1> inner(red_shape, {&red_strides});
  const Shape& xshape = x.shape();
  const Shape& xstrides = x.strides();

#pragma omp parallel for schedule(static) if (O > 1 && O * R >= (1 << 15))
  for (int64_t o = 0; o < O; ++o) {
    int64_t base = 0, rest = o;
    for (int64_t d = kept - 1; d >= 0; --d) {
      const int64_t i = rest % xshape[d];
      rest /= xshape[d];
      base += i * xstrides[d];
    }
    const T* p = src + base;
    if (op == ReduceOp::Max) {
      T m = -std::numeric_limits<T>::infinity();
      bool nan = false;
      for (int64_t r = 0; r < inner.runs(); ++r) {
        int64_t off = 0, rr = r;
        for (int64_t d = static_cast<int64_t>(inner.shape.size()) - 2; d >= 0; --d) {
          off += (rr % inner.shape[d]) * inner.strides[0][d];
          rr /= inner.shape[d];
        }
        const int64_t s = inner.strides[0].back();
        for (int64_t i = 0; i < inner.inner(); ++i) {
          const T v = p[off + i * s];
          nan |= v != v;
          m = v > m ? v : m;
        }
      }
      dst[o] = nan ? std::numeric_limits<T>::quiet_NaN() : m;
    } else {
      Acc<T> acc = 0;
      for (int64_t r = 0; r < inner.runs(); ++r) {
        int64_t off = 0, rr = r;
        for (int64_t d = static_cast<int64_t>(inner.shape.size()) - 2; d >= 0; --d) {
          off += (rr % inner.shape[d]) * inner.strides[0][d];
          rr /= inner.shape[d];
        }
        const int64_t s = inner.strides[0].back();
        const T* q = p + off;
        if (s == 1) {
          for (int64_t i = 0; i < inner.inner(); ++i) acc += q[i];
        } else {
          for (int64_t i = 0; i < inner.inner(); ++i) acc += q[i * s];
        }
      }
      dst[o] = static_cast<T>(op == ReduceOp::Mean ? acc / static_cast<Acc<T>>(R) : acc);
    }
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out) {
  if (out.numel() == 0) return;
  Tensor in = x;
  if (x.numel() > 0 && reduced_dims > 0) {
    Shape red_shape(x.shape().end() - reduced_dims, x.shape().end());
    Shape red_strides(x.strides().end() - reduced_dims, x.strides().end());
    StridedLoop<1> inner(red_shape, {&red_strides});
    if (inner.strides[0].back() != 1 && inner.inner() > 1) in = x.contiguous();
  }
  REEL_DISPATCH_FLOATING(x.dtype(), op_name(op), reduce_impl<scalar_t>(op, in, reduced_dims, out))
}

}  // namespace reel::kernels::cpu
