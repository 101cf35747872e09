// How a matmul operand is handed to a GEMM (Eigen on the CPU, cuBLAS on CUDA) without a copy:
// its last two dims as a row-major matrix (last dim stride 1) or a column-major one (second-last
// stride 1: a transposed view), with the leading dimension; any other layout is made contiguous.
// Also the batch index -> operand offsets of a batched product. Shared by kernels/cpu/matmul.cpp
// and kernels/cuda/matmul.cu so both read strides the same way.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/indexing.h"

namespace reel::kernels {

struct MatmulOperand {
  Tensor t;  // the operand itself, or the contiguous copy that had to be made
  bool col_major = false;
  int64_t ld = 0;
};

inline MatmulOperand matmul_operand(const Tensor& x) {
  const int64_t r = x.dim();
  const int64_t rows = x.size(r - 2), cols = x.size(r - 1);
  const int64_t s_row = x.stride(r - 2), s_col = x.stride(r - 1);
  if (s_col == 1 && (s_row >= cols || rows == 1)) return {x, false, std::max<int64_t>(s_row, cols)};
  if (s_row == 1 && (s_col >= rows || cols == 1)) return {x, true, std::max<int64_t>(s_col, rows)};
  return {untracked::contiguous(x), false, cols};
}

// The offsets (elements) in a and b of product `batch`, row-major over the batch dims
// sizes[0..batch_dims) (the leading dims of out); a and b have one stride per dim there (0 where
// broadcast).
inline void matmul_batch_offsets(int64_t batch, int batch_dims, const int64_t* sizes, const Tensor& a,
                                 const Tensor& b, int64_t& oa, int64_t& ob) {
  const int64_t* sa = a.strides().data();
  const int64_t* sb = b.strides().data();
  oa = ob = 0;
  unravel_index<int64_t>(batch, batch_dims, sizes, [&](int d, int64_t i) {
    oa += i * sa[d];
    ob += i * sb[d];
  });
}

}  // namespace reel::kernels
