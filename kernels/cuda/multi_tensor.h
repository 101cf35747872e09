// kernels/cuda/multi_tensor.h: multi-tensor apply on a CUDA device (as PyTorch's _foreach
// kernels), the one chunking of the kernels that run over lists of tensors: the optimizer updates,
// the gradient norm and scale_ (kernels/cuda/optimizer.cu) and the loss scaler's unscale
// (kernels/cuda/unscale.cu).
//
// Each tensor is cut into fixed chunks of kListChunk elements, and one launch covers up to
// kMaxBlocks chunks of up to kMaxTensors tensors, their pointers and sizes passed by value in
// ListArgs (kernel parameters), so a model's hundred bias vectors cost two launches, not a
// hundred. Block b handles chunk chunk_of[b] of tensor slot tensor_of[b] (block_chunk()). A list
// may mix f32, f64, bf16 and f16 tensors: each dtype's go through their own launches
// (for_each_floating_type()), in that order.
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/block_reduce.h"  // min_i64
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

constexpr int64_t kListChunk = 1 << 14;  // elements per block (fixed: the norm's partials depend on it)
constexpr int kMaxTensors = 64;          // tensor slots per launch
constexpr int kMaxBlocks = 320;          // chunks per launch
constexpr int kListThreads = 256;

// The tensors and chunks of one launch. ptr[k][s]: list k's tensor in slot s (null for a list
// that is not used, e.g. no momentum buffers), untyped: a kernel casts each list to its element
// type (a parameter's T, its state's acc_t); chunk_base[s]: the index, in list order over ALL
// the tensors, of that tensor's first chunk (where the norm writes its partials).
template <int N>
struct ListArgs {
  void* ptr[N][kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t chunk_base[kMaxTensors];
  int tensor_of[kMaxBlocks];
  int chunk_of[kMaxBlocks];
};
static_assert(std::has_unique_object_representations_v<ListArgs<1>> &&  // equal lists are equal bytes
              std::has_unique_object_representations_v<ListArgs<3>>);
// CUDA's limit on a kernel's parameters: 32,764 bytes on Volta and later since CUDA 12.1 (4 KB
// before; reel's nvcc flavour builds for sm_90 with a later toolkit). 64 slots put a small model's
// whole list in one launch (char_gpt's 40 parameters: AdamW was 3 launches with 16) at 6.5 KB of
// parameters for the widest list (6): every ListArgs a kernel takes fits.
static_assert(sizeof(ListArgs<6>) <= 32764, "ListArgs outgrows the kernel parameter space");

// The element range [begin, end) of this block's chunk, and its tensor slot.
template <int N>
__device__ __forceinline__ int block_chunk(const ListArgs<N>& a, int64_t& begin, int64_t& end) {
  const int s = a.tensor_of[blockIdx.x];
  begin = a.chunk_of[blockIdx.x] * kListChunk;
  end = min_i64(a.numel[s], begin + kListChunk);
  return s;
}

inline int64_t chunks_of(const Tensor& t) { return (t.numel() + kListChunk - 1) / kListChunk; }

// Calls run(args, blocks) for batches of the chunks of the tensors of dtype T, in list order.
// lists[k] may be null (ptr[k] then stays null); index i of every list is the same parameter.
template <typename T, int N, typename Run>
void list_apply(const std::array<const std::vector<Tensor>*, N>& lists, Run run) {
  constexpr DType dtype = dtype_of<T>::value;
  const std::vector<Tensor>& first = *lists[0];
  ListArgs<N> a{};
  int slot = 0, blocks = 0;
  int64_t base = 0;  // chunk index of tensor i's first chunk, over all tensors in list order
  for (size_t i = 0; i < first.size(); ++i) {
    const int64_t chunks = chunks_of(first[i]);
    if (first[i].dtype() != dtype || chunks == 0) {
      base += chunks;
      continue;
    }
    for (int k = 0; k < N; ++k) a.ptr[k][slot] = lists[k] ? (*lists[k])[i].data_ptr() : nullptr;
    a.numel[slot] = first[i].numel();
    a.chunk_base[slot] = base;
    for (int64_t c = 0; c < chunks; ++c) {
      a.tensor_of[blocks] = slot;
      a.chunk_of[blocks] = static_cast<int>(c);
      ++blocks;
      const bool last_chunk = c + 1 == chunks;
      if (blocks == kMaxBlocks || (last_chunk && slot + 1 == kMaxTensors)) {
        run(a, blocks);
        blocks = 0;
        if (!last_chunk) {  // the tensor goes on in slot 0 of the next launch
          for (int k = 0; k < N; ++k) a.ptr[k][0] = a.ptr[k][slot];
          a.numel[0] = a.numel[slot];
          a.chunk_base[0] = a.chunk_base[slot];
          slot = 0;
        } else {
          slot = -1;  // the next tensor starts at slot 0
        }
      }
    }
    base += chunks;
    ++slot;
  }
  if (blocks > 0) run(a, blocks);
}

// go(T{}) for the four floating types, in the order of their launches.
template <typename Go>
void for_each_floating_type(Go&& go) {
  go(float{});
  go(double{});
  go(bf16{});
  go(f16{});
}

// The device of the first non-empty tensor; the cpu when every tensor is empty (nothing to do).
inline Device list_device(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.numel() > 0) return t.device();
  return Device::cpu();
}

}  // namespace reel::kernels::cuda
