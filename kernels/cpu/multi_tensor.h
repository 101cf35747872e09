// kernels/cpu/multi_tensor.h: the CPU's multi-tensor apply, the one chunking of the kernels that
// run over lists of tensors: the optimizer updates, the gradient norm and scale_
// (kernels/cpu/optimizer.cpp) and the loss scaler's unscale (kernels/cpu/unscale.cpp).
//
// A list is cut into fixed chunks of kListChunk elements (a chunk never spans two tensors) and
// threads take chunks, so ten thousand small bias vectors parallelise as well as one big
// embedding. Chunks depend on the tensor sizes only and are numbered in list order, so a kernel
// that keeps one partial per chunk (the norm) adds them in the same order for any thread count.
// The raw pointers and dtypes are read when the lists are wrapped, before any parallel region:
// nothing inside one may throw.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

constexpr int64_t kListChunk = 1 << 14;  // 64 KB of f32 per operand: four operands stay in L2

// fn(T{}) with T the C++ type of a floating dtype; nothing for another (the entry points let only
// floating dtypes through). Called inside the parallel regions: never throws.
template <typename Fn>
void by_floating_dtype(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32: fn(float{}); break;
    case DType::f64: fn(double{}); break;
    case DType::bf16: fn(bf16{}); break;
    case DType::f16: fn(f16{}); break;
    default: break;
  }
}

// One chunk as a kernel sees it: elements [begin, begin + n) of tensor `tensor` of every list,
// and the chunk's index in list order.
template <size_t N>
struct ListChunk {
  std::array<void*, N> data;  // each list's tensor (null for a null list or an empty tensor)
  size_t tensor;
  int64_t index, begin, n;
  // List k's elements of this chunk as T (T: that list's element type); null for a null list.
  template <typename T>
  T* ptr(size_t k) const {
    return data[k] ? static_cast<T*>(data[k]) + begin : nullptr;
  }
};

// N lists of tensors, index i of each the same parameter (list 0 gives the sizes and dtypes; the
// entry points checked that the others match); a null list gives null pointers.
template <size_t N>
class TensorLists {
 public:
  explicit TensorLists(const std::array<const std::vector<Tensor>*, N>& lists) {
    const std::vector<Tensor>& first = *lists[0];
    data_.resize(first.size());
    dtype_.resize(first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      dtype_[i] = first[i].dtype();
      for (size_t k = 0; k < N; ++k)
        data_[i][k] = lists[k] && first[i].numel() > 0 ? (*lists[k])[i].data_ptr() : nullptr;
      for (int64_t b = 0; b < first[i].numel(); b += kListChunk)
        chunks_.push_back({i, b, std::min(first[i].numel(), b + kListChunk)});
    }
  }

  int64_t chunks() const { return static_cast<int64_t>(chunks_.size()); }

  // fn(T{}, chunk) for every chunk (a ListChunk<N>), T the C++ type of its tensor's dtype; chunks
  // spread over threads when there are several. fn must not throw.
  template <typename Fn>
  void apply(Fn&& fn) const {
    parallel_for(chunks(), chunks() > 1, [&](int64_t c) {
      const Range& r = chunks_[static_cast<size_t>(c)];
      const ListChunk<N> chunk{data_[r.tensor], r.tensor, c, r.begin, r.end - r.begin};
      by_floating_dtype(dtype_[r.tensor], [&](auto zero) { fn(zero, chunk); });
    });
  }

 private:
  struct Range {
    size_t tensor;
    int64_t begin, end;
  };
  std::vector<Range> chunks_;                // in list order
  std::vector<std::array<void*, N>> data_;  // [tensor][list]
  std::vector<DType> dtype_;                 // list 0's tensors'
};

}  // namespace reel::kernels::cpu
