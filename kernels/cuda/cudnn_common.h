// What every cuDNN caller of the CUDA backend shares (conv, and any family that goes through
// cuDNN): the per-device handle bound to stream(), the status check that turns a cuDNN failure
// into a reel::Error naming the call and the shapes, RAII tensor descriptors, and workspaces from
// reel's caching allocator. The real library under nvcc (where CMake found it: REEL_HAVE_CUDNN),
// the emulated one of kernels/simt/cudnn_emu*.cpp in the host build. Include it only where
// REEL_HAS_CUDNN is 1.
#pragma once
#include <string>

#include "core/tensor.h"

#if defined(SIMT_EMULATE) || defined(REEL_HAVE_CUDNN)
#define REEL_HAS_CUDNN 1
#include "kernels/simt/cudnn.h"
#else
#define REEL_HAS_CUDNN 0
#endif

#if REEL_HAS_CUDNN
namespace reel::kernels::cuda {

// reel::Error "cuDNN error in <call> (<context>): <status>" unless status is SUCCESS.
void check_cudnn(cudnnStatus_t status, const char* call, const std::string& context);
#define REEL_CUDNN(fn, context, ...) ::reel::kernels::cuda::check_cudnn(fn(__VA_ARGS__), #fn, context)

// The handle of the current device, created on first use and bound to stream(). Never destroyed:
// tensors and their kernels may outlive main.
cudnnHandle_t cudnn_handle();

// cuDNN's data type of a floating dtype, and the compute type reel asks for with it: the data type
// for f32 and f64, FLOAT for bf16 and f16 (cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations:
// 16-bit data, f32 sums, one rounding of each output).
inline cudnnDataType_t cudnn_data_type(DType t) {
  switch (t) {
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}
inline cudnnDataType_t cudnn_compute_type(DType t) { return t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

// v as cuDNN's int, or reel::Error "<op> on cuda: <v> exceeds cuDNN's int range (<context>)".
int cudnn_int(int64_t v, const char* op, const std::string& context);

// An NCHW, fully packed 4-D tensor descriptor, created and set in the constructor and destroyed
// with the object.
struct CudnnTensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  CudnnTensorDesc(const Shape& nchw, DType t, const char* op, const std::string& context);
  ~CudnnTensorDesc() { cudnnDestroyTensorDescriptor(d); }
  CudnnTensorDesc(const CudnnTensorDesc&) = delete;
  CudnnTensorDesc& operator=(const CudnnTensorDesc&) = delete;
};

// A workspace of `bytes` from the caching allocator, tagged Temporary (the memory report and the
// timeline show it); undefined when bytes == 0. Every cuDNN call runs on stream(), so the block,
// returned to the cache when the tensor dies, is never reused while cuDNN still reads it.
Tensor cudnn_workspace(size_t bytes, Device device);
inline void* cudnn_workspace_data(const Tensor& ws) { return ws.defined() ? ws.data<double>() : nullptr; }

}  // namespace reel::kernels::cuda
#endif  // REEL_HAS_CUDNN
