// kernels/cuda/cudnn_common.h: the cuDNN handle, status checks, descriptors and workspaces.
#include "kernels/cuda/cudnn_common.h"

#if REEL_HAS_CUDNN
#include <climits>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

void check_cudnn(cudnnStatus_t status, const char* call, const std::string& context) {
  if (status != CUDNN_STATUS_SUCCESS)
    REEL_FAIL("cuDNN error in ", call, " (", context, "): ", cudnnGetErrorString(status));
}

cudnnHandle_t cudnn_handle() {
  static std::mutex mutex;
  static std::vector<cudnnHandle_t>* handles = new std::vector<cudnnHandle_t>;
  int device = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cudnnHandle_t& h = (*handles)[device];
  if (!h) REEL_CUDNN(cudnnCreate, "the handle", &h);
  // Bound to stream() at each call: the capture stream while a CUDA graph captures (core/graph.h).
  cudaStream_t bound = nullptr;
  REEL_CUDNN(cudnnGetStream, "the handle", h, &bound);
  if (bound != stream()) REEL_CUDNN(cudnnSetStream, "the handle", h, stream());
  return h;
}

int cudnn_int(int64_t v, const char* op, const std::string& context) {
  REEL_CHECK(v <= INT_MAX, op, " on cuda: ", v, " exceeds cuDNN's int range (", context, ")");
  return static_cast<int>(v);
}

CudnnTensorDesc::CudnnTensorDesc(const Shape& s, DType t, const char* op, const std::string& ctx) {
  REEL_CUDNN(cudnnCreateTensorDescriptor, ctx, &d);
  try {
    REEL_CUDNN(cudnnSetTensor4dDescriptor, ctx, d, CUDNN_TENSOR_NCHW, cudnn_data_type(t), cudnn_int(s[0], op, ctx),
               cudnn_int(s[1], op, ctx), cudnn_int(s[2], op, ctx), cudnn_int(s[3], op, ctx));
  } catch (...) {  // no destructor runs for an object whose constructor throws
    cudnnDestroyTensorDescriptor(d);
    throw;
  }
}

Tensor cudnn_workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  MemoryCategory temporary(Category::Temporary);
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, DType::f64, device);
}

}  // namespace reel::kernels::cuda
#endif  // REEL_HAS_CUDNN
