// kernels/indexing.h: the index arithmetic the CPU and CUDA backends share, so that both walk a
// strided tensor the same way.
//
// * unravel_index: linear index -> the multi-index of a row-major iteration space, one dim at a
//   time (innermost first); the callers turn each coordinate into operand offsets. Host and
//   device (cpu::StridedLoop, cuda::OffsetCalc, matmul batching, the reductions).
// * coalesce: drops size-1 dims and merges a dim into its inner neighbour when, in every
//   operand, stepping the outer dim once is the same as stepping the inner one size times. A
//   contiguous tensor becomes one flat dim and a broadcast bias add (rows, C) + (C) two. Host
//   only: a launcher coalesces and hands the kernel the result (cuda::OffsetCalc).
// * split_reduced: the kept and reduced dims of a reduction's input (host).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/philox.h"  // REEL_HOST_DEVICE
#include "core/tensor.h"

namespace reel::kernels {

// ---- host and device -------------------------------------------------------------------------

// nvcc checks that a __host__ __device__ template calls only __host__ __device__ functions; a
// host caller's visitor lambda is host-only, which is fine where the instantiation runs on the host.
#if defined(__NVCC__)
#define REEL_NO_EXEC_CHECK _Pragma("nv_exec_check_disable")
#else
#define REEL_NO_EXEC_CHECK
#endif

// Unravels linear index i (row-major over sizes[0..rank), innermost last): calls visit(d, i_d)
// for d = rank - 1 down to 0. Index is the type the division runs in: uint32_t when the space
// fits (a GPU divides 64-bit integers in software, ~20x a 32-bit divide), else int64_t.
REEL_NO_EXEC_CHECK
template <typename Index, typename Visit>
REEL_HOST_DEVICE inline void unravel_index(Index i, int rank, const int64_t* sizes, Visit&& visit) {
  for (int d = rank - 1; d >= 0; --d) {
    const Index size = static_cast<Index>(sizes[d]);
    const Index idx = i % size;
    i /= size;
    visit(d, static_cast<int64_t>(idx));
  }
}

// ---- host --------------------------------------------------------------------------------------

// An iteration space after coalescing: sizes (innermost last; empty for a single element) and
// strides[d][k], the element stride of operand k along dim d.
template <size_t N>
struct CoalescedDims {
  Shape sizes;
  std::vector<std::array<int64_t, N>> strides;
};

// Coalesces `shape` with the strides of N operands of that shape: drops size-1 dims and merges a
// dim into its inner neighbour when that is contiguous with it in every operand.
template <size_t N>
CoalescedDims<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& operand_strides) {
  CoalescedDims<N> c;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!c.sizes.empty()) {
      bool mergeable = true;  // can the previous (outer) dim fold into this one?
      for (size_t k = 0; k < N; ++k)
        if (c.strides.back()[k] != (*operand_strides[k])[d] * shape[d]) mergeable = false;
      if (mergeable) {
        c.sizes.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) c.strides.back()[k] = (*operand_strides[k])[d];
        continue;
      }
    }
    c.sizes.push_back(shape[d]);
    c.strides.emplace_back();
    for (size_t k = 0; k < N; ++k) c.strides.back()[k] = (*operand_strides[k])[d];
  }
  return c;
}

// A reduction's input x, permuted so that its last `reduced_dims` dims are the reduced ones:
// the kept (leading) and reduced (trailing) dims with their strides.
struct ReducedSplit {
  Shape kept_shape, kept_strides, reduced_shape, reduced_strides;
};
inline ReducedSplit split_reduced(const Tensor& x, int64_t reduced_dims) {
  const auto kept = static_cast<std::ptrdiff_t>(x.dim() - reduced_dims);
  const Shape& s = x.shape();
  const Shape& st = x.strides();
  return {Shape(s.begin(), s.begin() + kept), Shape(st.begin(), st.begin() + kept), Shape(s.begin() + kept, s.end()),
          Shape(st.begin() + kept, st.end())};
}

}  // namespace reel::kernels
