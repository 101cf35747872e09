// CPU dropout mask: one Philox draw per element, in parallel (each element is independent).
#include "core/philox.h"
#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {
template <typename T>
void fill_mask(T* mask, int64_t n, double p, uint64_t seed, uint64_t offset) {
  const T kept = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  parallel_for(n, n >= kMinParallelElements, [&](int64_t i) {
    mask[i] = static_cast<double>(philox_uniform(seed, offset, static_cast<uint64_t>(i))) >= p ? kept : T(0);
  });
}
}  // namespace

void dropout_mask(const Tensor& out, double p, uint64_t seed, uint64_t offset, const Tensor& stream) {
  if (stream.defined()) {  // (seed, base) in memory, as the CUDA kernel reads it
    seed = static_cast<uint64_t>(stream.data<int64_t>()[0]);
    offset += static_cast<uint64_t>(stream.data<int64_t>()[1]);
  }
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "dropout_mask", fill_mask(out.data<scalar_t>(), out.numel(), p, seed, offset));
}

}  // namespace reel::kernels::cpu
