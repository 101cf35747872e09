// Softmax and log-softmax along the last dim, forward and backward, on the CPU.
//
// One task per row (OpenMP over rows). Forward subtracts the row max before exp, so logits of
// any magnitude stay finite; the row stays in L1 across its sweeps (max, exp-sum, write), so
// memory sees one read and one write. exp goes through Eigen's vectorised packet exp (glibc's
// scalar expf would make this compute-bound), flushed to 0 below the normal range (exp_ftz.h), so
// a -inf (masked) entry gets a probability of exactly 0 in softmax and -inf in log_softmax, and
// its exp(y) in the log_softmax backward is exactly 0 too (dx = dy there).
// Backward reads the saved OUTPUT y (what the tape keeps), not x:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
// bf16 and f16: each row is widened into a per-thread f32 buffer, run through the f32 code (max,
// exp-sum and the row sums in f32, acc_t) and rounded once to the 16-bit type on store.
#include <cmath>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/exp_ftz.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Rows load as acc_t (the dispatch's accumulation type), the max, exp-sum and log-sum-exp are
// acc_t, and the output is stored back as T. For f32 and f64 acc_t is T and the casts vanish.
template <typename T, typename acc_t, bool kLog>
void softmax_forward_impl(const T* x, T* y, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    const ConstRow<T> xt(x + r * C, C);               // (C)
    const auto& xr = xt.template cast<acc_t>();       // xt itself when acc_t is T
    Row<T> yr(y + r * C, C);                          // (C)
    const acc_t m = xr.maxCoeff();
    if constexpr (kLog) {
      const acc_t lse = m + std::log(exp_ftz(xr - m).sum());
      yr = (xr - lse).template cast<T>();
    } else {
      const auto e = exp_ftz(xr - m);
      if constexpr (std::is_same_v<T, acc_t>) {  // exp written once into y, then scaled in place
        yr = e;
        yr *= acc_t(1) / yr.sum();
      } else {  // a narrower T: the sum of the acc_t exps, not of their rounded copies
        const acc_t inv = acc_t(1) / e.sum();
        yr = (e * inv).template cast<T>();
      }
    }
  });
}

template <typename T, typename acc_t, bool kLog>
void softmax_backward_impl(const T* dy, const T* y, T* dx, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    const ConstRow<T> dyt(dy + r * C, C), yt(y + r * C, C);
    const auto& dyr = dyt.template cast<acc_t>();  // the maps themselves when acc_t is T
    const auto& yr = yt.template cast<acc_t>();
    Row<T> dxr(dx + r * C, C);
    if constexpr (kLog) {
      const acc_t s = dyr.sum();
      dxr = (dyr - exp_ftz(yr) * s).template cast<T>();
    } else {
      const acc_t s = (dyr * yr).sum();
      dxr = (yr * (dyr - s)).template cast<T>();
    }
  });
}

// bf16 / f16: row r widened into this thread's f32 buffers, the f32 kernel run on one row in place,
// the results rounded once on store. x, y, dy, dx: (R, C).
template <typename T, bool kLog>
void softmax_forward_16(const T* x, T* y, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) buf[c] = static_cast<float>(x[r * C + c]);
    softmax_forward_impl<float, float, kLog>(buf.data(), buf.data(), 1, C);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = static_cast<T>(buf[c]);
  });
}

template <typename T, bool kLog>
void softmax_backward_16(const T* dy, const T* y, T* dx, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    thread_local std::vector<float> g, yb;
    g.resize(static_cast<size_t>(C));
    yb.resize(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) g[c] = static_cast<float>(dy[r * C + c]), yb[c] = static_cast<float>(y[r * C + c]);
    softmax_backward_impl<float, float, kLog>(g.data(), yb.data(), g.data(), 1, C);  // dx into g
    for (int64_t c = 0; c < C; ++c) dx[r * C + c] = static_cast<T>(g[c]);
  });
}

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

template <typename T, typename acc_t, bool kLog>
void softmax_forward_any(const T* x, T* y, int64_t R, int64_t C) {
  if constexpr (kIs16<T>) softmax_forward_16<T, kLog>(x, y, R, C);
  else softmax_forward_impl<T, acc_t, kLog>(x, y, R, C);
}

template <typename T, typename acc_t, bool kLog>
void softmax_backward_any(const T* dy, const T* y, T* dx, int64_t R, int64_t C) {
  if constexpr (kIs16<T>) softmax_backward_16<T, kLog>(dy, y, dx, R, C);
  else softmax_backward_impl<T, acc_t, kLog>(dy, y, dx, R, C);
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void softmax_forward(const Tensor& x, bool log, const Tensor& y) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), log ? "log_softmax_forward" : "softmax_forward", {
    if (log) softmax_forward_any<scalar_t, acc_t, true>(x.data<scalar_t>(), y.data<scalar_t>(), R, C);
    else softmax_forward_any<scalar_t, acc_t, false>(x.data<scalar_t>(), y.data<scalar_t>(), R, C);
  })
}

void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx) {
  const int64_t R = y.size(0), C = y.size(1);
  REEL_DISPATCH_FLOATING_AND_16(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", {
    if (log) softmax_backward_any<scalar_t, acc_t, true>(dy.data<scalar_t>(), y.data<scalar_t>(), dx.data<scalar_t>(), R, C);
    else softmax_backward_any<scalar_t, acc_t, false>(dy.data<scalar_t>(), y.data<scalar_t>(), dx.data<scalar_t>(), R, C);
  })
}

}  // namespace reel::kernels::cpu
