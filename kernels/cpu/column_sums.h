// kernels/cpu/column_sums.h: the column sums of a (rows, cols) matrix on the CPU, in acc_t, rows
// in order: a linear's bias gradient (kernels/cpu/matmul.cpp) and add_layer_norm's residual-bias
// gradient (kernels/cpu/layernorm.cpp) sum with this one loop, so the two have the same bits.
// Columns go in blocks of 64, in parallel where `parallel` (no order across columns, so the thread
// count never changes a sum); each finished sum is handed to store(column, sum), which rounds it
// and writes or adds it as its caller's contract says.
#pragma once
#include <algorithm>
#include <cstdint>

namespace reel::kernels::cpu {

template <typename T, typename acc_t, typename Store>
void column_sums(const T* x, int64_t rows, int64_t cols, int64_t ld, bool parallel, Store&& store) {
  constexpr int64_t kSumCols = 64;
  const int64_t blocks = (cols + kSumCols - 1) / kSumCols;
#pragma omp parallel for schedule(static) if (parallel && blocks > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t c0 = k * kSumCols, n = std::min(cols, c0 + kSumCols) - c0;
    acc_t sum[kSumCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * ld + c0;
      for (int64_t j = 0; j < n; ++j) sum[j] += static_cast<acc_t>(row[j]);
    }
    for (int64_t j = 0; j < n; ++j) store(c0 + j, sum[j]);
  }
}

}  // namespace reel::kernels::cpu
