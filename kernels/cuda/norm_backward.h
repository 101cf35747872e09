// kernels/cuda/norm_backward.h: the two halves of the LayerNorm backward on cuda
// (kernels/cuda/layernorm.cu), for a kernel that runs the second half beside work of its own in one
// launch (the embeddings' backward after block 0's ln_1: kernels/cuda/embedding.cu).
//   1. layernorm_backward_rows: the block-per-chunk kernel; writes dx (with dx_add added) and
//      returns the (2, chunks, C) double partials of dw and db;
//   2. finish_norm_param: one column of dw or db, the chunks' partials added in chunk order and
//      written (or added to a .grad): the same code as layernorm_backward's own second kernel, so
//      the same bits wherever it runs.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

// out[c] = sum over chunks k, in order, of partial[p, k, c] (partial: (params, chunks, C) double),
// rounded to T; where add, added to out's value (the sum rounded to T first, then added; double
// holds both T values and rounds their sum once, as T's own add would). out is read only when add.
template <typename T>
__device__ __forceinline__ void finish_norm_param(const double* partial, int64_t p, int64_t chunks, int64_t C,
                                                  int64_t c, T* out, bool add) {
  const double* slab = partial + p * chunks * C;
  double s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += slab[k * C + c];
  const T g = static_cast<T>(s);
  out[c] = add ? static_cast<T>(static_cast<double>(out[c]) + static_cast<double>(g)) : g;
}

// Half 1 of layernorm_backward on (R, C) rows (operands as the backend's layernorm_backward takes
// them): dx written; returns the partials (2, chunks, C) double for finish_norm_param.
Tensor layernorm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dx_add, const Tensor& dx);

}  // namespace reel::kernels::cuda
