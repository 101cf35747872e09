// What the tests of the cuDNN contract (tests/test_cudnn_emu*.cpp) share: a handle and NCHW tensor
// descriptors that free themselves, and the BAD_PARAM family of statuses. Included only where
// cudnn.h is (the emulated build, or an nvcc build with cuDNN).
#pragma once
#include "core/tensor.h"
#include "kernels/simt/cudnn.h"
#include "testing.h"

namespace reel::testing {

struct CudnnHandle {
  cudnnHandle_t h = nullptr;
  CudnnHandle() { REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS); }
  ~CudnnHandle() { cudnnDestroy(h); }
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
};

// A (N, C, H, W) tensor descriptor, NCHW, fully packed.
struct CudnnDesc {
  cudnnTensorDescriptor_t d = nullptr;
  CudnnDesc(int n, int c, int h, int w, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
    REQUIRE(cudnnCreateTensorDescriptor(&d) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, n, c, h, w) == CUDNN_STATUS_SUCCESS);
  }
  CudnnDesc(const Shape& s, DType t)
      : CudnnDesc(static_cast<int>(s[0]), static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[3]),
                  t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT) {}
  ~CudnnDesc() { cudnnDestroyTensorDescriptor(d); }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
};

// Any status of the BAD_PARAM family (cuDNN 9 returns sub-codes such as BAD_PARAM_NULL_POINTER).
inline bool cudnn_bad_param(cudnnStatus_t s) { return s >= CUDNN_STATUS_BAD_PARAM && s < CUDNN_STATUS_NOT_SUPPORTED; }

}  // namespace reel::testing
