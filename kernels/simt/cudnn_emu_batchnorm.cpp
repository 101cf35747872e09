// kernels/simt/cudnn_emu_batchnorm.cpp: host implementations of cuDNN's batch-normalization calls
// (the "Batch normalization" section of cudnn.h) for the emulated build. Like cudnn_emu.cpp it
// stands in for an independent library: it shares no code with reel's CPU BatchNorm
// (kernels/cpu/batchnorm.cpp), so the tests comparing the cuda backend with the cpu one compare two
// implementations.
//
// Each call checks its descriptors and pointers as cuDNN documents (x, y, dx, dy of one shape and
// type; the per-channel descriptor (1, C, 1, 1) of the derived type; the optional pointer pairs
// both or neither given; epsilon >= CUDNN_BN_MIN_EPSILON) before it writes anything, and returns
// the status cuDNN would. The subset: SPATIAL mode (what reel calls; SPATIAL_PERSISTENT, whose
// sums may be non-deterministic, and PER_ACTIVATION answer CUDNN_STATUS_NOT_SUPPORTED).
//
// Arithmetic: per channel, one sequential sweep over n then h * w, in double (the two-pass
// variance: the mean first, then the centred squares), so the results are the same bits on every
// run; each output is computed in double, rounded once to the data type, then blended with
// alpha / beta in the data type (beta == 0: the output is not read).
// Under simt::DryRun (reel's meta device) each call checks its arguments as ever and computes nothing.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cudnn_emu_internal.h"

namespace {

using cudnn_emu::blend;
using cudnn_emu::read_scalar;
using cudnn_emu::supported_type;

cudnnDataType_t derived_type(cudnnDataType_t t) { return t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

bool same_shape(const cudnnTensorStruct* a, const cudnnTensorStruct* b) {
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w;
}

// The checks every call shares: data descriptors set, of one shape and a supported type; the
// per-channel descriptor (1, C, 1, 1) of the derived type; SPATIAL mode; epsilon. `datas` are the
// data descriptors (x, y / x, dy, dx), all non-null.
cudnnStatus_t check_common(cudnnBatchNormMode_t mode, const cudnnTensorStruct* const* datas, int n_datas,
                           const cudnnTensorStruct* bn, double epsilon) {
  const cudnnTensorStruct* x = datas[0];
  for (int i = 0; i < n_datas; ++i) {
    if (!datas[i]->set) return CUDNN_STATUS_BAD_PARAM;
    if (!same_shape(datas[i], x) || datas[i]->type != x->type) return CUDNN_STATUS_BAD_PARAM;
  }
  if (!bn->set) return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_BATCHNORM_SPATIAL && mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT &&
      mode != CUDNN_BATCHNORM_PER_ACTIVATION)
    return CUDNN_STATUS_BAD_PARAM;
  if (bn->n != 1 || bn->c != x->c || bn->h != 1 || bn->w != 1 || bn->type != derived_type(x->type))
    return CUDNN_STATUS_BAD_PARAM;
  if (!(epsilon >= CUDNN_BN_MIN_EPSILON)) return CUDNN_STATUS_BAD_PARAM;  // NaN too
  if (!supported_type(x->type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  return CUDNN_STATUS_SUCCESS;
}

// Channel c of an NCHW tensor: its n = N * H * W values are N runs of H * W.
struct Layout {
  int64_t N, C, L;
  explicit Layout(const cudnnTensorStruct* d) : N(d->n), C(d->c), L(int64_t{d->h} * d->w) {}
  int64_t count() const { return N * L; }
  int64_t at(int64_t c, int64_t n, int64_t l) const { return (n * C + c) * L + l; }
};

// The biased mean and variance of channel c, two passes in double.
template <class T>
void channel_moments(const Layout& g, const T* x, int64_t c, double& mean, double& var) {
  double s = 0;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t l = 0; l < g.L; ++l) s += static_cast<double>(x[g.at(c, n, l)]);
  mean = s / static_cast<double>(g.count());
  double q = 0;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t l = 0; l < g.L; ++l) {
      const double d = static_cast<double>(x[g.at(c, n, l)]) - mean;
      q += d * d;
    }
  var = q / static_cast<double>(g.count());
}

// y = alpha * (scale * (x - mean) * inv + bias) + beta * y over channel c.
template <class T>
void normalize_channel(const Layout& g, const T* x, T* y, int64_t c, double mean, double inv, double scale,
                       double bias, T alpha, T beta) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t l = 0; l < g.L; ++l) {
      const int64_t i = g.at(c, n, l);
      blend(y[i], static_cast<T>(scale * ((static_cast<double>(x[i]) - mean) * inv) + bias), alpha, beta);
    }
}

template <class T>
void forward_training(const Layout& g, const T* x, T* y, const T* scale, const T* bias, double factor, T* run_mean,
                      T* run_var, double epsilon, T* save_mean, T* save_inv, T alpha, T beta) {
  const double n = static_cast<double>(g.count());
  for (int64_t c = 0; c < g.C; ++c) {
    double mean = 0, var = 0;
    channel_moments(g, x, c, mean, var);
    const double inv = 1.0 / std::sqrt(var + epsilon);
    normalize_channel(g, x, y, c, mean, inv, static_cast<double>(scale[c]), static_cast<double>(bias[c]), alpha,
                      beta);
    if (run_mean) {
      // The running variance is the unbiased one (n / (n - 1)), as PyTorch keeps it; with a
      // single value (n = 1) there is no unbiased estimate and the biased one (0) is used.
      const double unbiased = n > 1 ? var * n / (n - 1) : var;
      run_mean[c] = static_cast<T>((1 - factor) * static_cast<double>(run_mean[c]) + factor * mean);
      run_var[c] = static_cast<T>((1 - factor) * static_cast<double>(run_var[c]) + factor * unbiased);
    }
    if (save_mean) {
      save_mean[c] = static_cast<T>(mean);
      save_inv[c] = static_cast<T>(inv);
    }
  }
}

template <class T>
void forward_inference(const Layout& g, const T* x, T* y, const T* scale, const T* bias, const T* mean,
                       const T* var, double epsilon, T alpha, T beta) {
  for (int64_t c = 0; c < g.C; ++c)
    normalize_channel(g, x, y, c, static_cast<double>(mean[c]), 1.0 / std::sqrt(static_cast<double>(var[c]) + epsilon),
                      static_cast<double>(scale[c]), static_cast<double>(bias[c]), alpha, beta);
}

template <class T>
void backward(const Layout& g, const T* x, const T* dy, T* dx, const T* scale, T* dscale, T* dbias, double epsilon,
              const T* saved_mean, const T* saved_inv, T alpha_data, T beta_data, T alpha_param, T beta_param) {
  const double n = static_cast<double>(g.count());
  for (int64_t c = 0; c < g.C; ++c) {
    double mean = 0, inv = 0;
    if (saved_mean) {
      mean = static_cast<double>(saved_mean[c]);
      inv = static_cast<double>(saved_inv[c]);
    } else {
      double var = 0;
      channel_moments(g, x, c, mean, var);
      inv = 1.0 / std::sqrt(var + epsilon);
    }
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t k = 0; k < g.N; ++k)
      for (int64_t l = 0; l < g.L; ++l) {
        const int64_t i = g.at(c, k, l);
        const double d = static_cast<double>(dy[i]);
        sum_dy += d;
        sum_dy_xhat += d * ((static_cast<double>(x[i]) - mean) * inv);
      }
    const double k_scale = static_cast<double>(scale[c]) * inv;
    for (int64_t k = 0; k < g.N; ++k)
      for (int64_t l = 0; l < g.L; ++l) {
        const int64_t i = g.at(c, k, l);
        const double xhat = (static_cast<double>(x[i]) - mean) * inv;
        const double v = k_scale * (static_cast<double>(dy[i]) - sum_dy / n - xhat * sum_dy_xhat / n);
        blend(dx[i], static_cast<T>(v), alpha_data, beta_data);
      }
    blend(dscale[c], static_cast<T>(sum_dy_xhat), alpha_param, beta_param);
    blend(dbias[c], static_cast<T>(sum_dy), alpha_param, beta_param);
  }
}

}  // namespace

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc, const cudnnTensorDescriptor_t xDesc,
                                            cudnnBatchNormMode_t mode) {
  if (!derivedBnDesc || !xDesc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!xDesc->set) return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_BATCHNORM_SPATIAL && mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT &&
      mode != CUDNN_BATCHNORM_PER_ACTIVATION)
    return CUDNN_STATUS_BAD_PARAM;
  const bool per_activation = mode == CUDNN_BATCHNORM_PER_ACTIVATION;
  derivedBnDesc->set = true;
  derivedBnDesc->type = derived_type(xDesc->type);
  derivedBnDesc->n = 1;
  derivedBnDesc->c = xDesc->c;
  derivedBnDesc->h = per_activation ? xDesc->h : 1;
  derivedBnDesc->w = per_activation ? xDesc->w : 1;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc, void* y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    double exponentialAverageFactor, void* resultRunningMean, void* resultRunningVariance, double epsilon,
    void* resultSaveMean, void* resultSaveInvVariance) {
  if (!handle || !alpha || !beta || !xDesc || !x || !yDesc || !y || !bnScaleBiasMeanVarDesc || !bnScale || !bnBias)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if ((resultRunningMean == nullptr) != (resultRunningVariance == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  if ((resultSaveMean == nullptr) != (resultSaveInvVariance == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct* datas[] = {xDesc, yDesc};
  const cudnnStatus_t s = check_common(mode, datas, 2, bnScaleBiasMeanVarDesc, epsilon);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const Layout g(xDesc);
  const cudnnDataType_t type = xDesc->type;
  const cudnn_emu::HostScalar sa(type, alpha), sb(type, beta);
  return cudnn_emu::call(handle, [=] {
    auto run = [&](auto zero) {
      using T = decltype(zero);
      forward_training<T>(g, static_cast<const T*>(x), static_cast<T*>(y), static_cast<const T*>(bnScale),
                          static_cast<const T*>(bnBias), exponentialAverageFactor, static_cast<T*>(resultRunningMean),
                          static_cast<T*>(resultRunningVariance), epsilon, static_cast<T*>(resultSaveMean),
                          static_cast<T*>(resultSaveInvVariance), read_scalar<T>(sa.ptr()), read_scalar<T>(sb.ptr()));
    };
    if (type == CUDNN_DATA_DOUBLE) run(0.0);
    else run(0.0f);
  });
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc, void* y,
    const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale, const void* bnBias,
    const void* estimatedMean, const void* estimatedVariance, double epsilon) {
  if (!handle || !alpha || !beta || !xDesc || !x || !yDesc || !y || !bnScaleBiasMeanVarDesc || !bnScale ||
      !bnBias || !estimatedMean || !estimatedVariance)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  const cudnnTensorStruct* datas[] = {xDesc, yDesc};
  const cudnnStatus_t s = check_common(mode, datas, 2, bnScaleBiasMeanVarDesc, epsilon);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const Layout g(xDesc);
  const cudnnDataType_t type = xDesc->type;
  const cudnn_emu::HostScalar sa(type, alpha), sb(type, beta);
  return cudnn_emu::call(handle, [=] {
    auto run = [&](auto zero) {
      using T = decltype(zero);
      forward_inference<T>(g, static_cast<const T*>(x), static_cast<T*>(y), static_cast<const T*>(bnScale),
                           static_cast<const T*>(bnBias), static_cast<const T*>(estimatedMean),
                           static_cast<const T*>(estimatedVariance), epsilon, read_scalar<T>(sa.ptr()),
                           read_scalar<T>(sb.ptr()));
    };
    if (type == CUDNN_DATA_DOUBLE) run(0.0);
    else run(0.0f);
  });
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alphaDataDiff, const void* betaDataDiff,
    const void* alphaParamDiff, const void* betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScale, void* dBnScaleResult, void* dBnBiasResult,
    double epsilon, const void* savedMean, const void* savedInvVariance) {
  if (!handle || !alphaDataDiff || !betaDataDiff || !alphaParamDiff || !betaParamDiff || !xDesc || !x || !dyDesc ||
      !dy || !dxDesc || !dx || !dBnScaleBiasDesc || !bnScale || !dBnScaleResult || !dBnBiasResult)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if ((savedMean == nullptr) != (savedInvVariance == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct* datas[] = {xDesc, dyDesc, dxDesc};
  const cudnnStatus_t s = check_common(mode, datas, 3, dBnScaleBiasDesc, epsilon);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const Layout g(xDesc);
  const cudnnDataType_t type = xDesc->type;
  const cudnn_emu::HostScalar ad(type, alphaDataDiff), bd(type, betaDataDiff), ap(type, alphaParamDiff),
      bp(type, betaParamDiff);
  return cudnn_emu::call(handle, [=] {
    auto run = [&](auto zero) {
      using T = decltype(zero);
      backward<T>(g, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx),
                  static_cast<const T*>(bnScale), static_cast<T*>(dBnScaleResult), static_cast<T*>(dBnBiasResult),
                  epsilon, static_cast<const T*>(savedMean), static_cast<const T*>(savedInvVariance),
                  read_scalar<T>(ad.ptr()), read_scalar<T>(bd.ptr()), read_scalar<T>(ap.ptr()),
                  read_scalar<T>(bp.ptr()));
    };
    if (type == CUDNN_DATA_DOUBLE) run(0.0);
    else run(0.0f);
  });
}
