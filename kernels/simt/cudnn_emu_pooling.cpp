// kernels/simt/cudnn_emu_pooling.cpp: host implementations of cudnn.h's pooling calls for the
// emulated build (descriptor, output dims, forward, backward). Like cudnn_emu.cpp it stands in for
// an independent library and shares no code with reel's CPU pooling (kernels/cpu/pool.cpp): each
// window is a clamped row and column range, and the backward finds, per dx element, the range of
// outputs whose window covers it by division (reel's kernels walk the window offsets instead).
// Every call checks its descriptors as cuDNN does and returns the status cuDNN would, writing
// nothing on a failure.
// Under simt::DryRun (reel's meta device) each call checks its arguments as ever and computes nothing.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cudnn_emu_internal.h"

struct cudnnPoolingStruct {
  bool set = false;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  int window[2] = {1, 1}, pad[2] = {0, 0}, stride[2] = {1, 1};
};

namespace {

using cudnn_emu::blend;
using cudnn_emu::read_scalar;
using cudnn_emu::supported_type;

bool is_max(cudnnPoolingMode_t m) { return m == CUDNN_POOLING_MAX || m == CUDNN_POOLING_MAX_DETERMINISTIC; }

// The sizes of one pooling: planes (n * c) of (H, W) in, (OH, OW) out, and the window.
struct Geom {
  int64_t planes, H, W, OH, OW;
  int64_t win[2], pad[2], stride[2];
  cudnnPoolingMode_t mode;
  bool propagate_nan;
  cudnnDataType_t type;
  // Window (oh, ow)'s rows [r0, r1) and columns [c0, c1), clamped to the input.
  void rows(int64_t oh, int64_t& r0, int64_t& r1) const {
    r0 = std::max<int64_t>(oh * stride[0] - pad[0], 0);
    r1 = std::min<int64_t>(oh * stride[0] - pad[0] + win[0], H);
  }
  void cols(int64_t ow, int64_t& c0, int64_t& c1) const {
    c0 = std::max<int64_t>(ow * stride[1] - pad[1], 0);
    c1 = std::min<int64_t>(ow * stride[1] - pad[1] + win[1], W);
  }
  // The average's divisor of window (oh, ow): the whole window or its part inside the input.
  int64_t divisor(int64_t oh, int64_t ow) const {
    if (mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING) return win[0] * win[1];
    int64_t r0, r1, c0, c1;
    rows(oh, r0, r1);
    cols(ow, c0, c1);
    return (r1 - r0) * (c1 - c0);
  }
};

// The output extent of `in` under a window, or 0 when the window exceeds the padded input.
int out_extent(int in, int pad, int window, int stride) {
  if (in + 2 * pad < window) return 0;
  return 1 + (in + 2 * pad - window) / stride;
}

cudnnStatus_t output_dims(const cudnnPoolingStruct* pool, const cudnnTensorStruct* x, int dims[4]) {
  if (!pool || !x) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!pool->set || !x->set) return CUDNN_STATUS_BAD_PARAM;
  dims[0] = x->n;
  dims[1] = x->c;
  dims[2] = out_extent(x->h, pool->pad[0], pool->window[0], pool->stride[0]);
  dims[3] = out_extent(x->w, pool->pad[1], pool->window[1], pool->stride[1]);
  return dims[2] > 0 && dims[3] > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

bool same_dims(const cudnnTensorStruct* t, const int dims[4]) {
  return t->n == dims[0] && t->c == dims[1] && t->h == dims[2] && t->w == dims[3];
}
bool same_dims(const cudnnTensorStruct* a, const cudnnTensorStruct* b) {
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w;
}

// x and y (the output, or for the backward also its gradient dy and x's gradient dx) against the
// descriptor and each other: set, y's dims pool's output of x's, one supported data type.
cudnnStatus_t check(const cudnnPoolingStruct* pool, const cudnnTensorStruct* x, const cudnnTensorStruct* y, Geom& g,
                    const cudnnTensorStruct* dy = nullptr, const cudnnTensorStruct* dx = nullptr,
                    bool backward = false) {
  int dims[4];
  const cudnnStatus_t s = output_dims(pool, x, dims);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!y || (backward && (!dy || !dx))) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!y->set || !same_dims(y, dims)) return CUDNN_STATUS_BAD_PARAM;
  if (backward && (!dy->set || !dx->set || !same_dims(dy, y) || !same_dims(dx, x))) return CUDNN_STATUS_BAD_PARAM;
  if (x->type != y->type || (backward && (dy->type != x->type || dx->type != x->type))) return CUDNN_STATUS_BAD_PARAM;
  if (!supported_type(x->type)) return CUDNN_STATUS_NOT_SUPPORTED;
  g = Geom{int64_t{x->n} * x->c,
           x->h,
           x->w,
           dims[2],
           dims[3],
           {pool->window[0], pool->window[1]},
           {pool->pad[0], pool->pad[1]},
           {pool->stride[0], pool->stride[1]},
           pool->mode,
           pool->nan == CUDNN_PROPAGATE_NAN,
           x->type};
  return CUDNN_STATUS_SUCCESS;
}

// The flat position (r * W + c) of window (oh, ow)'s maximum in plane xp: the first element in
// row-major order that is no smaller than every other (a NaN, if any and NaN propagates; NaN is
// skipped otherwise).
template <class T>
int64_t arg_max(const Geom& g, const T* xp, int64_t oh, int64_t ow) {
  int64_t r0, r1, c0, c1;
  g.rows(oh, r0, r1);
  g.cols(ow, c0, c1);
  int64_t best = r0 * g.W + c0;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const T v = xp[r * g.W + c], b = xp[best];
      if (b != b) {                                // the best so far is NaN
        if (g.propagate_nan) return best;          // it stays
        if (v == v) best = r * g.W + c;            // any number replaces it
      } else if (v > b || (g.propagate_nan && v != v)) {
        best = r * g.W + c;
        if (v != v) return best;
      }
    }
  return best;
}

// y (planes, OH, OW) = alpha * pool(x (planes, H, W)) + beta * y.
template <class T>
void forward(const Geom& g, const T* x, T* y, T alpha, T beta) {
  for (int64_t pl = 0; pl < g.planes; ++pl) {
    const T* xp = x + pl * g.H * g.W;
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        T v;
        if (is_max(g.mode)) {
          v = xp[arg_max(g, xp, oh, ow)];
        } else {
          int64_t r0, r1, c0, c1;
          g.rows(oh, r0, r1);
          g.cols(ow, c0, c1);
          T sum = 0;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) sum += xp[r * g.W + c];
          v = sum / static_cast<T>(g.divisor(oh, ow));
        }
        blend(y[(pl * g.OH + oh) * g.OW + ow], v, alpha, beta);
      }
  }
}

// dx (planes, H, W) = alpha * pool^T(dy (planes, OH, OW)) + beta * dx; x (and y, implied by x)
// read only by the max modes. Each dx element sums over the outputs [oh0, oh1) x [ow0, ow1) whose
// window covers it, in increasing output order.
template <class T>
void backward(const Geom& g, const T* dy, const T* x, T* dx, T alpha, T beta) {
  std::vector<int64_t> arg(is_max(g.mode) ? static_cast<size_t>(g.OH * g.OW) : 0);
  auto covering = [](int64_t i, int64_t win, int64_t pad, int64_t stride, int64_t O, int64_t& o0, int64_t& o1) {
    // o * stride - pad <= i < o * stride - pad + win
    const int64_t lo = i + pad - win + 1;
    o0 = lo <= 0 ? 0 : (lo + stride - 1) / stride;
    o1 = std::min<int64_t>((i + pad) / stride + 1, O);
  };
  for (int64_t pl = 0; pl < g.planes; ++pl) {
    const T* dyp = dy + pl * g.OH * g.OW;
    if (is_max(g.mode))
      for (int64_t o = 0; o < g.OH * g.OW; ++o) arg[o] = arg_max(g, x + pl * g.H * g.W, o / g.OW, o % g.OW);
    for (int64_t ih = 0; ih < g.H; ++ih) {
      int64_t oh0, oh1;
      covering(ih, g.win[0], g.pad[0], g.stride[0], g.OH, oh0, oh1);
      for (int64_t iw = 0; iw < g.W; ++iw) {
        int64_t ow0, ow1;
        covering(iw, g.win[1], g.pad[1], g.stride[1], g.OW, ow0, ow1);
        T sum = 0;
        for (int64_t oh = oh0; oh < oh1; ++oh)
          for (int64_t ow = ow0; ow < ow1; ++ow) {
            const int64_t o = oh * g.OW + ow;
            if (is_max(g.mode)) {
              if (arg[o] == ih * g.W + iw) sum += dyp[o];
            } else {
              sum += dyp[o] / static_cast<T>(g.divisor(oh, ow));
            }
          }
        blend(dx[(pl * g.H + ih) * g.W + iw], sum, alpha, beta);
      }
    }
  }
}

}  // namespace

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* poolingDesc) {
  if (!poolingDesc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *poolingDesc = new cudnnPoolingStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc) {
  delete poolingDesc;  // null is allowed, as in cuDNN
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t maxpoolingNanOpt, int windowHeight, int windowWidth,
                                          int verticalPadding, int horizontalPadding, int verticalStride,
                                          int horizontalStride) {
  if (!poolingDesc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (mode < CUDNN_POOLING_MAX || mode > CUDNN_POOLING_MAX_DETERMINISTIC) return CUDNN_STATUS_BAD_PARAM;
  if (maxpoolingNanOpt != CUDNN_NOT_PROPAGATE_NAN && maxpoolingNanOpt != CUDNN_PROPAGATE_NAN)
    return CUDNN_STATUS_BAD_PARAM;
  if (windowHeight <= 0 || windowWidth <= 0 || verticalPadding < 0 || horizontalPadding < 0 || verticalStride <= 0 ||
      horizontalStride <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  cudnnPoolingStruct& p = *poolingDesc;
  p.set = true;
  p.mode = mode;
  p.nan = maxpoolingNanOpt;
  p.window[0] = windowHeight, p.window[1] = windowWidth;
  p.pad[0] = verticalPadding, p.pad[1] = horizontalPadding;
  p.stride[0] = verticalStride, p.stride[1] = horizontalStride;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t poolingDesc,
                                                const cudnnTensorDescriptor_t inputTensorDesc, int* n, int* c, int* h,
                                                int* w) {
  if (!n || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  int dims[4];
  const cudnnStatus_t s = output_dims(poolingDesc, inputTensorDesc, dims);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  *n = dims[0], *c = dims[1], *h = dims[2], *w = dims[3];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc, const void* alpha,
                                  const cudnnTensorDescriptor_t xDesc, const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t yDesc, void* y) {
  if (!handle || !alpha || !beta || !x || !y) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(poolingDesc, xDesc, yDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const cudnn_emu::HostScalar sa(g.type, alpha), sb(g.type, beta);
  return cudnn_emu::call(handle, [=] {
    if (g.type == CUDNN_DATA_DOUBLE)
      forward(g, static_cast<const double*>(x), static_cast<double*>(y), read_scalar<double>(sa.ptr()),
              read_scalar<double>(sb.ptr()));
    else
      forward(g, static_cast<const float*>(x), static_cast<float*>(y), read_scalar<float>(sa.ptr()),
              read_scalar<float>(sb.ptr()));
  });
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                   const void* alpha, const cudnnTensorDescriptor_t yDesc, const void* y,
                                   const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                   const cudnnTensorDescriptor_t xDesc, const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dxDesc, void* dx) {
  if (!handle || !alpha || !beta || !y || !dy || !x || !dx) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(poolingDesc, xDesc, yDesc, g, dyDesc, dxDesc, true);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const cudnn_emu::HostScalar sa(g.type, alpha), sb(g.type, beta);
  return cudnn_emu::call(handle, [=] {
    if (g.type == CUDNN_DATA_DOUBLE)
      backward(g, static_cast<const double*>(dy), static_cast<const double*>(x), static_cast<double*>(dx),
               read_scalar<double>(sa.ptr()), read_scalar<double>(sb.ptr()));
    else
      backward(g, static_cast<const float*>(dy), static_cast<const float*>(x), static_cast<float*>(dx),
               read_scalar<float>(sa.ptr()), read_scalar<float>(sb.ptr()));
  });
}
