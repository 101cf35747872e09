// Embedding lookup (a row gather) and its backward (a row scatter-add), on the CPU.
//
// Forward: out[n] = table[ids[n]], one row copy per position, OpenMP over positions.
//
// Backward must add the dout rows of every position holding id v into dtable[v], and a token
// that repeats (spaces, "the", padding) collides. Float atomics would make the order of those
// additions, and so the rounding, depend on thread scheduling. Strategy here: ROW OWNERSHIP
// after a counting sort.
//   1. A stable counting sort of the positions by id (serial, O(N + V): microseconds for
//      N = 8192): positions of id v are order[start[v] .. start[v+1]), increasing.
//   2. Threads take table rows (dynamic schedule, so a hot id with thousands of positions does
//      not hold up a static block of rows); the owner of row v writes it once: the first
//      position's row, plus the others in increasing position order; rows no id hits are zeroed.
// Every row is written by one thread in an order fixed by the ids alone: bit-identical for any
// thread count, without atomics and without per-thread (V, C) copies of the table. A row sums in
// the dispatch's acc_t: in place when acc_t is T (f32, f64), else (bf16, f16: a 16-bit table and
// dout) in a row of f32 rounded once on store. Forward copies rows bit for bit in every dtype.
// embedding_pos: the forward adds pos[n % T] to each gathered row (in acc_t, rounded once); the
// backward is the table's as above (added to dtable's values after the row's sum when it
// accumulates) and each position row the sum over the batch in b order, as the CUDA kernel's.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

template <typename T, typename I>
void forward_impl(const I* ids, const T* table, T* out, int64_t N, int64_t C) {
  parallel_for(N, N > 1 && N * C >= kMinParallelElements, [&](int64_t n) {
    std::memcpy(out + n * C, table + static_cast<int64_t>(ids[n]) * C, static_cast<size_t>(C) * sizeof(T));
  });
}

// accumulate: each row is added to dtable's value after it is summed (init + sum, rounded once).
template <typename T, typename acc_t, typename I>
void backward_impl(const T* dout, const I* ids, T* dtable, int64_t N, int64_t V, int64_t C, bool accumulate = false) {
  // 1. counting sort: start (V + 1) offsets, order (N) positions grouped by id, stable; next (V)
  // is the fill cursor. Scratch from the caching allocator: at GPT-2 sizes it is above malloc's
  // mmap threshold, and fresh pages every call would cost page faults.
  const Tensor scratch = empty({2 * V + 1 + N}, DType::i64);
  int64_t* start = scratch.data<int64_t>();
  int64_t* next = start + V + 1;
  int64_t* order = next + V;
  std::fill(start, start + V + 1, int64_t{0});
  for (int64_t n = 0; n < N; ++n) ++start[static_cast<int64_t>(ids[n]) + 1];
  for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
  std::copy(start, start + V, next);
  for (int64_t n = 0; n < N; ++n) order[next[static_cast<int64_t>(ids[n])]++] = n;
  // 2. row ownership.
  // Rows own very different numbers of positions: dynamic chunks of 64 rows balance them.
#pragma omp parallel for schedule(dynamic, 64) if (V > 1 && (V + N) * C >= kMinParallelElements)
  for (int64_t v = 0; v < V; ++v) {
    T* d = dtable + v * C;  // (C)
    const int64_t b = start[v], e = start[v + 1];
    if (b == e) {
      if (!accumulate) std::fill(d, d + C, T(0));
      continue;
    }
    if constexpr (std::is_same_v<T, acc_t>) {
      if (!accumulate) {  // summed in place
        std::memcpy(d, dout + order[b] * C, static_cast<size_t>(C) * sizeof(T));
        for (int64_t p = b + 1; p < e; ++p) {
          const T* src = dout + order[p] * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) d[c] += src[c];
        }
        continue;
      }
    }
    {
      std::vector<acc_t> acc(dout + order[b] * C, dout + order[b] * C + C);  // (C)
      for (int64_t p = b + 1; p < e; ++p) {
        const T* src = dout + order[p] * C;
        for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += static_cast<acc_t>(src[c]);
      }
      for (int64_t c = 0; c < C; ++c)
        d[c] = static_cast<T>(accumulate ? static_cast<acc_t>(d[c]) + acc[static_cast<size_t>(c)] : acc[static_cast<size_t>(c)]);
    }
  }
}

template <typename T, typename I>
void pos_forward_impl(const I* ids, const T* table, const T* pos, T* out, int64_t N, int64_t C, int64_t T_) {
  using acc_t = acc_type_t<T>;
  parallel_for(N, N > 1 && N * C >= kMinParallelElements, [&](int64_t n) {
    const T* row = table + static_cast<int64_t>(ids[n]) * C;  // (C)
    const T* p = pos + (n % T_) * C;                          // (C)
    T* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = static_cast<T>(static_cast<acc_t>(row[c]) + static_cast<acc_t>(p[c]));
  });
}

// dpos (P, C): row t < T_ = (init +) the sum over b of dout[b * T_ + t] in b order; rows >= T_ zero
// (or left as they are when accumulating). dout (B * T_, C).
template <typename T>
void pos_backward_impl(const T* dout, T* dpos, int64_t N, int64_t P, int64_t C, int64_t T_, bool accumulate) {
  using acc_t = acc_type_t<T>;
  const int64_t B = N / T_;
  parallel_for(P, P > 1 && N * C >= kMinParallelElements, [&](int64_t t) {
    T* d = dpos + t * C;  // (C)
    if (t >= T_) {
      if (!accumulate) std::fill(d, d + C, T(0));
      return;
    }
    for (int64_t c = 0; c < C; ++c) {
      acc_t sum = static_cast<acc_t>(dout[t * C + c]);
      for (int64_t b = 1; b < B; ++b) sum += static_cast<acc_t>(dout[(b * T_ + t) * C + c]);
      d[c] = static_cast<T>(accumulate ? static_cast<acc_t>(d[c]) + sum : sum);
    }
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t N = ids.numel(), C = table.size(1);
  REEL_DISPATCH_FLOATING_AND_16(table.dtype(), "embedding_forward", {
    if (ids.dtype() == DType::i32)
      forward_impl<scalar_t>(ids.data<int32_t>(), table.data<scalar_t>(), out.data<scalar_t>(), N, C);
    else
      forward_impl<scalar_t>(ids.data<int64_t>(), table.data<scalar_t>(), out.data<scalar_t>(), N, C);
  })
}

// check_ids: nothing to do here, the entry point checked the ids on the host (or vouches for them).
void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool /*check_ids*/) {
  const int64_t N = ids.numel(), V = dtable.size(0), C = dtable.size(1);
  REEL_DISPATCH_FLOATING_AND_16(dtable.dtype(), "embedding_backward", {
    if (ids.dtype() == DType::i32)
      backward_impl<scalar_t, acc_t>(dout.data<scalar_t>(), ids.data<int32_t>(), dtable.data<scalar_t>(), N, V, C);
    else
      backward_impl<scalar_t, acc_t>(dout.data<scalar_t>(), ids.data<int64_t>(), dtable.data<scalar_t>(), N, V, C);
  })
}

void embedding_pos_forward(const Tensor& ids, const Tensor& table, const Tensor& pos, const Tensor& out, int64_t T) {
  const int64_t N = ids.numel(), C = table.size(1);
  REEL_DISPATCH_FLOATING_AND_16(table.dtype(), "embedding_pos_forward", {
    if (ids.dtype() == DType::i32)
      pos_forward_impl<scalar_t>(ids.data<int32_t>(), table.data<scalar_t>(), pos.data<scalar_t>(),
                                 out.data<scalar_t>(), N, C, T);
    else
      pos_forward_impl<scalar_t>(ids.data<int64_t>(), table.data<scalar_t>(), pos.data<scalar_t>(),
                                 out.data<scalar_t>(), N, C, T);
  })
}

void embedding_pos_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate_table,
                            const Tensor& dpos, bool accumulate_pos, int64_t T, bool /*check_ids*/) {
  const int64_t N = ids.numel(), C = dout.size(1);
  REEL_DISPATCH_FLOATING_AND_16(dout.dtype(), "embedding_pos_backward", {
    if (dtable.defined() && N > 0) {
      const int64_t V = dtable.size(0);
      if (ids.dtype() == DType::i32)
        backward_impl<scalar_t, acc_t>(dout.data<scalar_t>(), ids.data<int32_t>(), dtable.data<scalar_t>(), N, V, C,
                                       accumulate_table);
      else
        backward_impl<scalar_t, acc_t>(dout.data<scalar_t>(), ids.data<int64_t>(), dtable.data<scalar_t>(), N, V, C,
                                       accumulate_table);
    } else if (dtable.defined() && !accumulate_table) {
      dtable.fill_(0.0);
    }
    if (dpos.defined()) {
      if (N > 0)
        pos_backward_impl<scalar_t>(dout.data<scalar_t>(), dpos.data<scalar_t>(), N, dpos.size(0), C, T, accumulate_pos);
      else if (!accumulate_pos)
        dpos.fill_(0.0);
    }
  })
}

}  // namespace reel::kernels::cpu
