// A loop over N same-shape operands with arbitrary element strides, the CPU's equivalent of a
// TensorIterator: the dims are coalesced (kernels/indexing.h, as CUDA's OffsetCalc does), so a
// contiguous tensor becomes one flat run that the compiler can vectorise. Runs are spread over
// OpenMP threads when there is enough work.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/parallel.h"
#include "kernels/indexing.h"

namespace reel::kernels::cpu {

template <size_t N>
struct StridedLoop {
  Shape shape;                       // coalesced, innermost last; at least one dim
  std::array<Shape, N> strides;      // per operand, elements

  StridedLoop(const Shape& full_shape, const std::array<const Shape*, N>& full_strides) {
    const CoalescedDims<N> c = coalesce<N>(full_shape, full_strides);
    shape = c.sizes;
    for (size_t k = 0; k < N; ++k)
      for (const auto& st : c.strides) strides[k].push_back(st[k]);
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

  // Where run r (row-major over the outer dims) starts in each operand (elements).
  std::array<int64_t, N> run_offsets(int64_t r) const {
    std::array<int64_t, N> off{};
    unravel_index<int64_t>(r, static_cast<int>(shape.size()) - 1, shape.data(), [&](int d, int64_t i) {
      for (size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
    });
    return off;
  }

  // fn(offsets, inner_strides, n): one run of n elements starting at offsets[k] (elements) with
  // step inner_strides[k] for operand k.
  template <typename F>
  void for_each_run(F fn, int64_t min_parallel_elements = kMinParallelStreamElements) const {
    const int64_t n_runs = runs(), n = inner();
    std::array<int64_t, N> inner_strides;
    for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k].back();
    if (n_runs == 1 && n >= min_parallel_elements) {  // one long run: split it into chunks
      constexpr int64_t kChunk = 1 << 14;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      parallel_for(chunks, true, [&](int64_t c) {
        std::array<int64_t, N> off;
        for (size_t k = 0; k < N; ++k) off[k] = c * kChunk * inner_strides[k];
        fn(off, inner_strides, std::min(kChunk, n - c * kChunk));
      });
      return;
    }
    parallel_for(n_runs, n_runs > 1 && n_runs * n >= min_parallel_elements,
                 [&](int64_t r) { fn(run_offsets(r), inner_strides, n); });
  }
};

}  // namespace reel::kernels::cpu
