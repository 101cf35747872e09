// kernels/cpu/parallel.h: when a CPU kernel uses OpenMP threads, and how it stays off them.
//
// A kernel below the threshold runs its loop inline, without entering an OpenMP construct at
// all: `#pragma omp parallel if (false)` still costs a team set-up per call (with libgomp ~1.5 us:
// a malloc, a free and a futex syscall), which was three quarters of a one-element add's 2 us and
// what small micro-batches paid on every kernel (bench/bench_op_overhead prints both).
//
// The thresholds, in elements: below them a second thread costs more than it saves (a region's
// start and end, ~2-5 us on 2 cores, and far more when the machine is loaded and a team member
// waits for a time slice). A row-wise kernel (LayerNorm, softmax, cross-entropy: several passes
// over each row) pays from kMinParallelElements; a one-pass kernel (elementwise, reductions)
// moves less per element and pays from kMinParallelStreamElements. bench/bench_op_overhead prints
// the time with 2 threads over 1 at each size. Kernels with another unit of work (FLOPs, chunks)
// keep their own threshold.
//
// The kernels whose parallel part is a region with per-thread scratch and an inner `omp for`
// (LayerNorm/RMSNorm backward, cross-entropy forward, attention, embedding backward) keep a plain
// `#pragma omp parallel if (...)`: the same region written as a lambda called inside the
// construct ran LayerNorm backward 1.5-3x slower with one thread (bench_nn_kernels), and their
// work per call dwarfs the team set-up.
#pragma once
#include <cstdint>

namespace reel::kernels::cpu {

inline constexpr int64_t kMinParallelElements = int64_t{1} << 14;
inline constexpr int64_t kMinParallelStreamElements = int64_t{1} << 15;

// fn(i) for i in [0, n): split statically over the threads when `parallel` (and n > 1), else a
// plain loop on the calling thread.
template <typename F>
void parallel_for(int64_t n, bool parallel, F&& fn) {
  if (parallel && n > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace reel::kernels::cpu
