// The cuDNN subset reel calls (kernels/simt/cudnn.h) against cuDNN's API contract: descriptors that
// reject bad values with CUDNN_STATUS_BAD_PARAM, output dims, shape mismatches refused without
// writing, algorithm enumeration with statuses and workspace sizes, every algorithm that runs
// computing the convolution (checked against reel's CPU kernels in f64) with alpha and beta honoured,
// the CONVOLUTION mode's flipped filter, the bias calls, bf16 and f16 data with a FLOAT compute type
// (the f32 result on widened data, rounded once). In the host build this is the emulated
// cuDNN (kernels/simt/cudnn_emu.cpp); in the nvcc build the same cases run against the real library
// on a GPU, except the checks of choices that are the emulator's own (its algorithm list and
// workspace sizes), which sit under SIMT_EMULATE.
#include <cmath>
#include <limits>

#include "kernels/backends.h"
#include "kernels/ops.h"
#include "testing.h"

#if defined(SIMT_EMULATE) || defined(REEL_HAVE_CUDNN)
#include "cudnn_testing.h"

using namespace reel;
using namespace reel::testing;

REEL_TEST_REQUIRES_CUDA();

namespace {

// x (N, C, H, W), w (K, C / groups, R, S) and y descriptors, f32, for one convolution.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descs(const Shape& xs, const Shape& ws, const Shape& ys, const kernels::Conv2d& p,
        cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION) {
    REQUIRE(cudnnCreateTensorDescriptor(&x) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateTensorDescriptor(&y) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateFilterDescriptor(&w) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnCreateConvolutionDescriptor(&conv) == CUDNN_STATUS_SUCCESS);
    auto i = [](int64_t v) { return static_cast<int>(v); };
    REQUIRE(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(xs[0]), i(xs[1]), i(xs[2]),
                                       i(xs[3])) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(ys[0]), i(ys[1]), i(ys[2]),
                                       i(ys[3])) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(ws[0]), i(ws[1]), i(ws[2]),
                                       i(ws[3])) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolution2dDescriptor(conv, i(p.padding[0]), i(p.padding[1]), i(p.stride[0]), i(p.stride[1]),
                                            i(p.dilation[0]), i(p.dilation[1]), mode,
                                            CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionGroupCount(conv, i(p.groups)) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH) == CUDNN_STATUS_SUCCESS);  // no TF32 on a GPU
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

// The grouped, strided, padded, dilated case of these tests: OH = (7 + 2 - 3) / 2 + 1 = 4,
// OW = (6 - 2 - 1) / 1 + 1 = 4.
const kernels::Conv2d kP{{2, 1}, {1, 0}, {1, 2}, 2};
const Shape kX{2, 4, 7, 6}, kW{6, 2, 3, 2}, kY{2, 6, 4, 4};

float* fp(const Tensor& t) { return t.data<float>(); }

// A workspace of `bytes` on cuda (null when 0).
Tensor workspace(size_t bytes) {
  return bytes == 0 ? Tensor() : empty({static_cast<int64_t>((bytes + 7) / 8)}, DType::f64, Device::cuda(0));
}
void* ws_ptr(const Tensor& ws) { return ws.defined() ? ws.data<double>() : nullptr; }

}  // namespace

TEST_CASE("cudnn descriptors reject bad values with CUDNN_STATUS_BAD_PARAM; error strings name the status") {
  cudnnTensorDescriptor_t t = nullptr;
  cudnnFilterDescriptor_t f = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&t) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnCreateFilterDescriptor(&f) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnCreateConvolutionDescriptor(&c) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 3, 4, 4) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, -3, 4, 4) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 4, 4) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 0, 3, 3, 3) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 2, 3, 3, 3) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnSetConvolution2dDescriptor(c, -1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(c, 0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 0, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnSetConvolution2dDescriptor(c, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(cudnnSetConvolutionGroupCount(c, 0) == CUDNN_STATUS_BAD_PARAM);
  int n = 0, ch = 0, h = 0, w = 0;
  CHECK(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w) == CUDNN_STATUS_SUCCESS);
  CHECK((n == 1 && ch == 2 && h == 4 && w == 4));
  // 3 input channels in 3 groups want filters of 1 channel, not 3.
  REQUIRE(cudnnSetConvolutionGroupCount(c, 3) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w) == CUDNN_STATUS_BAD_PARAM);
  CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)) == "CUDNN_STATUS_BAD_PARAM");
  CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_SUCCESS)) == "CUDNN_STATUS_SUCCESS");
  CHECK(std::string(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED)) == "CUDNN_STATUS_NOT_SUPPORTED");
  cudnnDestroyTensorDescriptor(t);
  cudnnDestroyFilterDescriptor(f);
  cudnnDestroyConvolutionDescriptor(c);
}

TEST_CASE("cudnn algorithm enumeration: statuses, workspace sizes, the emulator's list") {
  CudnnHandle handle;
  const Descs d(kX, kW, kY, kP);
  int fwd_max = 0, data_max = 0, filter_max = 0;
  REQUIRE(cudnnGetConvolutionForwardAlgorithmMaxCount(handle.h, &fwd_max) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle.h, &data_max) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle.h, &filter_max) == CUDNN_STATUS_SUCCESS);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(static_cast<size_t>(fwd_max));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(static_cast<size_t>(data_max));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter(static_cast<size_t>(filter_max));
  int nf = 0, nd = 0, nw = 0;
  REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(handle.h, d.x, d.w, d.conv, d.y, fwd_max, &nf, fwd.data()) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle.h, d.w, d.y, d.conv, d.x, data_max, &nd,
                                                      data.data()) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle.h, d.x, d.y, d.conv, d.w, filter_max, &nw,
                                                        filter.data()) == CUDNN_STATUS_SUCCESS);
  CHECK((nf >= 1 && nf <= fwd_max && nd >= 1 && nd <= data_max && nw >= 1 && nw <= filter_max));
  // Every algorithm listed as running has a workspace size; at least one of each kind is deterministic.
  bool det_fwd = false, det_data = false, det_filter = false;
  for (int i = 0; i < nf; ++i) {
    if (fwd[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 1;
    CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle.h, d.x, d.w, d.conv, d.y, fwd[i].algo, &bytes) ==
          CUDNN_STATUS_SUCCESS);
    det_fwd = det_fwd || fwd[i].determinism == CUDNN_DETERMINISTIC;
  }
  for (int i = 0; i < nd; ++i) {
    if (data[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 1;
    CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle.h, d.w, d.y, d.conv, d.x, data[i].algo, &bytes) ==
          CUDNN_STATUS_SUCCESS);
    det_data = det_data || data[i].determinism == CUDNN_DETERMINISTIC;
  }
  for (int i = 0; i < nw; ++i) {
    if (filter[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 1;
    CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle.h, d.x, d.y, d.conv, d.w, filter[i].algo, &bytes) ==
          CUDNN_STATUS_SUCCESS);
    det_filter = det_filter || filter[i].determinism == CUDNN_DETERMINISTIC;
  }
  CHECK((det_fwd && det_data && det_filter));
#if defined(SIMT_EMULATE)
  // A y descriptor that is not the output of x and w: the emulator refuses it in the query already
  // (the real library may leave that to the convolution call, checked in the next case).
  const Descs bad(kX, kW, {2, 6, 4, 5}, kP);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle.h, bad.x, bad.w, bad.conv, bad.y, fwd_max, &nf, fwd.data()) ==
        CUDNN_STATUS_BAD_PARAM);
  // The emulator's own list: GEMM (an im2col matrix of one sample and group: (2 * 3 * 2, 4 * 4)
  // floats), IMPLICIT_GEMM, then the rest NOT_SUPPORTED; backward ALGO_1, then ALGO_0 labelled
  // non-deterministic as cuDNN's.
  REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(handle.h, d.x, d.w, d.conv, d.y, fwd_max, &nf, fwd.data()) ==
          CUDNN_STATUS_SUCCESS);
  CHECK(nf == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  CHECK((fwd[0].algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM && fwd[0].status == CUDNN_STATUS_SUCCESS));
  CHECK(fwd[0].memory == 2 * 3 * 2 * 16 * sizeof(float));
  CHECK((fwd[1].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM && fwd[1].memory == 0));
  for (int i = 2; i < nf; ++i) CHECK(fwd[i].status == CUDNN_STATUS_NOT_SUPPORTED);
  CHECK((data[0].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 && data[0].determinism == CUDNN_DETERMINISTIC));
  CHECK((data[1].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 && data[1].determinism == CUDNN_NON_DETERMINISTIC));
  CHECK((filter[0].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 && filter[0].status == CUDNN_STATUS_SUCCESS));
  size_t bytes = 0;
  CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle.h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                &bytes) == CUDNN_STATUS_SUCCESS);
  CHECK(bytes == 2 * 3 * 2 * 16 * sizeof(float));
  CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle.h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_FFT,
                                                &bytes) == CUDNN_STATUS_NOT_SUPPORTED);
  // requestedAlgoCount bounds the list; 0 is a bad parameter.
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle.h, d.x, d.w, d.conv, d.y, 1, &nf, fwd.data()) ==
        CUDNN_STATUS_SUCCESS);
  CHECK(nf == 1);
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle.h, d.x, d.w, d.conv, d.y, 0, &nf, fwd.data()) ==
        CUDNN_STATUS_BAD_PARAM);
#endif
}

TEST_CASE("every cudnn algorithm that runs computes the convolution, honouring alpha and beta") {
  CudnnHandle handle;
  const Descs d(kX, kW, kY, kP);
  const Device cuda = Device::cuda(0);
  const Tensor x = uniform_f64(kX, 80), w = uniform_f64(kW, 81), dy = uniform_f64(kY, 82);
  const Tensor xc = x.to(DType::f32).to(cuda), wc = w.to(DType::f32).to(cuda), dyc = dy.to(DType::f32).to(cuda);
  // The references: reel's CPU kernels in f64.
  const Tensor y_ref = kernels::conv2d_forward(x, w, Tensor(), kP);
  const Tensor dx_ref = kernels::conv2d_backward_input(dy, w, kX, kP);
  const Tensor dw_ref = kernels::conv2d_backward_weight(dy, x, kW, kP);
  const float alpha = 2.0f, beta = 0.5f, zero = 0.0f;
  // out = alpha * ref + beta * before, and with beta = 0 a NaN-filled out is not read.
  auto check_blend = [&](const Tensor& before, const Tensor& after, const Tensor& ref) {
    const std::vector<double> b = values(before), r = values(ref);
    std::vector<double> expected(r.size());
    for (size_t i = 0; i < r.size(); ++i) expected[i] = alpha * r[i] + beta * b[i];
    check_close(after, expected, 1e-5, 1e-5);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();

  int count = 0, n = 0;
  REQUIRE(cudnnGetConvolutionForwardAlgorithmMaxCount(handle.h, &count) == CUDNN_STATUS_SUCCESS);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(static_cast<size_t>(count));
  REQUIRE(cudnnGetConvolutionForwardAlgorithm_v7(handle.h, d.x, d.w, d.conv, d.y, count, &n, fwd.data()) ==
          CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < n; ++i) {
    if (fwd[i].status != CUDNN_STATUS_SUCCESS) continue;
    const int algo = static_cast<int>(fwd[i].algo);
    CAPTURE(algo);
    size_t bytes = 0;
    REQUIRE(cudnnGetConvolutionForwardWorkspaceSize(handle.h, d.x, d.w, d.conv, d.y, fwd[i].algo, &bytes) ==
            CUDNN_STATUS_SUCCESS);
    const Tensor ws = workspace(bytes);
    const Tensor y = uniform_f64(kY, 83).to(DType::f32).to(cuda), before = y.to(Device::cpu());
    REQUIRE(cudnnConvolutionForward(handle.h, &alpha, d.x, fp(xc), d.w, fp(wc), d.conv, fwd[i].algo, ws_ptr(ws), bytes,
                                    &beta, d.y, fp(y)) == CUDNN_STATUS_SUCCESS);
    check_blend(before, y, y_ref);
    const Tensor fresh = full(kY, nan, DType::f32, cuda);
    REQUIRE(cudnnConvolutionForward(handle.h, &alpha, d.x, fp(xc), d.w, fp(wc), d.conv, fwd[i].algo, ws_ptr(ws), bytes,
                                    &zero, d.y, fp(fresh)) == CUDNN_STATUS_SUCCESS);
    check_blend(zeros(kY, DType::f32), fresh, y_ref);
#if defined(SIMT_EMULATE)
    if (bytes > 0)  // a workspace smaller than the algorithm needs: refused, y untouched
      CHECK(cudnnConvolutionForward(handle.h, &alpha, d.x, fp(xc), d.w, fp(wc), d.conv, fwd[i].algo, ws_ptr(ws),
                                    bytes - 1, &zero, d.y, fp(fresh)) == CUDNN_STATUS_BAD_PARAM);
#endif
  }
  // A y of the wrong shape: BAD_PARAM, and y is not written.
  const Descs bad(kX, kW, {2, 6, 4, 5}, kP);
  const Tensor untouched = full({2, 6, 4, 5}, 7.0, DType::f32, cuda);
  CHECK(cudnnConvolutionForward(handle.h, &alpha, bad.x, fp(xc), bad.w, fp(wc), bad.conv,
                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, bad.y,
                                fp(untouched)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(values(untouched) == std::vector<double>(2 * 6 * 4 * 5, 7.0));

  REQUIRE(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle.h, &count) == CUDNN_STATUS_SUCCESS);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(static_cast<size_t>(count));
  REQUIRE(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle.h, d.w, d.y, d.conv, d.x, count, &n, data.data()) ==
          CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < n; ++i) {
    if (data[i].status != CUDNN_STATUS_SUCCESS) continue;
    const int algo = static_cast<int>(data[i].algo);
    CAPTURE(algo);
    size_t bytes = 0;
    REQUIRE(cudnnGetConvolutionBackwardDataWorkspaceSize(handle.h, d.w, d.y, d.conv, d.x, data[i].algo, &bytes) ==
            CUDNN_STATUS_SUCCESS);
    const Tensor ws = workspace(bytes);
    const Tensor dx = uniform_f64(kX, 84).to(DType::f32).to(cuda), before = dx.to(Device::cpu());
    REQUIRE(cudnnConvolutionBackwardData(handle.h, &alpha, d.w, fp(wc), d.y, fp(dyc), d.conv, data[i].algo,
                                         ws_ptr(ws), bytes, &beta, d.x, fp(dx)) == CUDNN_STATUS_SUCCESS);
    check_blend(before, dx, dx_ref);
  }

  REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle.h, &count) == CUDNN_STATUS_SUCCESS);
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter(static_cast<size_t>(count));
  REQUIRE(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle.h, d.x, d.y, d.conv, d.w, count, &n, filter.data()) ==
          CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < n; ++i) {
    if (filter[i].status != CUDNN_STATUS_SUCCESS) continue;
    const int algo = static_cast<int>(filter[i].algo);
    CAPTURE(algo);
    size_t bytes = 0;
    REQUIRE(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle.h, d.x, d.y, d.conv, d.w, filter[i].algo, &bytes) ==
            CUDNN_STATUS_SUCCESS);
    const Tensor ws = workspace(bytes);
    const Tensor dw = uniform_f64(kW, 85).to(DType::f32).to(cuda), before = dw.to(Device::cpu());
    REQUIRE(cudnnConvolutionBackwardFilter(handle.h, &alpha, d.x, fp(xc), d.y, fp(dyc), d.conv, filter[i].algo,
                                           ws_ptr(ws), bytes, &beta, d.w, fp(dw)) == CUDNN_STATUS_SUCCESS);
    check_blend(before, dw, dw_ref);
  }
}

TEST_CASE("cudnn CONVOLUTION mode applies the filter flipped; bias add and bias gradient") {
  CudnnHandle handle;
  const Device cuda = Device::cuda(0);
  const kernels::Conv2d p{{1, 1}, {1, 1}, {1, 1}, 1};
  const Shape xs{1, 2, 4, 5}, ws{3, 2, 2, 3}, ys{1, 3, 5, 5};
  const Descs d(xs, ws, ys, p, CUDNN_CONVOLUTION);
  const Tensor x = uniform_f64(xs, 90), w = uniform_f64(ws, 91);
  // w with both kernel axes reversed, built on the host.
  std::vector<double> wv = values(w), flipped(wv.size());
  for (int64_t oc = 0; oc < 6; ++oc)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t s = 0; s < 3; ++s)
        flipped[static_cast<size_t>((oc * 2 + r) * 3 + s)] = wv[static_cast<size_t>((oc * 2 + 1 - r) * 3 + 2 - s)];
  const Tensor ref = kernels::conv2d_forward(x, from_vector<double>(flipped, ws), Tensor(), p);
  const Tensor xc = x.to(DType::f32).to(cuda), wc = w.to(DType::f32).to(cuda), y = empty(ys, DType::f32, cuda);
  const float one = 1.0f, zero = 0.0f, half = 0.5f;
  REQUIRE(cudnnConvolutionForward(handle.h, &one, d.x, fp(xc), d.w, fp(wc), d.conv,
                                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d.y,
                                  fp(y)) == CUDNN_STATUS_SUCCESS);
  check_close(y, values(ref), 1e-5, 1e-5);

  // Bias: y = 1 * b (broadcast from (1, 3, 1, 1)) + 0.5 * y; db = 1 * sum of dy + 0 * db.
  cudnnTensorDescriptor_t bd = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&bd) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 1, 1) == CUDNN_STATUS_SUCCESS);
  const Tensor b = from_vector<float>({1, -2, 4}, {3}).to(cuda), before = y.to(Device::cpu());
  REQUIRE(cudnnAddTensor(handle.h, &one, bd, fp(b), &half, d.y, fp(y)) == CUDNN_STATUS_SUCCESS);
  std::vector<double> expected = values(before);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = 0.5 * expected[i] + std::vector<double>{1, -2, 4}[i / 25];
  check_close(y, expected, 1e-6, 1e-6);
  const Tensor db = full({3}, std::numeric_limits<float>::quiet_NaN(), DType::f32, cuda);
  REQUIRE(cudnnConvolutionBackwardBias(handle.h, &one, d.y, fp(y), &zero, bd, fp(db)) == CUDNN_STATUS_SUCCESS);
  std::vector<double> sums(3, 0.0);
  for (size_t i = 0; i < expected.size(); ++i) sums[i / 25] += expected[i];
  check_close(db, sums, 1e-5, 1e-5);
  // A bias descriptor whose channels are not dy's: BAD_PARAM.
  cudnnTensorDescriptor_t bad = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&bad) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 1) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnConvolutionBackwardBias(handle.h, &one, d.y, fp(y), &zero, bad, fp(db)) == CUDNN_STATUS_BAD_PARAM);
  CHECK(cudnnAddTensor(handle.h, &one, bad, fp(b), &half, d.y, fp(y)) == CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyTensorDescriptor(bad);
}

TEST_CASE("bf16 and f16 convolutions (FLOAT compute): the f32 result on widened data, rounded once") {
  // The f32 run on the same values widened (exact) sums the same products in the same order (one
  // geometry, one algorithm), so each 16-bit output is its f32 result rounded to nearest even, bit
  // for bit; the bias joins the f32 sum (kernels/cuda/conv.cu), not a second rounding.
  const Device cuda = Device::cuda(0);
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dt);
    const Tensor x = uniform_f64(kX, 95).to(dt).to(cuda), w = uniform_f64(kW, 96).to(dt).to(cuda);
    const Tensor b = uniform_f64({6}, 97).to(dt).to(cuda);
    const Tensor y = kernels::conv2d_forward(x, w, b, kP);
    const Tensor y32 = kernels::conv2d_forward(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), kP);
    CHECK(y.dtype() == dt);
    CHECK(bit_identical(y, y32.to(dt)));
    const Tensor dy = uniform_f64(y.shape(), 98).to(dt).to(cuda);
    CHECK(bit_identical(kernels::conv2d_backward_input(dy, w, kX, kP),
                        kernels::conv2d_backward_input(dy.to(DType::f32), w.to(DType::f32), kX, kP).to(dt)));
    CHECK(bit_identical(kernels::conv2d_backward_weight(dy, x, kW, kP),
                        kernels::conv2d_backward_weight(dy.to(DType::f32), x.to(DType::f32), kW, kP).to(dt)));
    CHECK(bit_identical(kernels::conv2d_backward_bias(dy), kernels::conv2d_backward_bias(dy.to(DType::f32)).to(dt)));
  }
}

TEST_CASE("a failing cuDNN status is a reel::Error naming the call, the status and the convolution") {
  // The entry points refuse bad shapes before cuDNN sees them, so the cuda backend kernel is called
  // directly, with a y that is not the output of x and w.
  const Device cuda = Device::cuda(0);
  const Tensor x = zeros(kX, DType::f32, cuda), w = zeros(kW, DType::f32, cuda);
  const Tensor y = zeros({2, 6, 4, 5}, DType::f32, cuda);
  CHECK_REEL_ERROR(kernels::cuda::conv2d_forward(x, w, Tensor(), kP, y),
                   " (x (2, 4, 7, 6) weight (6, 2, 3, 2) y (2, 6, 4, 5) f32, stride (2, 1) padding (1, 0) dilation "
                   "(1, 2) groups 2): CUDNN_STATUS_BAD_PARAM");
#if defined(SIMT_EMULATE)  // which call refuses it: the emulator's query does (the real one may not)
  CHECK_REEL_ERROR(kernels::cuda::conv2d_forward(x, w, Tensor(), kP, y),
                   "cuDNN error in cudnnGetConvolutionForwardAlgorithm_v7 (x (2, 4, 7, 6)");
#endif
  const Tensor dy = zeros({2, 6, 4, 4}, DType::f32, cuda), db = zeros({5}, DType::f32, cuda);
  CHECK_REEL_ERROR(kernels::cuda::conv2d_backward_bias(dy, db),
                   "cuDNN error in cudnnConvolutionBackwardBias (dy (2, 6, 4, 4) f32): CUDNN_STATUS_BAD_PARAM");
}

#if defined(SIMT_EMULATE)
TEST_CASE("conv2d on cuda takes cuDNN's workspace from the caching allocator, as a Temporary") {
  // The emulator's first forward algorithm is GEMM, whose workspace is known: (2 * 3 * 2, 4 * 4)
  // floats for kX and kW. It lives from the algorithm choice to the end of the call, beside y.
  const Device cuda = Device::cuda(0);
  const Tensor x = zeros(kX, DType::f32, cuda), w = zeros(kW, DType::f32, cuda);
  reset_peak_memory(cuda);
  const int64_t before = memory_stats(cuda)[Category::Temporary].current_bytes;
  const Tensor y = kernels::conv2d_forward(x, w, Tensor(), kP);
  const MemoryStats after = memory_stats(cuda);
  const int64_t y_bytes = 2 * 6 * 4 * 4 * 4, workspace_bytes = 2 * 3 * 2 * 16 * 4;
  CHECK(after[Category::Temporary].current_bytes - before == y_bytes);  // the workspace is freed
  CHECK(after[Category::Temporary].peak_bytes - before >= y_bytes + workspace_bytes);
}
#endif

#endif  // SIMT_EMULATE || REEL_HAVE_CUDNN
