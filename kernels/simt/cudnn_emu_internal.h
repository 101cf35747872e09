// kernels/simt/cudnn_emu_internal.h: what the emulated cuDNN's source files share (the emulated
// build only): the descriptor structs behind cudnn.h's opaque handles and the scalar helpers every
// call uses. cudnn_emu.cpp has the handle, tensor descriptors and convolution; each other family
// (pooling, batch normalization) has a cudnn_emu_<family>.cpp of its own.
#pragma once
#include <cstdint>

#include "cudnn.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace simt::detail {
void before_host_work(cudaStream_t stream);  // simt.h (which cudnn.h does not include)
}
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;
  int pad[2] = {0, 0}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace cudnn_emu {

// Before a call computes (at once): the work queued on its stream runs first, or, on the legacy
// stream, what blocking streams have queued (kernels/simt/README.md, "Streams and events").
inline void run_queued(cudnnHandle_t handle) {
  if (handle) simt::detail::before_host_work(handle->stream);
}

inline bool supported_type(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE; }

template <class T>
T read_scalar(const void* p) {
  return *static_cast<const T*>(p);
}

// out = alpha * acc + beta * out; beta == 0: out is not read (NaN there does not propagate).
template <class T>
void blend(T& out, T acc, T alpha, T beta) {
  out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;
}

}  // namespace cudnn_emu
