// The loss scaler's kernels on the CPU (kernels/unscale.h): g *= inv_scale over a list of
// gradients, in place, finding any inf or NaN in the same sweep; the device-state forms (whose
// "device" is host memory here: read and written directly).
//
// The list goes in the chunks of kernels/cpu/multi_tensor.h (the optimizer kernels' too), which
// threads take. Each chunk is read and written once; its found flag goes into its own slot (no
// shared write inside the parallel region), and the flags are OR-ed after it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/multi_tensor.h"
#include "kernels/loss_scale_rule.h"

namespace reel::kernels::cpu {

namespace {

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
  const TensorLists<1> lists({&grads});
  std::vector<char> found(static_cast<size_t>(lists.chunks()), 0);
  lists.apply([&](auto zero, const ListChunk<1>& c) {
    using T = decltype(zero);
    found[static_cast<size_t>(c.index)] = unscale_chunk(c.ptr<T>(0), c.n, inv_scale) ? 1 : 0;
  });
  return std::any_of(found.begin(), found.end(), [](char f) { return f != 0; });
}

void unscale_grads_(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf) {
  if (unscale_grads_(grads, 1.0 / state.data<double>()[0])) found_inf.data<int32_t>()[0] = 1;
}

void update_loss_scale_(const Tensor& state, const Tensor& found_inf, const Tensor& skipped_count,
                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  update_loss_scale(state.data<double>(), found_inf.data<int32_t>()[0] != 0,
                    skipped_count.defined() ? skipped_count.data<int64_t>() : nullptr, growth_factor, backoff_factor,
                    growth_interval);
}

void loss_scale_seed_(const Tensor& seed, const Tensor& state, double inv_count, const Tensor& window_scale) {
  const double scale = state.data<double>()[0];
  by_floating_dtype(seed.dtype(), [&](auto zero) {
    using T = decltype(zero);
    seed.data<T>()[0] = static_cast<T>(inv_count * scale);  // as fill(value) rounds
  });
  if (window_scale.defined()) window_scale.data<double>()[0] = scale;
}

}  // namespace reel::kernels::cpu
