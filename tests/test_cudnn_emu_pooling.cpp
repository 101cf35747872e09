// cuDNN's pooling calls that reel makes (kernels/simt/cudnn.h, "Pooling") against cuDNN's API
// contract: descriptors that reject bad values with CUDNN_STATUS_BAD_PARAM, output dims, shape and
// type mismatches refused without writing, known small values of every mode forward and backward,
// alpha and beta honoured (beta == 0: the output is not read), NaN propagation, and a larger
// overlapping case against reel's CPU kernels in f64. In the host build this is the emulated
// cuDNN (kernels/simt/cudnn_emu_pooling.cpp); in the nvcc build the same cases run against the
// real library on a GPU, except the emulator's own choices (a max window's ties, a descriptor used
// before it is set), which sit under SIMT_EMULATE.
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/ops.h"
#include "testing.h"

#if defined(SIMT_EMULATE) || defined(REEL_HAVE_CUDNN)
#include "cudnn_testing.h"

using namespace reel;
using namespace reel::testing;

REEL_TEST_REQUIRES_CUDA();

namespace {

// A pooling descriptor: window, padding, stride as (along H, along W).
struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc(cudnnPoolingMode_t mode, std::array<int, 2> window, std::array<int, 2> pad, std::array<int, 2> stride,
           cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN) {
    REQUIRE(cudnnCreatePoolingDescriptor(&d) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetPooling2dDescriptor(d, mode, nan, window[0], window[1], pad[0], pad[1], stride[0], stride[1]) ==
            CUDNN_STATUS_SUCCESS);
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
};

void* ptr(const Tensor& t) { return t.dtype() == DType::f64 ? static_cast<void*>(t.data<double>()) : t.data<float>(); }

// The (1, 1, 3, 4) plane 0 1 2 3 / 4 5 6 7 / 8 9 10 11 on cuda in f64, and the window of the
// known-value cases: 2x2, padding 1, stride 2 -> (1, 1, 2, 3), windows rows {-1, 0}, {1, 2} and
// columns {-1, 0}, {1, 2}, {3, 4}: every input in exactly one window.
const Shape kX{1, 1, 3, 4}, kY{1, 1, 2, 3};
Tensor plane() {
  std::vector<double> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return from_vector<double>(v, kX).to(Device::cuda(0));
}

// y = pool(x) with alpha 1, beta 0 (y pre-filled with NaN: not read).
Tensor forward(const CudnnHandle& h, const PoolDesc& p, const Tensor& x, const Shape& ys) {
  const CudnnDesc xd(x.shape(), x.dtype()), yd(ys, x.dtype());
  const Tensor y = full(ys, std::nan(""), x.dtype(), x.device());
  const double one = 1, zero = 0;
  const float onef = 1, zerof = 0;
  const bool f64 = x.dtype() == DType::f64;
  REQUIRE(cudnnPoolingForward(h.h, p.d, f64 ? static_cast<const void*>(&one) : &onef, xd.d, ptr(x),
                              f64 ? static_cast<const void*>(&zero) : &zerof, yd.d, ptr(y)) == CUDNN_STATUS_SUCCESS);
  return y;
}
// dx = pool^T(dy) with alpha 1, beta 0 (dx pre-filled with NaN: not read).
Tensor backward(const CudnnHandle& h, const PoolDesc& p, const Tensor& x, const Tensor& y, const Tensor& dy) {
  const CudnnDesc xd(x.shape(), x.dtype()), yd(y.shape(), x.dtype());
  const Tensor dx = full(x.shape(), std::nan(""), x.dtype(), x.device());
  const double one = 1, zero = 0;
  const float onef = 1, zerof = 0;
  const bool f64 = x.dtype() == DType::f64;
  REQUIRE(cudnnPoolingBackward(h.h, p.d, f64 ? static_cast<const void*>(&one) : &onef, yd.d, ptr(y), yd.d, ptr(dy),
                               xd.d, ptr(x), f64 ? static_cast<const void*>(&zero) : &zerof, xd.d,
                               ptr(dx)) == CUDNN_STATUS_SUCCESS);
  return dx;
}

}  // namespace

TEST_CASE("cudnn pooling descriptors reject bad values with CUDNN_STATUS_BAD_PARAM; output dims") {
  cudnnPoolingDescriptor_t p = nullptr;
  REQUIRE(cudnnCreatePoolingDescriptor(&p) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnCreatePoolingDescriptor(nullptr) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, 0, 2, 0, 0, 1, 1) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, 2, 2, -1, 0, 1, 1) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 1, 0) ==
        CUDNN_STATUS_BAD_PARAM);
  // No unknown pooling or NaN mode is tried: both enums' values fill their range (0-3, 0-1) and, as
  // in cuDNN's own headers, have no fixed underlying type, so any other value is undefined behaviour.
  CHECK(cudnnSetPooling2dDescriptor(nullptr, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 1,
                                    1) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  // Window (3, 2), padding (1, 0), stride (2, 2) on (2, 3, 5, 7): OH = 1 + (5 + 2 - 3) / 2 = 3,
  // OW = 1 + (7 - 2) / 2 = 3 (the floor formula: cuDNN has no ceil mode).
  REQUIRE(cudnnSetPooling2dDescriptor(p, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, CUDNN_PROPAGATE_NAN, 3, 2, 1, 0,
                                      2, 2) == CUDNN_STATUS_SUCCESS);
  const CudnnDesc x({2, 3, 5, 7}, DType::f32), small({1, 1, 1, 1}, DType::f32);
  int n = 0, c = 0, h = 0, w = 0;
  REQUIRE(cudnnGetPooling2dForwardOutputDim(p, x.d, &n, &c, &h, &w) == CUDNN_STATUS_SUCCESS);
  CHECK((n == 2 && c == 3 && h == 3 && w == 3));
  // A 1x1 input padded by (1, 0) is (3, 1): narrower than the window's 2 columns.
  CHECK(cudnnGetPooling2dForwardOutputDim(p, small.d, &n, &c, &h, &w) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnGetPooling2dForwardOutputDim(p, x.d, nullptr, &c, &h, &w) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(cudnnDestroyPoolingDescriptor(p) == CUDNN_STATUS_SUCCESS);
#if defined(SIMT_EMULATE)  // a descriptor used before it is set: the emulator refuses it
  cudnnPoolingDescriptor_t unset = nullptr;
  REQUIRE(cudnnCreatePoolingDescriptor(&unset) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetPooling2dForwardOutputDim(unset, x.d, &n, &c, &h, &w) == CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyPoolingDescriptor(unset);
#endif
}

TEST_CASE("cudnn pooling: known values of every mode, forward and backward") {
  CudnnHandle h;
  const Tensor x = plane();
  const PoolDesc mx(CUDNN_POOLING_MAX_DETERMINISTIC, {2, 2}, {1, 1}, {2, 2});
  const PoolDesc incl(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, {2, 2}, {1, 1}, {2, 2});
  const PoolDesc excl(CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, {2, 2}, {1, 1}, {2, 2});
  // Windows: {0}, {1, 2}, {3}, {4, 8}, {5, 6, 9, 10}, {7, 11}.
  const Tensor ym = forward(h, mx, x, kY), yi = forward(h, incl, x, kY), ye = forward(h, excl, x, kY);
  CHECK(values(ym) == std::vector<double>{0, 2, 3, 8, 10, 11});
  CHECK(values(yi) == std::vector<double>{0, 0.75, 0.75, 3, 7.5, 4.5});  // sums / 4
  CHECK(values(ye) == std::vector<double>{0, 1.5, 3, 6, 7.5, 9});        // sums / inputs in the window
  const Tensor dy = from_vector<double>({1, 2, 3, 4, 5, 6}, kY).to(Device::cuda(0));
  // max: each dy to its window's maximum.
  CHECK(values(backward(h, mx, x, ym, dy)) == std::vector<double>{1, 0, 2, 3, 0, 0, 0, 0, 4, 0, 5, 6});
  // include padding: dy / 4 to each input of the window.
  const Tensor four = full(kY, 4.0, DType::f64, Device::cuda(0));
  CHECK(values(backward(h, incl, x, yi, four)) == std::vector<double>(12, 1.0));
  // exclude padding: dy / (inputs in the window).
  CHECK(values(backward(h, excl, x, ye, four)) == std::vector<double>{4, 2, 2, 4, 2, 1, 1, 2, 2, 1, 1, 2});
  // f32 as f64.
  const Tensor xf = x.to(DType::f32);
  CHECK(values(forward(h, excl, xf, kY)) == values(ye));
}

TEST_CASE("cudnn pooling honours alpha and beta; beta == 0 does not read the output") {
  CudnnHandle h;
  const Device cuda = Device::cuda(0);
  const Tensor x = plane();
  const PoolDesc excl(CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, {2, 2}, {1, 1}, {2, 2});
  const CudnnDesc xd(kX, DType::f64), yd(kY, DType::f64);
  const double alpha = 2, beta = 0.5, zero = 0;
  const Tensor y = full(kY, 10.0, DType::f64, cuda);
  REQUIRE(cudnnPoolingForward(h.h, excl.d, &alpha, xd.d, ptr(x), &beta, yd.d, ptr(y)) == CUDNN_STATUS_SUCCESS);
  CHECK(values(y) == std::vector<double>{5, 8, 11, 17, 20, 23});  // 2 * {0, 1.5, 3, 6, 7.5, 9} + 5
  const Tensor dy = full(kY, 4.0, DType::f64, cuda), dx = full(kX, 1.0, DType::f64, cuda);
  REQUIRE(cudnnPoolingBackward(h.h, excl.d, &alpha, yd.d, ptr(y), yd.d, ptr(dy), xd.d, ptr(x), &beta, xd.d, ptr(dx)) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(values(dx) == std::vector<double>{8.5, 4.5, 4.5, 8.5, 4.5, 2.5, 2.5, 4.5, 4.5, 2.5, 2.5, 4.5});
  // beta == 0: a NaN-filled output is overwritten, not blended.
  const Tensor fresh = full(kY, std::nan(""), DType::f64, cuda);
  REQUIRE(cudnnPoolingForward(h.h, excl.d, &alpha, xd.d, ptr(x), &zero, yd.d, ptr(fresh)) == CUDNN_STATUS_SUCCESS);
  CHECK(values(fresh) == std::vector<double>{0, 3, 6, 12, 15, 18});
}

TEST_CASE("cudnn pooling refuses mismatched descriptors with CUDNN_STATUS_BAD_PARAM, writing nothing") {
  CudnnHandle h;
  const Device cuda = Device::cuda(0);
  const Tensor x = plane();
  const PoolDesc mx(CUDNN_POOLING_MAX_DETERMINISTIC, {2, 2}, {1, 1}, {2, 2});
  const CudnnDesc xd(kX, DType::f64), yd(kY, DType::f64), wrong({1, 1, 2, 4}, DType::f64), yf(kY, DType::f32);
  const double one = 1, zero = 0;
  const Tensor y = full({1, 1, 2, 4}, 7.0, DType::f64, cuda);
  CHECK(cudnnPoolingForward(h.h, mx.d, &one, xd.d, ptr(x), &zero, wrong.d, ptr(y)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(values(y) == std::vector<double>(8, 7.0));
  CHECK(cudnnPoolingForward(h.h, mx.d, &one, xd.d, ptr(x), &zero, yf.d, ptr(y)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(values(y) == std::vector<double>(8, 7.0));
  CHECK(cudnnPoolingForward(h.h, mx.d, &one, xd.d, ptr(x), &zero, yd.d, nullptr) ==
        CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  // Backward: dy not shaped like y, or dx not like x.
  const Tensor ys = forward(h, mx, x, kY), dx = full(kX, 7.0, DType::f64, cuda);
  const CudnnDesc dx_wrong({1, 1, 3, 5}, DType::f64);
  CHECK(cudnnPoolingBackward(h.h, mx.d, &one, yd.d, ptr(ys), wrong.d, ptr(y), xd.d, ptr(x), &zero, xd.d, ptr(dx)) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnPoolingBackward(h.h, mx.d, &one, yd.d, ptr(ys), yd.d, ptr(ys), xd.d, ptr(x), &zero, dx_wrong.d,
                             ptr(dx)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(values(dx) == std::vector<double>(12, 7.0));
}

TEST_CASE("cudnn max pooling: NaN propagates or is skipped as the descriptor says") {
  CudnnHandle h;
  const double nan = std::nan("");
  // (1, 1, 2, 2), one 2x2 window: 1 NaN / 3 2.
  const Tensor x = from_vector<double>({1, nan, 3, 2}, {1, 1, 2, 2}).to(Device::cuda(0));
  const PoolDesc propagate(CUDNN_POOLING_MAX_DETERMINISTIC, {2, 2}, {0, 0}, {1, 1}, CUDNN_PROPAGATE_NAN);
  const PoolDesc skip(CUDNN_POOLING_MAX_DETERMINISTIC, {2, 2}, {0, 0}, {1, 1}, CUDNN_NOT_PROPAGATE_NAN);
  CHECK(std::isnan(values(forward(h, propagate, x, {1, 1, 1, 1}))[0]));
  const Tensor y = forward(h, skip, x, {1, 1, 1, 1});
  CHECK(values(y) == std::vector<double>{3});
  const Tensor dy = full({1, 1, 1, 1}, 5.0, DType::f64, Device::cuda(0));
  CHECK(values(backward(h, skip, x, y, dy)) == std::vector<double>{0, 0, 5, 0});
#if defined(SIMT_EMULATE)  // ties: the emulator routes dy to the first maximum, as its forward picks
  const Tensor ties = full({1, 1, 2, 2}, 1.0, DType::f64, Device::cuda(0));
  CHECK(values(backward(h, skip, ties, forward(h, skip, ties, {1, 1, 1, 1}), dy)) ==
        std::vector<double>{5, 0, 0, 0});
#endif
}

TEST_CASE("cudnn pooling with overlapping windows agrees with reel's CPU kernels in f64") {
  CudnnHandle h;
  const Shape xs{2, 3, 7, 6}, ys{2, 3, 7, 6};  // 3x3, padding 1, stride 1: the same size
  const Tensor x = uniform_f64(xs, 90, -2, 2), dy = uniform_f64(ys, 91);
  const Tensor xc = x.to(Device::cuda(0)), dyc = dy.to(Device::cuda(0));
  for (bool include : {true, false}) {
    CAPTURE(include);
    kernels::Pool2d p{{3, 3}, {1, 1}, {1, 1}, {1, 1}};
    p.count_include_pad = include;
    const PoolDesc d(include ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                     {3, 3}, {1, 1}, {1, 1});
    const Tensor y = forward(h, d, xc, ys);
    check_close(y, values(kernels::avg_pool2d_forward(x, p)), 1e-13, 1e-13);
    check_close(backward(h, d, xc, y, dyc), values(kernels::avg_pool2d_backward(dy, xs, p)), 1e-13, 1e-13);
  }
  const kernels::Pool2d p{{3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const PoolDesc d(CUDNN_POOLING_MAX_DETERMINISTIC, {3, 3}, {1, 1}, {1, 1});
  const kernels::MaxPool2dForward ref = kernels::max_pool2d_forward(x, p);
  const Tensor y = forward(h, d, xc, ys);
  CHECK(values(y) == values(ref.y));  // no ties in uniform draws
  CHECK(values(backward(h, d, xc, y, dyc)) == values(kernels::max_pool2d_backward(dy, ref.indices, xs, p)));
}

#endif  // SIMT_EMULATE || REEL_HAVE_CUDNN
