// CUDA kernels of the conv family (kernels/conv.h): conv2d forward, backward data (dx), backward
// filter (dw) and bias, all through cuDNN: the real library under nvcc (where CMake found it:
// REEL_HAVE_CUDNN), the emulated one of kernels/simt/cudnn_emu.cpp in the host build.
//
// Per call: descriptors for x, w, y (NCHW, fully packed; FMA math, so f32 stays f32 and is never
// rounded to TF32 on tensor cores), the algorithm from cudnnGet*Algorithm_v7: the first one that
// runs AND is deterministic (cuDNN's atomics-based backward algorithms are not: reel promises the
// same bits run to run), its workspace from reel's caching allocator as a Temporary (the memory
// report and timeline show it; it is freed, to the cache, when the call returns, and every call
// runs on stream(), so the block is never reused while cuDNN still reads it). The bias is added
// with cudnnAddTensor and its gradient is cudnnConvolutionBackwardBias. A failing cuDNN status
// raises reel::Error naming the call, the status and the convolution's shapes.
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "kernels/backends.h"
#include "kernels/cuda/launch.h"

#if defined(SIMT_EMULATE) || defined(REEL_HAVE_CUDNN)
#define REEL_CONV_HAS_CUDNN 1
#include "kernels/simt/cudnn.h"
#else
#define REEL_CONV_HAS_CUDNN 0
#endif

namespace reel::kernels::cuda {

#if REEL_CONV_HAS_CUDNN
namespace {

std::string pair_str(const std::array<int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// reel::Error "cuDNN error in <call> (<context>): <status>" unless status is SUCCESS.
void check_cudnn(cudnnStatus_t status, const char* call, const std::string& context) {
  if (status != CUDNN_STATUS_SUCCESS)
    REEL_FAIL("cuDNN error in ", call, " (", context, "): ", cudnnGetErrorString(status));
}
#define REEL_CUDNN(fn, context, ...) check_cudnn(fn(__VA_ARGS__), #fn, context)

// The handle of the current device, created on first use and bound to stream(). Never destroyed:
// tensors and their kernels may outlive main.
cudnnHandle_t handle() {
  static std::mutex mutex;
  static std::vector<cudnnHandle_t>* handles = new std::vector<cudnnHandle_t>;
  int device = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cudnnHandle_t& h = (*handles)[device];
  if (!h) {
    REEL_CUDNN(cudnnCreate, "the handle", &h);
    REEL_CUDNN(cudnnSetStream, "the handle", h, stream());
  }
  return h;
}

cudnnDataType_t data_type(DType t) { return t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

int as_int(int64_t v, const std::string& context) {
  REEL_CHECK(v <= INT_MAX, "conv2d on cuda: ", v, " exceeds cuDNN's int range (", context, ")");
  return static_cast<int>(v);
}

// RAII descriptors: created and set in the constructor, destroyed with the object.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(const Shape& s, DType t, const std::string& ctx) {
    REEL_CUDNN(cudnnCreateTensorDescriptor, ctx, &d);
    try {
      REEL_CUDNN(cudnnSetTensor4dDescriptor, ctx, d, CUDNN_TENSOR_NCHW, data_type(t), as_int(s[0], ctx),
                 as_int(s[1], ctx), as_int(s[2], ctx), as_int(s[3], ctx));
    } catch (...) {  // no destructor runs for an object whose constructor throws
      cudnnDestroyTensorDescriptor(d);
      throw;
    }
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Shape& s, DType t, const std::string& ctx) {
    REEL_CUDNN(cudnnCreateFilterDescriptor, ctx, &d);
    try {
      REEL_CUDNN(cudnnSetFilter4dDescriptor, ctx, d, data_type(t), CUDNN_TENSOR_NCHW, as_int(s[0], ctx),
                 as_int(s[1], ctx), as_int(s[2], ctx), as_int(s[3], ctx));
    } catch (...) {
      cudnnDestroyFilterDescriptor(d);
      throw;
    }
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv2d& p, DType t, const std::string& ctx) {
    REEL_CUDNN(cudnnCreateConvolutionDescriptor, ctx, &d);
    try {
      // Cross-correlation: PyTorch's "convolution" does not flip the kernel.
      REEL_CUDNN(cudnnSetConvolution2dDescriptor, ctx, d, as_int(p.padding[0], ctx), as_int(p.padding[1], ctx),
                 as_int(p.stride[0], ctx), as_int(p.stride[1], ctx), as_int(p.dilation[0], ctx),
                 as_int(p.dilation[1], ctx), CUDNN_CROSS_CORRELATION, data_type(t));
      REEL_CUDNN(cudnnSetConvolutionGroupCount, ctx, d, as_int(p.groups, ctx));
      REEL_CUDNN(cudnnSetConvolutionMathType, ctx, d, CUDNN_FMA_MATH);
    } catch (...) {
      cudnnDestroyConvolutionDescriptor(d);
      throw;
    }
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// One convolution's descriptors: x (N, C, H, W), w (C_out, C / groups, kH, kW), y (N, C_out, OH, OW)
// (or their gradients), and the context every error message carries.
struct Conv {
  std::string ctx;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Conv(const Shape& xs, const Shape& ws, const Shape& ys, DType t, const Conv2d& p)
      : ctx(describe(xs, ws, ys, t, p)), x(xs, t, ctx), y(ys, t, ctx), w(ws, t, ctx), conv(p, t, ctx) {}
  static std::string describe(const Shape& xs, const Shape& ws, const Shape& ys, DType t, const Conv2d& p) {
    return "x " + shape_str(xs) + " weight " + shape_str(ws) + " y " + shape_str(ys) + " " + dtype_name(t) +
           ", stride " + pair_str(p.stride) + " padding " + pair_str(p.padding) + " dilation " +
           pair_str(p.dilation) + " groups " + std::to_string(p.groups);
  }
};

// The first algorithm of a Get*Algorithm_v7 list that runs and is deterministic.
template <typename Perf>
auto pick(const std::vector<Perf>& perf, int returned, const char* query, const std::string& ctx)
    -> decltype(perf[0].algo) {
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC) return perf[i].algo;
  REEL_FAIL("conv2d on cuda: ", query, " offered no deterministic algorithm that runs (", ctx, ")");
}

// A workspace of `bytes` from the caching allocator, tagged Temporary; empty when bytes == 0.
Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  MemoryCategory temporary(Category::Temporary);
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, DType::f64, device);
}
void* data_of(const Tensor& ws) { return ws.defined() ? ws.data<double>() : nullptr; }

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2d& p, const Tensor& y) {
  set_device(x.device());
  const Conv c(x.shape(), w.shape(), y.shape(), x.dtype(), p);
  int count = 0, returned = 0;
  REEL_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount, c.ctx, handle(), &count);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(count));
  REEL_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7, c.ctx, handle(), c.x.d, c.w.d, c.conv.d, c.y.d, count, &returned,
             perf.data());
  const cudnnConvolutionFwdAlgo_t algo = pick(perf, returned, "cudnnGetConvolutionForwardAlgorithm_v7", c.ctx);
  size_t bytes = 0;
  REEL_CUDNN(cudnnGetConvolutionForwardWorkspaceSize, c.ctx, handle(), c.x.d, c.w.d, c.conv.d, c.y.d, algo, &bytes);
  const Tensor ws = workspace(bytes, x.device());
  REEL_DISPATCH_FLOATING(x.dtype(), "conv2d_forward", {
    const scalar_t one = 1, zero = 0;  // beta = 0: y is written, never read
    REEL_CUDNN(cudnnConvolutionForward, c.ctx, handle(), &one, c.x.d, x.data<scalar_t>(), c.w.d, w.data<scalar_t>(),
               c.conv.d, algo, data_of(ws), bytes, &zero, c.y.d, y.data<scalar_t>());
    if (b.defined()) {  // y += b, broadcast from (1, C_out, 1, 1)
      const TensorDesc bias({1, b.size(0), 1, 1}, b.dtype(), c.ctx);
      REEL_CUDNN(cudnnAddTensor, c.ctx, handle(), &one, bias.d, b.data<scalar_t>(), &one, c.y.d, y.data<scalar_t>());
    }
  })
}

void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Conv2d& p, const Tensor& dx) {
  set_device(dy.device());
  const Conv c(dx.shape(), w.shape(), dy.shape(), dy.dtype(), p);
  int count = 0, returned = 0;
  REEL_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount, c.ctx, handle(), &count);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(count));
  REEL_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7, c.ctx, handle(), c.w.d, c.y.d, c.conv.d, c.x.d, count,
             &returned, perf.data());
  const cudnnConvolutionBwdDataAlgo_t algo =
      pick(perf, returned, "cudnnGetConvolutionBackwardDataAlgorithm_v7", c.ctx);
  size_t bytes = 0;
  REEL_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize, c.ctx, handle(), c.w.d, c.y.d, c.conv.d, c.x.d, algo,
             &bytes);
  const Tensor ws = workspace(bytes, dy.device());
  REEL_DISPATCH_FLOATING(dy.dtype(), "conv2d_backward_input", {
    const scalar_t one = 1, zero = 0;
    REEL_CUDNN(cudnnConvolutionBackwardData, c.ctx, handle(), &one, c.w.d, w.data<scalar_t>(), c.y.d,
               dy.data<scalar_t>(), c.conv.d, algo, data_of(ws), bytes, &zero, c.x.d, dx.data<scalar_t>());
  })
}

void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Conv2d& p, const Tensor& dw) {
  set_device(dy.device());
  const Conv c(x.shape(), dw.shape(), dy.shape(), dy.dtype(), p);
  int count = 0, returned = 0;
  REEL_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, c.ctx, handle(), &count);
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(count));
  REEL_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7, c.ctx, handle(), c.x.d, c.y.d, c.conv.d, c.w.d, count,
             &returned, perf.data());
  const cudnnConvolutionBwdFilterAlgo_t algo =
      pick(perf, returned, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", c.ctx);
  size_t bytes = 0;
  REEL_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize, c.ctx, handle(), c.x.d, c.y.d, c.conv.d, c.w.d, algo,
             &bytes);
  const Tensor ws = workspace(bytes, dy.device());
  REEL_DISPATCH_FLOATING(dy.dtype(), "conv2d_backward_weight", {
    const scalar_t one = 1, zero = 0;
    REEL_CUDNN(cudnnConvolutionBackwardFilter, c.ctx, handle(), &one, c.x.d, x.data<scalar_t>(), c.y.d,
               dy.data<scalar_t>(), c.conv.d, algo, data_of(ws), bytes, &zero, c.w.d, dw.data<scalar_t>());
  })
}

void conv2d_backward_bias(const Tensor& dy, const Tensor& db) {
  set_device(dy.device());
  const std::string ctx = "dy " + shape_str(dy.shape()) + " " + dtype_name(dy.dtype());
  const TensorDesc g(dy.shape(), dy.dtype(), ctx), bias({1, db.size(0), 1, 1}, db.dtype(), ctx);
  REEL_DISPATCH_FLOATING(dy.dtype(), "conv2d_backward_bias", {
    const scalar_t one = 1, zero = 0;
    REEL_CUDNN(cudnnConvolutionBackwardBias, ctx, handle(), &one, g.d, dy.data<scalar_t>(), &zero, bias.d,
               db.data<scalar_t>());
  })
}

#else  // an nvcc build where CMake found no cuDNN

namespace {
[[noreturn]] void no_cudnn(const char* op) {
  REEL_FAIL(op, " on cuda needs cuDNN, which this build did not find (cmake/reel_cuda_sources.cmake)");
}
}  // namespace
void conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Conv2d&, const Tensor&) {
  no_cudnn("conv2d_forward");
}
void conv2d_backward_input(const Tensor&, const Tensor&, const Conv2d&, const Tensor&) {
  no_cudnn("conv2d_backward_input");
}
void conv2d_backward_weight(const Tensor&, const Tensor&, const Conv2d&, const Tensor&) {
  no_cudnn("conv2d_backward_weight");
}
void conv2d_backward_bias(const Tensor&, const Tensor&) { no_cudnn("conv2d_backward_bias"); }

#endif  // REEL_CONV_HAS_CUDNN

}  // namespace reel::kernels::cuda
