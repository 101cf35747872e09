// kernels/cuda/indexing.h: how a kernel finds element i of a strided tensor. OffsetCalc<N> is a
// small trivially-copyable struct passed to kernels by value: the coalesced shape of an
// iteration space and, for each of N operands, its element strides. Coalescing (the CPU's
// StridedLoop does the same) drops size-1 dims and merges dims that are contiguous with their
// inner neighbour in every operand, so a contiguous tensor is one dim and a broadcast bias add
// (rows, C) + (C) is two. A GPU divides 64-bit integers in software (~20x a 32-bit divide), so
// the index arithmetic runs in 32 bits whenever the iteration space fits.
#pragma once
#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/simt/simt.h"

namespace reel::kernels::cuda {

constexpr int kMaxDims = 8;  // after coalescing; more goes through a fallback (see users)

template <int N>
struct OffsetCalc {
  int rank = 0;         // coalesced dims, innermost last; 0 = a single element
  bool small = true;    // every index fits in 32 bits: use 32-bit division
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};  // elements

  // Offsets (elements) of linear index `i` (row-major over the iteration space) in each operand.
  __host__ __device__ void get(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (rank == 1) {
      for (int k = 0; k < N; ++k) off[k] = i * strides[0][k];
      return;
    }
    if (small) {
      uint32_t rest = static_cast<uint32_t>(i);
      for (int d = rank - 1; d >= 0; --d) {
        const uint32_t size = static_cast<uint32_t>(sizes[d]);
        const uint32_t idx = rest % size;
        rest /= size;
        for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(idx) * strides[d][k];
      }
    } else {
      int64_t rest = i;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t idx = rest % sizes[d];
        rest /= sizes[d];
        for (int k = 0; k < N; ++k) off[k] += idx * strides[d][k];
      }
    }
  }

  // All operands walk memory with stride 1 (or there is one element): offset == i.
  bool contiguous() const {
    if (rank == 0) return true;
    if (rank > 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[0][k] != 1) return false;
    return true;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= sizes[d];
    return n;
  }
};

// Coalesces (shape, strides of each operand) into `out`; false when more than kMaxDims dims
// remain (then `out` is unusable and the caller falls back).
template <int N>
bool make_offset_calc(const Shape& shape, const std::array<const Shape*, N>& strides, OffsetCalc<N>& out) {
  out = OffsetCalc<N>{};
  int64_t sizes[64];
  int64_t st[64][N];
  int rank = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (rank > 0) {
      bool mergeable = true;  // can the previous (outer) dim fold into this one?
      for (int k = 0; k < N; ++k)
        if (st[rank - 1][k] != (*strides[k])[d] * shape[d]) mergeable = false;
      if (mergeable) {
        sizes[rank - 1] *= shape[d];
        for (int k = 0; k < N; ++k) st[rank - 1][k] = (*strides[k])[d];
        continue;
      }
    }
    if (rank == 64) return false;
    sizes[rank] = shape[d];
    for (int k = 0; k < N; ++k) st[rank][k] = (*strides[k])[d];
    ++rank;
  }
  if (rank > kMaxDims) return false;
  out.rank = rank;
  int64_t numel = 1;
  for (int d = 0; d < rank; ++d) {
    out.sizes[d] = sizes[d];
    numel *= sizes[d];
    for (int k = 0; k < N; ++k) out.strides[d][k] = st[d][k];
  }
  out.small = numel <= int64_t{0xffffffff};
  return true;
}

}  // namespace reel::kernels::cuda
