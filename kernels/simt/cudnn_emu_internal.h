// kernels/simt/cudnn_emu_internal.h: what the emulated cuDNN's source files share (the emulated
// build only): the descriptor structs behind cudnn.h's opaque handles and the scalar helpers every
// call uses, and the 16-bit conversions of the convolution calls. cudnn_emu.cpp has the handle,
// tensor descriptors and convolution; each other family (pooling, batch normalization) has a
// cudnn_emu_<family>.cpp of its own.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/half.h"  // reel::bf16, reel::f16: the 16-bit conversions
#include "cudnn.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace simt {
bool dry_run();  // simt.h: the meta device's dry run (computes nothing)
}
namespace simt::detail {
// simt.h (which cudnn.h does not include): the computation now, after the work queued on its
// stream, or a node of the stream's capture; false: refused by the capture rules.
bool library_call(cudaStream_t stream, std::function<void()> work);
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

// A call's computation, once its arguments are checked: it runs at once, after the work queued on
// its stream or, on the legacy stream, what blocking streams have queued (kernels/simt/README.md,
// "Streams and events"); while the stream captures it is a graph node instead ("Graphs"), so it
// must hold copies of everything it reads but device memory. Under DryRun it computes nothing.
inline cudnnStatus_t call(cudnnHandle_t handle, std::function<void()> work) {
  return simt::detail::library_call(handle->stream, std::move(work)) ? CUDNN_STATUS_SUCCESS
                                                                      : CUDNN_STATUS_EXECUTION_FAILED;
}

// A host scalar (alpha, beta) copied at the call, as cuDNN reads it: double for DOUBLE data, float
// otherwise. ptr() is what read_scalar reads.
class HostScalar {
 public:
  HostScalar(cudnnDataType_t t, const void* p) : is_double_(t == CUDNN_DATA_DOUBLE) {
    if (is_double_) std::memcpy(&d_, p, sizeof d_);
    else std::memcpy(&f_, p, sizeof f_);
  }
  const void* ptr() const { return is_double_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_); }

 private:
  bool is_double_;
  double d_ = 0;
  float f_ = 0;
};

// The data types pooling and batch normalization compute in (their compute type is the data type).
inline bool supported_type(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE; }
// The 16-bit data types: descriptors take them; the convolution calls and cudnnAddTensor run them
// with FLOAT compute (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations); pooling and batch
// normalization answer CUDNN_STATUS_NOT_SUPPORTED.
inline bool is_16bit(cudnnDataType_t t) { return t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16; }
inline bool descriptor_type(cudnnDataType_t t) { return supported_type(t) || is_16bit(t); }

// ---- 16-bit conversions ------------------------------------------------------------------------
// Exact widening and round-to-nearest-even narrowing (NaN quieted, sign and top payload kept):
// reel's own (core/half.h, the one source of the 16-bit bit code, checked by tests/test_half.cpp
// against an independent ldexp reference), as cublas_emu.cpp's GemmEx uses them.
inline float widen16(cudnnDataType_t t, uint16_t h) {
  return t == CUDNN_DATA_BFLOAT16 ? static_cast<float>(reel::bf16::from_bits(h)) : static_cast<float>(reel::f16::from_bits(h));
}
inline uint16_t narrow16(cudnnDataType_t t, float f) {
  return t == CUDNN_DATA_BFLOAT16 ? reel::bf16(f).bits : reel::f16(f).bits;
}
// n 16-bit values of type t widened to float; null (an output beta == 0 does not read): zeros.
inline std::vector<float> widened(cudnnDataType_t t, const void* p, size_t n) {
  std::vector<float> v(n, 0.0f);
  if (p)
    for (size_t i = 0; i < n; ++i) v[i] = widen16(t, static_cast<const uint16_t*>(p)[i]);
  return v;
}
// Each float of v rounded once to the 16-bit type t, into p.
inline void narrowed(cudnnDataType_t t, const std::vector<float>& v, void* p) {
  for (size_t i = 0; i < v.size(); ++i) static_cast<uint16_t*>(p)[i] = narrow16(t, v[i]);
}

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
