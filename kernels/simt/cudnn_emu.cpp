// kernels/simt/cudnn_emu.cpp: host implementations of the cuDNN subset in cudnn.h for the emulated
// build. It stands in for an independent library, so it shares no code with reel's CPU convolution
// (kernels/cpu/conv.cpp): the tests comparing the cuda backend with the cpu one then compare two
// implementations. Descriptors are plain structs; every call checks them as cuDNN does and returns
// the status cuDNN would, writing nothing on a failure.
//
// The algorithms it offers, in its order of preference (what the Get*Algorithm_v7 queries list):
//   forward:         GEMM (im2col of one sample and group into the caller's workspace, then an
//                    Eigen GEMM), IMPLICIT_GEMM (direct loops, no workspace)
//   backward data:   ALGO_1 (a gather per dx element, no workspace), ALGO_0 (the same loops, labelled
//                    non-deterministic as cuDNN labels its atomics-based ALGO_0)
//   backward filter: ALGO_1 (a sum per dw element, no workspace), ALGO_0 (labelled
//                    non-deterministic, as in cuDNN)
// every other algorithm is listed after them with CUDNN_STATUS_NOT_SUPPORTED. Sums run in the
// data type (float for FLOAT, as cuDNN's FMA math), in a fixed order. HALF and BFLOAT16 data take a
// FLOAT compute type (cuDNN's pseudo-half configurations): the calls widen their 16-bit operands
// (and an output that beta != 0 reads) to float exactly, run the float computation with float
// alpha and beta, and round each output once to the data type (to nearest even).
// Under simt::DryRun (reel's meta device) each call checks its arguments as ever and computes nothing.
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>

#include "cudnn_emu_internal.h"

namespace {

using cudnn_emu::blend;
using cudnn_emu::read_scalar;
using cudnn_emu::descriptor_type;
using cudnn_emu::is_16bit;
using cudnn_emu::supported_type;

// Runs run(zero, a, b, out) with zero a double or a float (the compute type) and a, b, out the
// operands as that type: as they are for DOUBLE and FLOAT data; for 16-bit data float copies of
// a (na values) and b (nb; b may be null), and of out (nout) where beta != 0 reads it, whose
// results are then rounded once into out.
template <class Run>
void on_data(cudnnDataType_t t, const void* beta, const void* a, size_t na, const void* b, size_t nb, void* out,
             size_t nout, Run run) {
  if (t == CUDNN_DATA_DOUBLE) {
    run(0.0, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(out));
  } else if (is_16bit(t)) {
    const std::vector<float> af = cudnn_emu::widened(t, a, na), bf = cudnn_emu::widened(t, b, b ? nb : 0);
    std::vector<float> of = cudnn_emu::widened(t, read_scalar<float>(beta) == 0.0f ? nullptr : out, nout);
    run(0.0f, af.data(), b ? bf.data() : nullptr, of.data());
    cudnn_emu::narrowed(t, of, out);
  } else {
    run(0.0f, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(out));
  }
}

// One convolution's sizes, from descriptors checked against each other.
struct Geom {
  int64_t N, C, H, W;     // x
  int64_t K, Cg, R, S;    // filter: K outputs, Cg inputs per group, R x S taps
  int64_t OH, OW, G, Kg;  // output plane, groups, outputs per group
  int64_t pad[2], stride[2], dil[2];
  bool flip;  // CUDNN_CONVOLUTION: the filter is applied flipped
  cudnnDataType_t type;
  // The input row (col) read by output row oh (col ow) at filter tap r (s), as stored.
  int64_t in_h(int64_t oh, int64_t r) const { return oh * stride[0] - pad[0] + (flip ? R - 1 - r : r) * dil[0]; }
  int64_t in_w(int64_t ow, int64_t s) const { return ow * stride[1] - pad[1] + (flip ? S - 1 - s : s) * dil[1]; }
  size_t elem() const { return type == CUDNN_DATA_DOUBLE ? sizeof(double) : sizeof(float); }
};

int out_dim(int in, int pad, int filter, int stride, int dil) {
  return (in + 2 * pad - dil * (filter - 1) - 1) / stride + 1;  // may be <= 0: the caller rejects it
}

// The output dims x and w give under conv, or the status that says why there are none.
cudnnStatus_t output_dims(const cudnnConvolutionStruct* conv, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                          int dims[4]) {
  if (!conv || !x || !w) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!conv->set || !x->set || !w->set) return CUDNN_STATUS_BAD_PARAM;
  if (x->c != w->c * conv->groups || w->k % conv->groups != 0) return CUDNN_STATUS_BAD_PARAM;
  dims[0] = x->n;
  dims[1] = w->k;
  dims[2] = out_dim(x->h, conv->pad[0], w->h, conv->stride[0], conv->dilation[0]);
  dims[3] = out_dim(x->w, conv->pad[1], w->w, conv->stride[1], conv->dilation[1]);
  if (dims[2] <= 0 || dims[3] <= 0 || x->h + 2 * conv->pad[0] < conv->dilation[0] * (w->h - 1) + 1 ||
      x->w + 2 * conv->pad[1] < conv->dilation[1] * (w->w - 1) + 1)
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// The checks every convolution call makes: x, w and y (the output or its gradient) agree with
// each other and with conv; one supported data type, the compute type's.
cudnnStatus_t check(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                    const cudnnTensorStruct* y, Geom& g) {
  int dims[4];
  const cudnnStatus_t s = output_dims(conv, x, w, dims);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!y) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!y->set || y->n != dims[0] || y->c != dims[1] || y->h != dims[2] || y->w != dims[3])
    return CUDNN_STATUS_BAD_PARAM;
  if (x->type != w->type || x->type != y->type) return CUDNN_STATUS_BAD_PARAM;
  const bool ok = supported_type(x->type) ? conv->compute == x->type : is_16bit(x->type) && conv->compute == CUDNN_DATA_FLOAT;
  if (!ok) return CUDNN_STATUS_NOT_SUPPORTED;
  g = Geom{x->n, x->c, x->h, x->w, w->k, w->c, w->h, w->w, dims[2], dims[3], conv->groups, w->k / conv->groups,
           {conv->pad[0], conv->pad[1]}, {conv->stride[0], conv->stride[1]}, {conv->dilation[0], conv->dilation[1]},
           conv->mode == CUDNN_CONVOLUTION, x->type};
  return CUDNN_STATUS_SUCCESS;
}

// The forward GEMM algorithm's workspace: one sample and group's im2col matrix (Cg * R * S, OH * OW).
size_t gemm_workspace(const Geom& g) { return static_cast<size_t>(g.Cg * g.R * g.S * g.OH * g.OW) * g.elem(); }

// The element counts of x, w and y.
struct Sizes {
  size_t x, w, y;
};
Sizes sizes(const Geom& g) {
  return {static_cast<size_t>(g.N * g.C * g.H * g.W), static_cast<size_t>(g.K * g.Cg * g.R * g.S),
          static_cast<size_t>(g.N * g.K * g.OH * g.OW)};
}

// ---- forward ----------------------------------------------------------------------------------

// Direct loops: each output sums its group's inputs under the filter. x (N, C, H, W),
// w (K, Cg, R, S), y (N, K, OH, OW).
template <class T>
void forward_direct(const Geom& g, const T* x, const T* w, T* y, T alpha, T beta) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      const int64_t c0 = (k / g.Kg) * g.Cg;
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          T acc = 0;
          for (int64_t c = 0; c < g.Cg; ++c)
            for (int64_t r = 0; r < g.R; ++r) {
              const int64_t ih = g.in_h(oh, r);
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t s = 0; s < g.S; ++s) {
                const int64_t iw = g.in_w(ow, s);
                if (iw < 0 || iw >= g.W) continue;
                acc += w[((k * g.Cg + c) * g.R + r) * g.S + s] * x[((n * g.C + c0 + c) * g.H + ih) * g.W + iw];
              }
            }
          blend(y[((n * g.K + k) * g.OH + oh) * g.OW + ow], acc, alpha, beta);
        }
    }
}

// im2col into the workspace, then one Eigen GEMM per sample and group:
// y[n, group] (Kg, OH * OW) = alpha * w[group] (Kg, Cg * R * S) @ col (Cg * R * S, OH * OW) + beta * y.
template <class T>
void forward_gemm(const Geom& g, const T* x, const T* w, T* y, T alpha, T beta, T* col) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t L = g.OH * g.OW, rows = g.Cg * g.R * g.S;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.G; ++grp) {
      for (int64_t c = 0; c < g.Cg; ++c)
        for (int64_t r = 0; r < g.R; ++r)
          for (int64_t s = 0; s < g.S; ++s) {
            T* row = col + ((c * g.R + r) * g.S + s) * L;
            const T* plane = x + (n * g.C + grp * g.Cg + c) * g.H * g.W;
            for (int64_t oh = 0; oh < g.OH; ++oh)
              for (int64_t ow = 0; ow < g.OW; ++ow) {
                const int64_t ih = g.in_h(oh, r), iw = g.in_w(ow, s);
                row[oh * g.OW + ow] = (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? plane[ih * g.W + iw] : T(0);
              }
          }
      Eigen::Map<const Mat> wg(w + grp * g.Kg * rows, g.Kg, rows);
      Eigen::Map<const Mat> cg(col, rows, L);
      Eigen::Map<Mat> yg(y + (n * g.K + grp * g.Kg) * L, g.Kg, L);
      if (beta == T(0)) {
        yg.noalias() = alpha * (wg * cg);
      } else {
        yg *= beta;
        yg.noalias() += alpha * (wg * cg);
      }
    }
}

// ---- backward ---------------------------------------------------------------------------------

// Each dx element gathers the outputs whose window read it: dy (N, K, OH, OW), w -> dx (N, C, H, W).
template <class T>
void backward_data(const Geom& g, const T* w, const T* dy, T* dx, T alpha, T beta) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t ci = 0; ci < g.C; ++ci) {
      const int64_t grp = ci / g.Cg, c = ci % g.Cg;
      for (int64_t ih = 0; ih < g.H; ++ih)
        for (int64_t iw = 0; iw < g.W; ++iw) {
          T acc = 0;
          for (int64_t r = 0; r < g.R; ++r) {
            const int64_t th = ih + g.pad[0] - (g.flip ? g.R - 1 - r : r) * g.dil[0];
            if (th < 0 || th % g.stride[0] != 0 || th / g.stride[0] >= g.OH) continue;
            const int64_t oh = th / g.stride[0];
            for (int64_t s = 0; s < g.S; ++s) {
              const int64_t tw = iw + g.pad[1] - (g.flip ? g.S - 1 - s : s) * g.dil[1];
              if (tw < 0 || tw % g.stride[1] != 0 || tw / g.stride[1] >= g.OW) continue;
              const int64_t ow = tw / g.stride[1];
              for (int64_t k = grp * g.Kg; k < (grp + 1) * g.Kg; ++k)
                acc += w[((k * g.Cg + c) * g.R + r) * g.S + s] * dy[((n * g.K + k) * g.OH + oh) * g.OW + ow];
            }
          }
          blend(dx[((n * g.C + ci) * g.H + ih) * g.W + iw], acc, alpha, beta);
        }
    }
}

// Each dw element sums dy times the input its tap read, over the batch and the output plane.
template <class T>
void backward_filter(const Geom& g, const T* x, const T* dy, T* dw, T alpha, T beta) {
  for (int64_t k = 0; k < g.K; ++k) {
    const int64_t c0 = (k / g.Kg) * g.Cg;
    for (int64_t c = 0; c < g.Cg; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s) {
          T acc = 0;
          for (int64_t n = 0; n < g.N; ++n) {
            const T* plane = x + (n * g.C + c0 + c) * g.H * g.W;
            const T* dyp = dy + (n * g.K + k) * g.OH * g.OW;
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              const int64_t ih = g.in_h(oh, r);
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t ow = 0; ow < g.OW; ++ow) {
                const int64_t iw = g.in_w(ow, s);
                if (iw >= 0 && iw < g.W) acc += dyp[oh * g.OW + ow] * plane[ih * g.W + iw];
              }
            }
          }
          blend(dw[((k * g.Cg + c) * g.R + r) * g.S + s], acc, alpha, beta);
        }
  }
}

template <class Perf, class Algo>
void fill_perf(Perf& p, Algo algo, cudnnStatus_t status, size_t memory, cudnnDeterminism_t det, cudnnMathType_t m) {
  p = Perf{};
  p.algo = algo;
  p.status = status;
  p.time = -1;  // no measurement: Get*_v7 is a heuristic, as in cuDNN
  p.memory = memory;
  p.determinism = det;
  p.mathType = m;
}

// The supported algorithms first (with their workspace and determinism), then the others with
// NOT_SUPPORTED, up to `requested` entries.
template <class Perf, class Algo>
cudnnStatus_t enumerate(const Algo* supported, const size_t* memory, const cudnnDeterminism_t* det, int n_supported,
                        int count, cudnnMathType_t math, int requested, int* returned, Perf* perf) {
  if (!returned || !perf) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (requested <= 0) return CUDNN_STATUS_BAD_PARAM;
  int out = 0;
  for (int i = 0; i < n_supported && out < requested; ++i)
    fill_perf(perf[out++], supported[i], CUDNN_STATUS_SUCCESS, memory[i], det[i], math);
  for (int a = 0; a < count && out < requested; ++a) {
    if (std::find(supported, supported + n_supported, static_cast<Algo>(a)) != supported + n_supported) continue;
    fill_perf(perf[out++], static_cast<Algo>(a), CUDNN_STATUS_NOT_SUPPORTED, 0, CUDNN_NON_DETERMINISTIC, math);
  }
  *returned = out;
  return CUDNN_STATUS_SUCCESS;
}

constexpr cudnnConvolutionFwdAlgo_t kFwdAlgos[] = {CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
constexpr cudnnConvolutionBwdDataAlgo_t kDataAlgos[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
constexpr cudnnConvolutionBwdFilterAlgo_t kFilterAlgos[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0};
constexpr cudnnDeterminism_t kBothDet[] = {CUDNN_DETERMINISTIC, CUDNN_DETERMINISTIC};
constexpr cudnnDeterminism_t kDetThenNot[] = {CUDNN_DETERMINISTIC, CUDNN_NON_DETERMINISTIC};

// An enum value within [0, count) (compared as int: an enum's underlying type may be unsigned).
bool in_range(int value, int count) { return value >= 0 && value < count; }

// The workspace an algorithm needs, or false when the emulator does not implement it.
bool fwd_workspace(const Geom& g, cudnnConvolutionFwdAlgo_t algo, size_t& bytes) {
  if (algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM) bytes = gemm_workspace(g);
  else if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) bytes = 0;
  else return false;
  return true;
}
template <class Algo, size_t N>
bool listed(const Algo (&algos)[N], Algo algo) {
  return std::find(algos, algos + N, algo) != algos + N;
}

// The workspace the caller passed covers `need`.
bool workspace_ok(const void* ws, size_t size, size_t need) { return need == 0 || (ws && size >= need); }

}  // namespace

// ---- status, handle, descriptors ----------------------------------------------------------------

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (!handle || !stream) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *desc = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;  // null is allowed, as in cuDNN
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || !descriptor_type(dataType)) return CUDNN_STATUS_NOT_SUPPORTED;
  *desc = cudnnTensorStruct{true, dataType, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *desc = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || !descriptor_type(dataType)) return CUDNN_STATUS_NOT_SUPPORTED;
  *desc = cudnnFilterStruct{true, dataType, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *desc = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_BAD_PARAM;
  desc->set = true;
  desc->pad[0] = pad_h, desc->pad[1] = pad_w;
  desc->stride[0] = u, desc->stride[1] = v;
  desc->dilation[0] = dilation_h, desc->dilation[1] = dilation_w;
  desc->mode = mode;
  desc->compute = computeType;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groupCount) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (groupCount < 1) return CUDNN_STATUS_BAD_PARAM;
  desc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t mathType) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!in_range(mathType, CUDNN_FMA_MATH + 1)) return CUDNN_STATUS_BAD_PARAM;
  desc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t desc,
                                                    const cudnnTensorDescriptor_t inputDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int* n, int* c, int* h,
                                                    int* w) {
  if (!n || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  int dims[4];
  const cudnnStatus_t s = output_dims(desc, inputDesc, filterDesc, dims);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  *n = dims[0], *c = dims[1], *h = dims[2], *w = dims[3];
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithms and workspaces ------------------------------------------------------------------

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  if (!handle || !count) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  if (!handle || !count) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  if (!handle || !count) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(srcDesc, filterDesc, convDesc, destDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const size_t memory[] = {gemm_workspace(g), 0};
  return enumerate(kFwdAlgos, memory, kBothDet, 2, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, convDesc->math,
                   requestedAlgoCount, returnedAlgoCount, perfResults);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
                                                          const cudnnFilterDescriptor_t filterDesc,
                                                          const cudnnTensorDescriptor_t diffDesc,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t gradDesc,
                                                          const int requestedAlgoCount, int* returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(gradDesc, filterDesc, convDesc, diffDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const size_t memory[] = {0, 0};
  return enumerate(kDataAlgos, memory, kDetThenNot, 2, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, convDesc->math,
                   requestedAlgoCount, returnedAlgoCount, perfResults);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
                                                            const cudnnTensorDescriptor_t srcDesc,
                                                            const cudnnTensorDescriptor_t diffDesc,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t gradDesc,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(srcDesc, gradDesc, convDesc, diffDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const size_t memory[] = {0, 0};
  return enumerate(kFilterAlgos, memory, kDetThenNot, 2, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, convDesc->math,
                   requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  if (!handle || !sizeInBytes) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(xDesc, wDesc, convDesc, yDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!in_range(algo, CUDNN_CONVOLUTION_FWD_ALGO_COUNT)) return CUDNN_STATUS_BAD_PARAM;
  return fwd_workspace(g, algo, *sizeInBytes) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  if (!handle || !sizeInBytes) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(dxDesc, wDesc, convDesc, dyDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!in_range(algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)) return CUDNN_STATUS_BAD_PARAM;
  if (!listed(kDataAlgos, algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  *sizeInBytes = 0;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle,
                                                             const cudnnTensorDescriptor_t xDesc,
                                                             const cudnnTensorDescriptor_t dyDesc,
                                                             const cudnnConvolutionDescriptor_t convDesc,
                                                             const cudnnFilterDescriptor_t gradDesc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                                             size_t* sizeInBytes) {
  if (!handle || !sizeInBytes) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(xDesc, gradDesc, convDesc, dyDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!in_range(algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)) return CUDNN_STATUS_BAD_PARAM;
  if (!listed(kFilterAlgos, algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  *sizeInBytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

// ---- the computations -------------------------------------------------------------------------

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  if (!handle || !alpha || !beta || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(xDesc, wDesc, convDesc, yDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!in_range(algo, CUDNN_CONVOLUTION_FWD_ALGO_COUNT)) return CUDNN_STATUS_BAD_PARAM;
  size_t need = 0;
  if (!fwd_workspace(g, algo, need)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!workspace_ok(workSpace, workSpaceSizeInBytes, need)) return CUDNN_STATUS_BAD_PARAM;
  const cudnn_emu::HostScalar sa(g.type, alpha), sb(g.type, beta);
  return cudnn_emu::call(handle, [=] {
    on_data(g.type, sb.ptr(), x, sizes(g).x, w, sizes(g).w, y, sizes(g).y, [&](auto zero, auto xp, auto wp, auto yp) {
      using T = decltype(zero);
      const T a = read_scalar<T>(sa.ptr()), b = read_scalar<T>(sb.ptr());
      if (algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM)
        forward_gemm(g, xp, wp, yp, a, b, static_cast<T*>(workSpace));
      else
        forward_direct(g, xp, wp, yp, a, b);
    });
  });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  if (!handle || !alpha || !beta || !w || !dy || !dx) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(dxDesc, wDesc, convDesc, dyDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!in_range(algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)) return CUDNN_STATUS_BAD_PARAM;
  if (!listed(kDataAlgos, algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  (void)workSpace, (void)workSpaceSizeInBytes;  // neither algorithm needs one
  const cudnn_emu::HostScalar sa(g.type, alpha), sb(g.type, beta);
  return cudnn_emu::call(handle, [=] {
    on_data(g.type, sb.ptr(), w, sizes(g).w, dy, sizes(g).y, dx, sizes(g).x, [&](auto zero, auto wp, auto dyp, auto dxp) {
      using T = decltype(zero);
      backward_data(g, wp, dyp, dxp, read_scalar<T>(sa.ptr()), read_scalar<T>(sb.ptr()));
    });
  });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  if (!handle || !alpha || !beta || !x || !dy || !dw) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Geom g{};
  const cudnnStatus_t s = check(xDesc, dwDesc, convDesc, dyDesc, g);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!in_range(algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)) return CUDNN_STATUS_BAD_PARAM;
  if (!listed(kFilterAlgos, algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  (void)workSpace, (void)workSpaceSizeInBytes;
  const cudnn_emu::HostScalar sa(g.type, alpha), sb(g.type, beta);
  return cudnn_emu::call(handle, [=] {
    on_data(g.type, sb.ptr(), x, sizes(g).x, dy, sizes(g).y, dw, sizes(g).w, [&](auto zero, auto xp, auto dyp, auto dwp) {
      using T = decltype(zero);
      backward_filter(g, xp, dyp, dwp, read_scalar<T>(sa.ptr()), read_scalar<T>(sb.ptr()));
    });
  });
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void* alpha,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy, const void* beta,
                                           const cudnnTensorDescriptor_t dbDesc, void* db) {
  if (!handle || !alpha || !beta || !dy || !db || !dyDesc || !dbDesc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!dyDesc->set || !dbDesc->set || dyDesc->type != dbDesc->type) return CUDNN_STATUS_BAD_PARAM;
  if (dbDesc->n != 1 || dbDesc->c != dyDesc->c || dbDesc->h != 1 || dbDesc->w != 1) return CUDNN_STATUS_BAD_PARAM;
  const int64_t N = dyDesc->n, C = dyDesc->c, L = int64_t{dyDesc->h} * dyDesc->w;
  const size_t ndy = static_cast<size_t>(N * C * L), ndb = static_cast<size_t>(C);
  const cudnnDataType_t type = dyDesc->type;
  const cudnn_emu::HostScalar sa(type, alpha), sb(type, beta);
  return cudnn_emu::call(handle, [=] {
    on_data(type, sb.ptr(), dy, ndy, nullptr, 0, db, ndb, [&](auto zero, auto g, auto, auto out) {
      using T = decltype(zero);
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t l = 0; l < L; ++l) acc += g[(n * C + c) * L + l];
        blend(out[c], acc, read_scalar<T>(sa.ptr()), read_scalar<T>(sb.ptr()));
      }
    });
  });
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t aDesc,
                             const void* A, const void* beta, const cudnnTensorDescriptor_t cDesc, void* C) {
  if (!handle || !alpha || !beta || !A || !C || !aDesc || !cDesc) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!aDesc->set || !cDesc->set || aDesc->type != cDesc->type) return CUDNN_STATUS_BAD_PARAM;
  const int a[4] = {aDesc->n, aDesc->c, aDesc->h, aDesc->w}, c[4] = {cDesc->n, cDesc->c, cDesc->h, cDesc->w};
  for (int i = 0; i < 4; ++i)
    if (a[i] != 1 && a[i] != c[i]) return CUDNN_STATUS_BAD_PARAM;
  const size_t na = static_cast<size_t>(a[0]) * a[1] * a[2] * a[3], nc = static_cast<size_t>(c[0]) * c[1] * c[2] * c[3];
  const cudnnDataType_t type = cDesc->type;
  const cudnn_emu::HostScalar sa(type, alpha), sb(type, beta);
  return cudnn_emu::call(handle, [=] {
    on_data(type, sb.ptr(), A, na, nullptr, 0, C, nc, [&](auto zero, auto in, auto, auto out) {
      using T = decltype(zero);
      const T al = read_scalar<T>(sa.ptr()), be = read_scalar<T>(sb.ptr());
      for (int64_t n = 0; n < c[0]; ++n)
        for (int64_t ch = 0; ch < c[1]; ++ch)
          for (int64_t h = 0; h < c[2]; ++h)
            for (int64_t w = 0; w < c[3]; ++w) {
              // A's index: 0 along each broadcast (size 1) dim.
              const int64_t ai =
                  (((a[0] == 1 ? 0 : n) * a[1] + (a[1] == 1 ? 0 : ch)) * a[2] + (a[2] == 1 ? 0 : h)) * a[3] +
                  (a[3] == 1 ? 0 : w);
              blend(out[((n * c[1] + ch) * c[2] + h) * c[3] + w], in[ai], al, be);
            }
    });
  });
}
