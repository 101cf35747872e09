// cuDNN's batch-normalization calls that reel makes (kernels/simt/cudnn.h, "Batch normalization")
// against cuDNN's API contract: the derived descriptor; known small values of the training forward
// (the saved mean and inverse standard deviation, the running-stat update with the unbiased
// variance, NULL running or saved pointers), the inference forward and the backward; alpha / beta
// honoured (beta == 0: the output is not read, so a NaN there does not propagate); bad shapes,
// types, pointer pairs and epsilon refused without writing anything. In the host build this is the emulated cuDNN
// (kernels/simt/cudnn_emu_batchnorm.cpp); in the nvcc build the same cases run against the real
// library on a GPU, except the checks of the emulator's own choices (which bad-parameter code,
// the modes its subset lacks), under SIMT_EMULATE.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/backends.h"
#include "kernels/ops.h"
#include "testing.h"

#if defined(SIMT_EMULATE) || defined(REEL_HAVE_CUDNN)
#include "cudnn_testing.h"

using namespace reel;
using namespace reel::testing;

REEL_TEST_REQUIRES_CUDA();

namespace {

Tensor on_cuda(const std::vector<double>& v, const Shape& s, DType t = DType::f32) {
  return from_vector(v, s).to(t).to(Device::cuda(0));
}
template <class T>
T* ptr(const Tensor& t) {
  return t.data<T>();
}
float* fp(const Tensor& t) { return t.data<float>(); }

// x (2, 2, 1, 2): channel 0 holds 1, 2, 3, 6 (mean 3, biased var 3.5, unbiased 14 / 3), channel 1
// holds 0, 4, 0, 4 (mean 2, var 4, unbiased 16 / 3). n = 4 values per channel.
const std::vector<double> kX{1, 2, 0, 4, 3, 6, 0, 4};

}  // namespace

TEST_CASE("cudnnDeriveBNTensorDescriptor: (1, C, 1, 1) in spatial mode, of the derived type") {
  // Checked by use: the derived descriptor is accepted as the per-channel one of its x, and one
  // derived from a double x is refused for a float x (not the derived type).
  CudnnHandle handle;
  CudnnDesc xd(2, 2, 1, 2), xd64(2, 2, 1, 2, CUDNN_DATA_DOUBLE), xd3(2, 3, 1, 2);
  cudnnTensorDescriptor_t bn = nullptr, bn64 = nullptr, bn3 = nullptr;
  REQUIRE(cudnnCreateTensorDescriptor(&bn) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnCreateTensorDescriptor(&bn64) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnCreateTensorDescriptor(&bn3) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnDeriveBNTensorDescriptor(bn, xd.d, CUDNN_BATCHNORM_SPATIAL) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnDeriveBNTensorDescriptor(bn64, xd64.d, CUDNN_BATCHNORM_SPATIAL) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnDeriveBNTensorDescriptor(bn3, xd3.d, CUDNN_BATCHNORM_SPATIAL) == CUDNN_STATUS_SUCCESS);
  const Tensor x = on_cuda(kX, {2, 2, 1, 2}), y = on_cuda(std::vector<double>(8, 0), {2, 2, 1, 2});
  const Tensor scale = on_cuda({1, 1}, {2}), bias = on_cuda({0, 0}, {2});
  const float one = 1, zero = 0;
  auto train = [&](cudnnTensorDescriptor_t d) {
    return cudnnBatchNormalizationForwardTraining(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, fp(x), xd.d,
                                                  fp(y), d, fp(scale), fp(bias), 0.1, nullptr, nullptr, 1e-5,
                                                  nullptr, nullptr);
  };
  CHECK(train(bn) == CUDNN_STATUS_SUCCESS);
  CHECK(train(bn64) != CUDNN_STATUS_SUCCESS);
  CHECK(train(bn3) != CUDNN_STATUS_SUCCESS);
  cudnnDestroyTensorDescriptor(bn);
  cudnnDestroyTensorDescriptor(bn64);
  cudnnDestroyTensorDescriptor(bn3);
}

TEST_CASE("cudnnBatchNormalizationForwardTraining: known values, running-stat update (unbiased), alpha and beta") {
  CudnnHandle handle;
  CudnnDesc xd(2, 2, 1, 2), bn(1, 2, 1, 1);
  const Tensor x = on_cuda(kX, {2, 2, 1, 2});
  const Tensor scale = on_cuda({2, 0.5}, {2}), bias = on_cuda({1, -1}, {2});
  const Tensor rm = on_cuda({1, 0}, {2}), rv = on_cuda({2, 1}, {2});
  const Tensor mean = on_cuda({9, 9}, {2}), inv = on_cuda({9, 9}, {2});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor y = on_cuda(std::vector<double>(8, nan), {2, 2, 1, 2});
  const float one = 1, zero = 0;
  const double eps = 1e-5, factor = 0.25;
  REQUIRE(cudnnBatchNormalizationForwardTraining(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, fp(x), xd.d,
                                                 fp(y), bn.d, fp(scale), fp(bias), factor, fp(rm), fp(rv), eps,
                                                 fp(mean), fp(inv)) == CUDNN_STATUS_SUCCESS);
  const double inv0 = 1 / std::sqrt(3.5 + eps), inv1 = 1 / std::sqrt(4 + eps);
  check_close(mean, {3, 2}, 1e-7, 1e-7);
  check_close(inv, {inv0, inv1}, 1e-6, 1e-7);
  // running = (1 - factor) * running + factor * batch (unbiased variance).
  check_close(rm, {0.75 * 1 + 0.25 * 3, 0.25 * 2}, 1e-6, 1e-7);
  check_close(rv, {0.75 * 2 + 0.25 * 14.0 / 3, 0.75 * 1 + 0.25 * 16.0 / 3}, 1e-6, 1e-7);
  // y = scale * (x - mean) * inv + bias: the NaN that y held was not read (beta == 0).
  std::vector<double> expected;
  for (size_t i = 0; i < kX.size(); ++i) {
    const size_t c = (i / 2) % 2;
    expected.push_back(c == 0 ? 2 * (kX[i] - 3) * inv0 + 1 : 0.5 * (kX[i] - 2) * inv1 - 1);
  }
  check_close(y, expected, 1e-6, 1e-6);

  // alpha 2, beta 0.5 onto y: y' = 2 * bn(x) + 0.5 * y; NULL running and saved pointers: nothing
  // else is written.
  const float two = 2, half = 0.5f;
  const std::vector<double> rm_before = values(rm), rv_before = values(rv);
  REQUIRE(cudnnBatchNormalizationForwardTraining(handle.h, CUDNN_BATCHNORM_SPATIAL, &two, &half, xd.d, fp(x), xd.d,
                                                 fp(y), bn.d, fp(scale), fp(bias), factor, nullptr, nullptr, eps,
                                                 nullptr, nullptr) == CUDNN_STATUS_SUCCESS);
  std::vector<double> blended;
  for (double e : expected) blended.push_back(2 * e + 0.5 * e);
  check_close(y, blended, 1e-6, 1e-6);
  CHECK(values(rm) == rm_before);
  CHECK(values(rv) == rv_before);

  // factor 1 replaces the running statistics with the batch's (cuDNN's "first call" rule).
  REQUIRE(cudnnBatchNormalizationForwardTraining(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, fp(x), xd.d,
                                                 fp(y), bn.d, fp(scale), fp(bias), 1.0, fp(rm), fp(rv), eps, nullptr,
                                                 nullptr) == CUDNN_STATUS_SUCCESS);
  check_close(rm, {3, 2}, 1e-6, 1e-7);
  check_close(rv, {14.0 / 3, 16.0 / 3}, 1e-6, 1e-7);
}

TEST_CASE("cudnnBatchNormalizationForwardInference and Backward: known values, alpha and beta, f64") {
  CudnnHandle handle;
  CudnnDesc xd(2, 2, 1, 2, CUDNN_DATA_DOUBLE), bn(1, 2, 1, 1, CUDNN_DATA_DOUBLE);
  const Tensor x = on_cuda(kX, {2, 2, 1, 2}, DType::f64);
  const Tensor scale = on_cuda({2, 0.5}, {2}, DType::f64), bias = on_cuda({1, -1}, {2}, DType::f64);
  const Tensor em = on_cuda({1, -1}, {2}, DType::f64), ev = on_cuda({3, 0.25}, {2}, DType::f64);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor y = on_cuda(std::vector<double>(8, nan), {2, 2, 1, 2}, DType::f64);
  const double one = 1, zero = 0, eps = 1e-3;
  REQUIRE(cudnnBatchNormalizationForwardInference(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d,
                                                  ptr<double>(x), xd.d, ptr<double>(y), bn.d, ptr<double>(scale),
                                                  ptr<double>(bias), ptr<double>(em), ptr<double>(ev),
                                                  eps) == CUDNN_STATUS_SUCCESS);
  std::vector<double> expected;
  for (size_t i = 0; i < kX.size(); ++i) {
    const size_t c = (i / 2) % 2;
    expected.push_back(c == 0 ? 2 * (kX[i] - 1) / std::sqrt(3 + eps) + 1 : 0.5 * (kX[i] + 1) / std::sqrt(0.25 + eps) - 1);
  }
  check_close(y, expected, 1e-12, 1e-12);

  // Backward from the saved statistics of the batch, against the formula in f64.
  const std::vector<double> dyv{0.5, -1, 2, 0.25, 1, 3, -2, 1};
  const Tensor dy = on_cuda(dyv, {2, 2, 1, 2}, DType::f64);
  const double mu[2] = {3, 2}, iv[2] = {1 / std::sqrt(3.5 + eps), 1 / std::sqrt(4 + eps)}, g[2] = {2, 0.5};
  const Tensor mean = on_cuda({mu[0], mu[1]}, {2}, DType::f64), inv = on_cuda({iv[0], iv[1]}, {2}, DType::f64);
  double sdy[2] = {0, 0}, sdyx[2] = {0, 0};
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = (i / 2) % 2;
    sdy[c] += dyv[i];
    sdyx[c] += dyv[i] * (kX[i] - mu[c]) * iv[c];
  }
  std::vector<double> dx_ref;
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = (i / 2) % 2;
    const double xhat = (kX[i] - mu[c]) * iv[c];
    dx_ref.push_back(g[c] * iv[c] * (dyv[i] - sdy[c] / 4 - xhat * sdyx[c] / 4));
  }
  const Tensor dx = on_cuda(std::vector<double>(8, nan), {2, 2, 1, 2}, DType::f64);
  const Tensor dscale = on_cuda({nan, nan}, {2}, DType::f64), dbias = on_cuda({nan, nan}, {2}, DType::f64);
  REQUIRE(cudnnBatchNormalizationBackward(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.d,
                                          ptr<double>(x), xd.d, ptr<double>(dy), xd.d, ptr<double>(dx), bn.d,
                                          ptr<double>(scale), ptr<double>(dscale), ptr<double>(dbias), eps,
                                          ptr<double>(mean), ptr<double>(inv)) == CUDNN_STATUS_SUCCESS);
  check_close(dx, dx_ref, 1e-12, 1e-12);
  check_close(dscale, {sdyx[0], sdyx[1]}, 1e-12, 1e-12);
  check_close(dbias, {sdy[0], sdy[1]}, 1e-12, 1e-12);
  // The sum of a training dx over a channel is 0 (the mean's gradient cancels it).
  CHECK(std::abs(dx_ref[0] + dx_ref[1] + dx_ref[4] + dx_ref[5]) < 1e-12);

  // Without saved statistics cuDNN recomputes them from x and epsilon: the same results. The
  // blend factors: dx' = 2 dx + 0.5 dx, dscale' = -1 dscale + 1 dscale = 0, dbias likewise.
  const double two = 2, half = 0.5, minus = -1;
  REQUIRE(cudnnBatchNormalizationBackward(handle.h, CUDNN_BATCHNORM_SPATIAL, &two, &half, &minus, &one, xd.d,
                                          ptr<double>(x), xd.d, ptr<double>(dy), xd.d, ptr<double>(dx), bn.d,
                                          ptr<double>(scale), ptr<double>(dscale), ptr<double>(dbias), eps, nullptr,
                                          nullptr) == CUDNN_STATUS_SUCCESS);
  std::vector<double> dx_blend;
  for (double v : dx_ref) dx_blend.push_back(2.5 * v);
  check_close(dx, dx_blend, 1e-10, 1e-10);
  check_close(dscale, {0, 0}, 0, 1e-10);
  check_close(dbias, {0, 0}, 0, 1e-10);
}

TEST_CASE("cuDNN batch normalization refuses bad shapes, types, pointer pairs and epsilon, writing nothing") {
  CudnnHandle handle;
  CudnnDesc xd(2, 2, 1, 2), bn(1, 2, 1, 1), y3(2, 3, 1, 2), bn3(1, 3, 1, 1), bn_hw(1, 2, 1, 2),
      bn_f64(1, 2, 1, 1, CUDNN_DATA_DOUBLE), xd_f64(2, 2, 1, 2, CUDNN_DATA_DOUBLE);
  const Tensor x = on_cuda(kX, {2, 2, 1, 2});
  const Tensor scale = on_cuda({2, 0.5}, {2}), bias = on_cuda({1, -1}, {2});
  const Tensor rm = on_cuda({1, 0}, {2}), rv = on_cuda({2, 1}, {2});
  const Tensor mean = on_cuda({9, 9}, {2}), inv = on_cuda({9, 9}, {2});
  const Tensor y = on_cuda(std::vector<double>(12, 7), {2, 3, 1, 2});
  const float one = 1, zero = 0;
  auto train = [&](cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t bd, void* run_mean, void* run_var,
                   double eps, void* save_mean, void* save_inv,
                   cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL) {
    return cudnnBatchNormalizationForwardTraining(handle.h, mode, &one, &zero, xd.d, fp(x), yd, fp(y), bd, fp(scale),
                                                  fp(bias), 0.1, run_mean, run_var, eps, save_mean, save_inv);
  };
  CHECK(cudnn_bad_param(train(y3.d, bn.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv))));  // y of 3 channels
  CHECK(cudnn_bad_param(train(xd.d, bn3.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv))));  // (1, 3, 1, 1)
  CHECK(cudnn_bad_param(train(xd.d, bn_hw.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv))));  // not (1, C, 1, 1)
  CHECK(cudnn_bad_param(train(xd.d, bn.d, fp(rm), nullptr, 1e-5, fp(mean), fp(inv))));  // one running pointer
  CHECK(cudnn_bad_param(train(xd.d, bn.d, fp(rm), fp(rv), 1e-5, nullptr, fp(inv))));  // one saved pointer
  CHECK(cudnn_bad_param(train(xd.d, bn.d, fp(rm), fp(rv), -1e-3, fp(mean), fp(inv))));  // eps < CUDNN_BN_MIN_EPSILON
  CHECK(train(xd.d, bn_f64.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv)) != CUDNN_STATUS_SUCCESS);  // not derived
  CHECK(train(xd_f64.d, bn.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv)) != CUDNN_STATUS_SUCCESS);  // y f64, x f32
  CHECK(cudnnBatchNormalizationForwardTraining(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, fp(x), xd.d,
                                               nullptr, bn.d, fp(scale), fp(bias), 0.1, nullptr, nullptr, 1e-5,
                                               nullptr, nullptr) != CUDNN_STATUS_SUCCESS);  // no y
#if defined(SIMT_EMULATE)
  CHECK(train(xd.d, bn.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv), CUDNN_BATCHNORM_PER_ACTIVATION) ==
        CUDNN_STATUS_NOT_SUPPORTED);  // the emulator's subset
  CHECK(train(xd.d, bn.d, fp(rm), fp(rv), 1e-5, fp(mean), fp(inv), static_cast<cudnnBatchNormMode_t>(3)) ==
        CUDNN_STATUS_BAD_PARAM);
#endif
  // Nothing written by any refused call.
  CHECK(values(y) == std::vector<double>(12, 7));
  CHECK(values(rm) == std::vector<double>{1, 0});
  CHECK(values(rv) == std::vector<double>{2, 1});
  CHECK(values(mean) == std::vector<double>{9, 9});
  CHECK(values(inv) == std::vector<double>{9, 9});

  CHECK(cudnn_bad_param(cudnnBatchNormalizationForwardInference(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, fp(x),
                                                          y3.d, fp(y), bn.d, fp(scale), fp(bias), fp(rm), fp(rv),
                                                          1e-5)));
  CHECK(cudnn_bad_param(cudnnBatchNormalizationForwardInference(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, fp(x),
                                                          xd.d, fp(y), bn.d, fp(scale), fp(bias), fp(rm), fp(rv),
                                                          -1.0)));
  const Tensor dx = on_cuda(std::vector<double>(8, 7), {2, 2, 1, 2});
  const Tensor ds = on_cuda({7, 7}, {2}), db = on_cuda({7, 7}, {2});
  auto back = [&](cudnnTensorDescriptor_t dyd, cudnnTensorDescriptor_t bd, const void* sm, const void* si) {
    return cudnnBatchNormalizationBackward(handle.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.d, fp(x),
                                           dyd, fp(x), xd.d, fp(dx), bd, fp(scale), fp(ds), fp(db), 1e-5, sm, si);
  };
  CHECK(cudnn_bad_param(back(y3.d, bn.d, fp(mean), fp(inv))));  // dy of another shape
  CHECK(cudnn_bad_param(back(xd.d, bn3.d, fp(mean), fp(inv))));
  CHECK(cudnn_bad_param(back(xd.d, bn.d, fp(mean), nullptr)));
  CHECK(values(y) == std::vector<double>(12, 7));
  CHECK(values(dx) == std::vector<double>(8, 7));
  CHECK(values(ds) == std::vector<double>{7, 7});
  CHECK(values(db) == std::vector<double>{7, 7});
}

#endif  // SIMT_EMULATE || REEL_HAVE_CUDNN
