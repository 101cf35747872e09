// kernels/cuda/embedding_pos_row.h: one row of the token + position embedding, table[ids[n]] +
// pos[n % T], as a device-side value source. The one definition of that sum on cuda: the
// embedding_pos forward kernel (kernels/cuda/embedding.cu) writes it, and the LayerNorm forward
// kernel with the embeddings fused in (kernels/cuda/layernorm.cu, embedding_pos_layernorm_forward)
// writes and normalises it, so the two give the same bits for every element.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/index_errors.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

// ids (N) i32/i64; table (V, C); pos (P, C), T <= P. error: the launch's index error slot.
template <typename T, typename I>
struct EmbeddingPosRows {
  const I* ids;
  const T* table;
  const T* pos;
  int64_t V, C, T_;
  unsigned long long* error;

  // Row n: its table and position rows, table null for an id out of [0, V) (then every value is
  // 0, and the id is never used as an index).
  struct Row {
    const T* table_row;  // (C) or null
    const T* pos_row;    // (C)
    // The element c of row n: the sum in acc_t, rounded once to T (as embedding(ids, table) +
    // embedding(arange(T), pos) would add them).
    __device__ __forceinline__ T operator()(int64_t c) const {
      using acc_t = acc_type_t<T>;
      return table_row ? static_cast<T>(static_cast<acc_t>(table_row[c]) + static_cast<acc_t>(pos_row[c])) : T(0);
    }
  };
  // report: this thread reports a bad id (one thread per row does, so each is reported once).
  __device__ __forceinline__ Row row(int64_t n, bool report) const {
    const int64_t id = static_cast<int64_t>(ids[n]);
    const bool bad = id < 0 || id >= V;
    if (bad && report) report_bad_index(error, n, id);
    return Row{bad ? nullptr : table + id * C, pos + (n % T_) * C};
  }
};

}  // namespace reel::kernels::cuda
