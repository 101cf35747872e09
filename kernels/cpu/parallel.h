// kernels/cpu/parallel.h: when a CPU kernel uses OpenMP threads, and how it stays off them.
//
// A kernel below the threshold runs its loop inline, without entering an OpenMP construct at
// all: `#pragma omp parallel if (false)` still costs a team set-up per call (with libgomp: a
// malloc, a free and a futex syscall), a cost of the size of a small op's whole fixed cost, which
// small micro-batches would pay on every kernel. docs/benchmarks.md, "The fixed cost of an op",
// has that fixed cost per call (bench/bench_op_overhead).
//
// The thresholds, in elements: below them a second thread costs more than it saves (a region's
// start and end, and far more when the machine is loaded and a team member waits for a time
// slice). A row-wise kernel (LayerNorm, softmax, cross-entropy: several passes over each row) pays
// from kMinParallelElements; a one-pass kernel (elementwise, reductions) moves less per element
// and pays from kMinParallelStreamElements. The same table's second part gives the time with 2
// threads over the time with 1 at sizes on both sides of them (about 1 below them, where both run
// one thread). Kernels with another unit of work (FLOPs, chunks) keep their own threshold.
//
// The kernels whose parallel part is a region with per-thread scratch and an inner `omp for`
// (LayerNorm/RMSNorm backward, cross-entropy forward, attention, embedding backward) keep a plain
// `#pragma omp parallel if (...)`: the same region written as a lambda called inside the
// construct ran LayerNorm backward slower with one thread (timed with bench/bench_nn_kernels, both
// forms), and their work per call dwarfs the team set-up.
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
