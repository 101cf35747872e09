// A loop over N same-shape operands with arbitrary element strides, the CPU's equivalent of a
// TensorIterator: dims of size 1 are dropped and dims that are contiguous with their inner
// neighbour in every operand are merged, so a contiguous tensor becomes one flat run that the
// compiler can vectorise. Runs are spread over OpenMP threads when there is enough work.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace reel::kernels::cpu {

template <size_t N>
struct StridedLoop {
  Shape shape;                       // coalesced, innermost last; at least one dim
  std::array<Shape, N> strides;      // per operand, elements

  StridedLoop(const Shape& full_shape, const std::array<const Shape*, N>& full_strides) {
    for (size_t d = 0; d < full_shape.size(); ++d) {
      if (full_shape[d] == 1) continue;
      if (!shape.empty()) {
        bool mergeable = true;  // can the previous (outer) dim fold into this one?
        for (size_t k = 0; k < N; ++k)
          if (strides[k].back() != (*full_strides[k])[d] * full_shape[d]) mergeable = false;
        if (mergeable) {
          shape.back() *= full_shape[d];
          for (size_t k = 0; k < N; ++k) strides[k].back() = (*full_strides[k])[d];
          continue;
        }
      }
      shape.push_back(full_shape[d]);
      for (size_t k = 0; k < N; ++k) strides[k].push_back((*full_strides[k])[d]);
    }
    if (shape.empty()) {  // a single element
      shape.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  int64_t inner() const { return shape.back(); }
  int64_t runs() const {
    int64_t r = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) r *= shape[d];
    return r;
  }

  // fn(offsets, inner_strides, n): one run of n elements starting at offsets[k] (elements) with
  // step inner_strides[k] for operand k.
  template <typename F>
  void for_each_run(F fn, int64_t min_parallel_elements = 1 << 15) const {
    const int64_t n_runs = runs(), n = inner();
    std::array<int64_t, N> inner_strides;
    for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k].back();
    const int dims = static_cast<int>(shape.size()) - 1;
    if (n_runs == 1 && n >= min_parallel_elements) {  // one long run: split it into chunks
      constexpr int64_t kChunk = 1 << 14;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        std::array<int64_t, N> off;
        for (size_t k = 0; k < N; ++k) off[k] = c * kChunk * inner_strides[k];
        fn(off, inner_strides, std::min(kChunk, n - c * kChunk));
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n_runs > 1 && n_runs * n >= min_parallel_elements)
    for (int64_t r = 0; r < n_runs; ++r) {
      std::array<int64_t, N> off{};
      int64_t rest = r;
      for (int d = dims - 1; d >= 0; --d) {
        const int64_t i = rest % shape[d];
        rest /= shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
      }
      fn(off, inner_strides, n);
    }
  }
};

}  // namespace reel::kernels::cpu
