// The loss scaler's unscale on the CPU (kernels/unscale.h): g *= inv_scale over a list of
// gradients, in place, finding any inf or NaN in the same sweep.
//
// The list is cut into chunks of kChunk elements (a chunk never spans two tensors) and threads
// take chunks, so a model's many small bias gradients parallelise as well as one big embedding's.
// Each chunk is read and written once; its found flag goes into its own slot (no shared write
// inside the parallel region), and the flags are OR-ed after it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kChunk = 1 << 14;

struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

// Whether x is inf or NaN, from its bits (all exponent bits set): independent of -ffast-math.
inline bool nonfinite(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7f800000u) == 0x7f800000u;
}
inline bool nonfinite(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

// x[i] = T(acc_t(x[i]) * f); whether any stored result is non-finite (tested after the rounding
// to T, which may itself overflow when f > 1).
template <typename T, typename acc_t = acc_type_t<T>>
bool unscale_chunk(T* x, int64_t n, double factor) {
  const acc_t f = static_cast<acc_t>(factor);
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    const T y = static_cast<T>(acc_t(x[i]) * f);
    x[i] = y;
    found |= nonfinite(static_cast<acc_t>(y));
  }
  return found;
}

}  // namespace

bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  std::vector<Chunk> chunks;
  std::vector<void*> ptr(grads.size(), nullptr);
  std::vector<DType> dtype(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {  // raw pointers before the region: nothing in it throws
    if (grads[i].numel() > 0) ptr[i] = grads[i].data_ptr();
    dtype[i] = grads[i].dtype();
    for (int64_t b = 0; b < grads[i].numel(); b += kChunk)
      chunks.push_back({i, b, std::min(grads[i].numel(), b + kChunk)});
  }
  std::vector<char> found(chunks.size(), 0);
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  parallel_for(n_chunks, n_chunks > 1, [&](int64_t c) {
    const Chunk& k = chunks[static_cast<size_t>(c)];
    const int64_t n = k.end - k.begin;
    bool f = false;
    void* p = ptr[k.tensor];
    switch (dtype[k.tensor]) {
      case DType::f32: f = unscale_chunk(static_cast<float*>(p) + k.begin, n, inv_scale); break;
      case DType::f64: f = unscale_chunk(static_cast<double*>(p) + k.begin, n, inv_scale); break;
      case DType::bf16: f = unscale_chunk(static_cast<bf16*>(p) + k.begin, n, inv_scale); break;
      case DType::f16: f = unscale_chunk(static_cast<f16*>(p) + k.begin, n, inv_scale); break;
      default: break;  // the entry point let floating dtypes through only
    }
    found[static_cast<size_t>(c)] = f ? 1 : 0;
  });
  return std::any_of(found.begin(), found.end(), [](char f) { return f != 0; });
}

}  // namespace reel::kernels::cpu
