// Max along an axis with its argmax (i64), and the backward scatter, on the CPU.
//
// The input arrives contiguous and viewed as (O, A, I): O outer rows, the reduced axis A, I inner
// positions. The last axis (I = 1) has its own row kernel; otherwise threads take (o, block of
// 256 i) tasks and stream over a, comparing whole rows of I contiguous values against the running
// max, so the access is sequential. Ties keep the first index; a NaN is the max and the first NaN wins,
// as torch.max(x, dim) does. Backward saves only the i64 indices: dx is zero except
// dx[o, indices[o, i], i] = dy[o, i].
// bf16 and f16 compare as their exact f32 widenings and store the winner's bits; the last axis
// takes the general loop (the vectorised row kernel's OpenMP reductions are for f32 and f64).
#include <algorithm>
#include <limits>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kInnerBlock = 256;

// The last axis (I = 1): a vectorised max of the row (and a NaN flag), then a scan for the first
// element equal to it (or the first NaN). Both sweeps stay in L1; the compare-and-select loop of
// the general case is serial in a and would run at a fraction of memory speed.
template <typename T>
void max_rows(const T* x, T* values, int64_t* indices, int64_t O, int64_t A) {
  parallel_for(O, O > 1 && O * A >= kMinParallelElements, [&](int64_t o) {
    const T* row = x + o * A;  // (A)
    // One vectorised sweep for the max of the non-NaN values and whether any NaN is present.
    T m = row[0];
    int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
    for (int64_t c = 0; c < A; ++c) {
      m = row[c] > m ? row[c] : m;
      nan |= row[c] != row[c];
    }
    // clang's OpenMP starts a max reduction from the lowest finite value, not -inf, so a row of
    // -inf reduces to it; that (rare) result is recomputed serially.
    if (!nan && m == std::numeric_limits<T>::lowest())
      for (int64_t c = 0; c < A; ++c) m = c == 0 || row[c] > m ? row[c] : m;
    int64_t i = 0;
    if (nan) {
      m = std::numeric_limits<T>::quiet_NaN();
      while (row[i] == row[i]) ++i;  // the first NaN (rare: a plain scan)
    } else {
      // Skip whole blocks of 64 without a hit (a vectorised OR), then scan the block that has it.
      for (; i + 64 <= A; i += 64) {
        int hit = 0;
#pragma omp simd reduction(| : hit)
        for (int64_t l = 0; l < 64; ++l) hit |= row[i + l] == m;
        if (hit) break;
      }
      while (i < A - 1 && row[i] != m) ++i;  // m is an element of the row: the bound is a guard
    }
    values[o] = m;
    indices[o] = i;
  });
}

template <typename T>
void max_impl(const T* x, T* values, int64_t* indices, int64_t O, int64_t A, int64_t I) {
  if constexpr (!std::is_same_v<T, bf16> && !std::is_same_v<T, f16>) {
    if (I == 1) return max_rows(x, values, indices, O, A);
  }
  const int64_t blocks = (I + kInnerBlock - 1) / kInnerBlock;
  parallel_for(O * blocks, O * blocks > 1 && O * A * I >= kMinParallelElements, [&](int64_t task) {
    const int64_t o = task / blocks, i0 = (task % blocks) * kInnerBlock;
    const int64_t n = std::min(kInnerBlock, I - i0);
    T* val = values + o * I + i0;         // (n)
    int64_t* idx = indices + o * I + i0;  // (n)
    const T* xo = x + o * A * I + i0;     // row a at xo + a * I
    for (int64_t i = 0; i < n; ++i) {
      val[i] = xo[i];
      idx[i] = 0;
    }
    for (int64_t a = 1; a < A; ++a) {
      const T* xa = xo + a * I;
      for (int64_t i = 0; i < n; ++i) {
        const T v = xa[i];
        // Greater, or the first NaN (once val is NaN nothing replaces it).
        if (v > val[i] || (v != v && val[i] == val[i])) {
          val[i] = v;
          idx[i] = a;
        }
      }
    }
  });
}

template <typename T>
void max_backward_impl(const T* dy, const int64_t* indices, T* dx, int64_t O, int64_t A, int64_t I) {
  parallel_for(O, O > 1 && O * A * I >= kMinParallelElements, [&](int64_t o) {
    T* dxo = dx + o * A * I;  // (A, I)
    std::fill(dxo, dxo + A * I, T(0));
    for (int64_t i = 0; i < I; ++i) dxo[indices[o * I + i] * I + i] = dy[o * I + i];
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void max_with_indices(const Tensor& x, const Tensor& values, const Tensor& indices) {
  const int64_t O = x.size(0), A = x.size(1), I = x.size(2);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "max_with_indices",
                         max_impl<scalar_t>(x.data<scalar_t>(), values.data<scalar_t>(), indices.data<int64_t>(), O,
                                            A, I))
}

void max_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const int64_t O = dx.size(0), A = dx.size(1), I = dx.size(2);
  REEL_DISPATCH_FLOATING_AND_16(dx.dtype(), "max_backward",
                         max_backward_impl<scalar_t>(dy.data<scalar_t>(), indices.data<int64_t>(),
                                                     dx.data<scalar_t>(), O, A, I))
}

}  // namespace reel::kernels::cpu
