// CUDA kernels of the conv family (kernels/conv.h): conv2d forward, backward data (dx), backward
// filter (dw) and bias, all through cuDNN: the real library under nvcc (where CMake found it:
// REEL_HAVE_CUDNN), the emulated one of kernels/simt/cudnn_emu.cpp in the host build.
//
// Per call: descriptors for x, w, y (NCHW, fully packed; FMA math, so f32 stays f32 and is never
// rounded to TF32 on tensor cores; bf16 and f16 data with an f32 compute type: f32 sums, each output
// rounded once, the bias of a 16-bit forward put in y first and added inside the convolution's
// beta = 1 blend so that y is rounded once, not twice), the algorithm from cudnnGet*Algorithm_v7: the first one that
// runs AND is deterministic (cuDNN's atomics-based backward algorithms are not: reel promises the
// same bits run to run), its workspace from reel's caching allocator as a Temporary (the memory
// report and timeline show it; it is freed, to the cache, when the call returns, and every call
// runs on stream(), so the block is never reused while cuDNN still reads it). The bias is added
// with cudnnAddTensor and its gradient is cudnnConvolutionBackwardBias. A failing cuDNN status
// raises reel::Error naming the call, the status and the convolution's shapes.
#include <string>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cuda/cudnn_common.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

#if REEL_HAS_CUDNN
namespace {

constexpr const char* kOp = "conv2d";

std::string pair_str(const std::array<int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Shape& s, DType t, const std::string& ctx) {
    REEL_CUDNN(cudnnCreateFilterDescriptor, ctx, &d);
    try {
      REEL_CUDNN(cudnnSetFilter4dDescriptor, ctx, d, cudnn_data_type(t), CUDNN_TENSOR_NCHW,
                 cudnn_int(s[0], kOp, ctx), cudnn_int(s[1], kOp, ctx), cudnn_int(s[2], kOp, ctx),
                 cudnn_int(s[3], kOp, ctx));
    } catch (...) {  // no destructor runs for an object whose constructor throws
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
      REEL_CUDNN(cudnnSetConvolution2dDescriptor, ctx, d, cudnn_int(p.padding[0], kOp, ctx),
                 cudnn_int(p.padding[1], kOp, ctx), cudnn_int(p.stride[0], kOp, ctx), cudnn_int(p.stride[1], kOp, ctx),
                 cudnn_int(p.dilation[0], kOp, ctx), cudnn_int(p.dilation[1], kOp, ctx), CUDNN_CROSS_CORRELATION,
                 cudnn_compute_type(t));
      REEL_CUDNN(cudnnSetConvolutionGroupCount, ctx, d, cudnn_int(p.groups, kOp, ctx));
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
  CudnnTensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Conv(const Shape& xs, const Shape& ws, const Shape& ys, DType t, const Conv2d& p)
      : ctx(describe(xs, ws, ys, t, p)), x(xs, t, kOp, ctx), y(ys, t, kOp, ctx), w(ws, t, ctx), conv(p, t, ctx) {}
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

// The three passes differ only in which cuDNN queries and call they use, and in which descriptors
// are their input, second operand and output; Pass names them (cuDNN's own argument order).
struct ForwardPass {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr const char* query = "cudnnGetConvolutionForwardAlgorithm_v7";
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); }
  static cudnnStatus_t get(const Conv& c, int n, int* r, Perf* p) {
    return cudnnGetConvolutionForwardAlgorithm_v7(cudnn_handle(), c.x.d, c.w.d, c.conv.d, c.y.d, n, r, p);
  }
  static cudnnStatus_t workspace(const Conv& c, decltype(Perf::algo) a, size_t* b) {
    return cudnnGetConvolutionForwardWorkspaceSize(cudnn_handle(), c.x.d, c.w.d, c.conv.d, c.y.d, a, b);
  }
};
struct BackwardDataPass {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr const char* query = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t get(const Conv& c, int n, int* r, Perf* p) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_handle(), c.w.d, c.y.d, c.conv.d, c.x.d, n, r, p);
  }
  static cudnnStatus_t workspace(const Conv& c, decltype(Perf::algo) a, size_t* b) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_handle(), c.w.d, c.y.d, c.conv.d, c.x.d, a, b);
  }
};
struct BackwardFilterPass {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  static constexpr const char* query = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t get(const Conv& c, int n, int* r, Perf* p) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn_handle(), c.x.d, c.y.d, c.conv.d, c.w.d, n, r, p);
  }
  static cudnnStatus_t workspace(const Conv& c, decltype(Perf::algo) a, size_t* b) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn_handle(), c.x.d, c.y.d, c.conv.d, c.w.d, a, b);
  }
};

// A pass's chosen algorithm and its workspace (from the caching allocator, a Temporary).
template <typename Pass>
struct Plan {
  decltype(Pass::Perf::algo) algo;
  size_t bytes = 0;
  Tensor workspace;
  Plan(const Conv& c, Device device) {
    int count = 0, returned = 0;
    check_cudnn(Pass::max_count(cudnn_handle(), &count), "cudnnGet*AlgorithmMaxCount", c.ctx);
    std::vector<typename Pass::Perf> perf(static_cast<size_t>(count));
    check_cudnn(Pass::get(c, count, &returned, perf.data()), Pass::query, c.ctx);
    algo = pick(perf, returned, Pass::query, c.ctx);
    check_cudnn(Pass::workspace(c, algo, &bytes), "cudnnGet*WorkspaceSize", c.ctx);
    workspace = cudnn_workspace(bytes, device);
  }
  void* data() const { return cudnn_workspace_data(workspace); }
};

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2d& p, const Tensor& y) {
  set_device(x.device());
  const Conv c(x.shape(), w.shape(), y.shape(), x.dtype(), p);
  const Plan<ForwardPass> plan(c, x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "conv2d_forward", {
    // cuDNN blend factors: acc_t (float for float and 16-bit data, double for double).
    const acc_t one = 1, zero = 0;
    if (is_16bit_floating(x.dtype()) && b.defined()) {
      // y = b broadcast (exact), then y = conv + 1 * y: the bias joins the f32 sum and each y is
      // rounded once (conv first, then cudnnAddTensor, would round y twice).
      const CudnnTensorDesc bias({1, b.size(0), 1, 1}, b.dtype(), kOp, c.ctx);
      REEL_CUDNN(cudnnAddTensor, c.ctx, cudnn_handle(), &one, bias.d, b.data<scalar_t>(), &zero, c.y.d,
                 y.data<scalar_t>());
      REEL_CUDNN(cudnnConvolutionForward, c.ctx, cudnn_handle(), &one, c.x.d, x.data<scalar_t>(), c.w.d,
                 w.data<scalar_t>(), c.conv.d, plan.algo, plan.data(), plan.bytes, &one, c.y.d, y.data<scalar_t>());
      return;
    }
    // beta = 0: y is written, never read
    REEL_CUDNN(cudnnConvolutionForward, c.ctx, cudnn_handle(), &one, c.x.d, x.data<scalar_t>(), c.w.d,
               w.data<scalar_t>(), c.conv.d, plan.algo, plan.data(), plan.bytes, &zero, c.y.d, y.data<scalar_t>());
    if (b.defined()) {  // y += b, broadcast from (1, C_out, 1, 1)
      const CudnnTensorDesc bias({1, b.size(0), 1, 1}, b.dtype(), kOp, c.ctx);
      REEL_CUDNN(cudnnAddTensor, c.ctx, cudnn_handle(), &one, bias.d, b.data<scalar_t>(), &one, c.y.d,
                 y.data<scalar_t>());
    }
  })
}

void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Conv2d& p, const Tensor& dx) {
  set_device(dy.device());
  const Conv c(dx.shape(), w.shape(), dy.shape(), dy.dtype(), p);
  const Plan<BackwardDataPass> plan(c, dy.device());
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "conv2d_backward_input", {
    const acc_t one = 1, zero = 0;
    REEL_CUDNN(cudnnConvolutionBackwardData, c.ctx, cudnn_handle(), &one, c.w.d, w.data<scalar_t>(), c.y.d,
               dy.data<scalar_t>(), c.conv.d, plan.algo, plan.data(), plan.bytes, &zero, c.x.d, dx.data<scalar_t>());
  })
}

void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Conv2d& p, const Tensor& dw) {
  set_device(dy.device());
  const Conv c(x.shape(), dw.shape(), dy.shape(), dy.dtype(), p);
  const Plan<BackwardFilterPass> plan(c, dy.device());
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "conv2d_backward_weight", {
    const acc_t one = 1, zero = 0;
    REEL_CUDNN(cudnnConvolutionBackwardFilter, c.ctx, cudnn_handle(), &one, c.x.d, x.data<scalar_t>(), c.y.d,
               dy.data<scalar_t>(), c.conv.d, plan.algo, plan.data(), plan.bytes, &zero, c.w.d, dw.data<scalar_t>());
  })
}

void conv2d_backward_bias(const Tensor& dy, const Tensor& db) {
  set_device(dy.device());
  const std::string ctx = "dy " + shape_str(dy.shape()) + " " + dtype_name(dy.dtype());
  const CudnnTensorDesc g(dy.shape(), dy.dtype(), kOp, ctx), bias({1, db.size(0), 1, 1}, db.dtype(), kOp, ctx);
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "conv2d_backward_bias", {
    const acc_t one = 1, zero = 0;
    REEL_CUDNN(cudnnConvolutionBackwardBias, ctx, cudnn_handle(), &one, g.d, dy.data<scalar_t>(), &zero, bias.d,
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

#endif  // REEL_HAS_CUDNN

}  // namespace reel::kernels::cuda
