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
#include <cmath>

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

template <typename T, bool kLog>
void softmax_forward_impl(const T* x, T* y, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    ConstRow<T> xr(x + r * C, C);  // (C)
    Row<T> yr(y + r * C, C);       // (C)
    const T m = xr.maxCoeff();
    if constexpr (kLog) {
      const T lse = m + std::log(exp_ftz(xr - m).sum());
      yr = xr - lse;
    } else {
      yr = exp_ftz(xr - m);
      yr *= T(1) / yr.sum();
    }
  });
}

template <typename T, bool kLog>
void softmax_backward_impl(const T* dy, const T* y, T* dx, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    ConstRow<T> dyr(dy + r * C, C), yr(y + r * C, C);
    Row<T> dxr(dx + r * C, C);
    if constexpr (kLog) {
      const T s = dyr.sum();
      dxr = dyr - exp_ftz(yr) * s;
    } else {
      const T s = (dyr * yr).sum();
      dxr = yr * (dyr - s);
    }
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void softmax_forward(const Tensor& x, bool log, const Tensor& y) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING(x.dtype(), log ? "log_softmax_forward" : "softmax_forward", {
    if (log) softmax_forward_impl<scalar_t, true>(x.data<scalar_t>(), y.data<scalar_t>(), R, C);
    else softmax_forward_impl<scalar_t, false>(x.data<scalar_t>(), y.data<scalar_t>(), R, C);
  })
}

void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx) {
  const int64_t R = y.size(0), C = y.size(1);
  REEL_DISPATCH_FLOATING(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", {
    if (log) softmax_backward_impl<scalar_t, true>(dy.data<scalar_t>(), y.data<scalar_t>(), dx.data<scalar_t>(), R, C);
    else softmax_backward_impl<scalar_t, false>(dy.data<scalar_t>(), y.data<scalar_t>(), dx.data<scalar_t>(), R, C);
  })
}

}  // namespace reel::kernels::cpu
