// kernels/cuda/indexing.h: how a kernel finds element i of a strided tensor. OffsetCalc<N> is a
// small trivially-copyable struct passed to kernels by value: the coalesced shape of an
// iteration space and, for each of N operands, its element strides. Coalescing and unravelling
// are kernels/indexing.h's, shared with the CPU's StridedLoop: a contiguous tensor is one dim and
// a broadcast bias add (rows, C) + (C) is two. A GPU divides 64-bit integers in software (~20x a
// 32-bit divide), so the index arithmetic runs in 32 bits whenever the iteration space fits.
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"
#include "kernels/indexing.h"
#include "kernels/simt/simt.h"

namespace reel::kernels::cuda {

constexpr int kMaxDims = 8;  // after coalescing; more goes through a fallback (see users)

template <int N>
struct OffsetCalc {
  int rank = 0;         // coalesced dims, innermost last; 0 = a single element
  // 1 when every index fits in 32 bits: use 32-bit division. An int, not a bool: a bool here left
  // three padding bytes that a copy need not keep, so two equal views could differ in their bytes
  // (a replayed graph compares nothing, but tests/test_replay_safe.cpp compares launches bytewise).
  int32_t small = 1;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};  // elements

  // Offsets (elements) of linear index `i` (row-major over the iteration space) in each operand.
  __host__ __device__ void get(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (rank == 1) {
      for (int k = 0; k < N; ++k) off[k] = i * strides[0][k];
      return;
    }
    const auto add = [&](int d, int64_t idx) {
      for (int k = 0; k < N; ++k) off[k] += idx * strides[d][k];
    };
    if (small) unravel_index<uint32_t>(static_cast<uint32_t>(i), rank, sizes, add);
    else unravel_index<int64_t>(i, rank, sizes, add);
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
  const CoalescedDims<N> c = coalesce<N>(shape, strides);
  if (c.sizes.size() > static_cast<size_t>(kMaxDims)) return false;
  out.rank = static_cast<int>(c.sizes.size());
  int64_t numel = 1;
  for (int d = 0; d < out.rank; ++d) {
    out.sizes[d] = c.sizes[d];
    numel *= c.sizes[d];
    for (int k = 0; k < N; ++k) out.strides[d][k] = c.strides[d][k];
  }
  out.small = numel <= int64_t{0xffffffff} ? 1 : 0;
  return true;
}

// No padding: equal views are equal bytes (checked here rather than under one compiler's copies).
static_assert(std::has_unique_object_representations_v<OffsetCalc<1>> &&
              std::has_unique_object_representations_v<OffsetCalc<2>> &&
              std::has_unique_object_representations_v<OffsetCalc<3>>);

}  // namespace reel::kernels::cuda
