// What the two CPU attention files share (kernels/cpu/attention.cpp: the f32 and f64 kernels and
// the entry points; kernels/cpu/attention_16.cpp: the bf16 and f16 path): the per-thread tile, the
// (B, H, T, X) operand view, the parallel threshold, and the functions one file calls in the other.
// Internal to those two files.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>

#include "core/tensor.h"

namespace reel::kernels::cpu::attention_detail {

// Below this many multiply-adds (B * H * Tq * Tk * (D + Dv)) a call runs on the calling thread.
constexpr int64_t kMinParallelFlops = 1 << 18;

// A per-thread tile, 64-byte aligned. Eigen's vectorised row reductions (the online softmax's
// row max and row sum) start with scalar steps up to the first aligned packet, so their order of
// summation depends on a row's address: with tiles from plain malloc (16-byte aligned) the bits
// depended on which thread's tile ran a task (a test offsetting each thread's tile by 16 bytes
// changed them; by 32 it did not). Tensors come from reel's allocator aligned, and a head view's
// offset depends on the shape alone.
template <typename T>
class Tile {
 public:
  explicit Tile(int64_t n)
      : data_(static_cast<T*>(std::aligned_alloc(kAlign, (static_cast<size_t>(n) * sizeof(T) + kAlign - 1) / kAlign * kAlign))) {
    if (!data_) throw std::bad_alloc();
  }
  ~Tile() { std::free(data_); }
  Tile(const Tile&) = delete;
  Tile& operator=(const Tile&) = delete;
  T* data() const { return data_; }

 private:
  static constexpr size_t kAlign = 64;
  T* data_;
};

// A (B, H, T, X) operand: the first element of head bh's (T, X) matrix, whose rows are `ld` apart.
template <typename T>
struct Heads {
  T* data;
  int64_t H, stride_b, stride_h, ld;
  explicit Heads(const Tensor& t)
      : data(t.data<std::remove_const_t<T>>()), H(t.size(1)), stride_b(t.stride(0)), stride_h(t.stride(1)),
        ld(t.stride(2)) {}
  T* head(int64_t bh) const { return data + (bh / H) * stride_b + (bh % H) * stride_h; }
};

// The f32 and f64 kernels on operands of one of those dtypes (attention.cpp); the 16-bit
// fallback runs them on widened operands.
void forward_f32_or_f64(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                        const Tensor& out, const Tensor& lse);
void backward_f32_or_f64(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv);

// The bf16 and f16 path (attention_16.cpp): kernels::attention_forward / attention_backward's
// contract (kernels/attention.h) for 16-bit operands, lse f32.
void forward_16(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, const Tensor& out,
                const Tensor& lse);
void backward_16(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk, const Tensor& dv);

}  // namespace reel::kernels::cpu::attention_detail
