// tests/simt_race_kernels.h: host-callable launchers of the kernels in simt_race_kernels.cu, the
// material of tests/test_simt_race.cpp: each planted bug (a race, an uninitialised shared read, a
// shuffle with a wrong mask) next to its correct version. `broken` picks the planted bug; the
// lines the checker must name carry a `// RACE:` marker in the .cu. Pointers are device pointers.
#pragma once
#include "kernels/simt/simt.h"

namespace simt_race {

// One block of 64 threads: *out = sum of in[0..64) by a shared-memory tree; broken: no
// __syncthreads() between the steps of the tree.
cudaError_t tree_sum(bool broken, const float* in, float* out);
// One block of 32 threads: out[t] = sum of in[0..n) (n % 32 == 0), in 32-element shared tiles;
// broken: no __syncthreads() after the tile is used, so the next tile overwrites it (write after read).
cudaError_t tiled_sum(bool broken, int n, const float* in, float* out);
// `blocks` blocks of 64 threads: out[b] = b; broken: every thread of the block writes it.
cudaError_t block_ids(bool broken, int blocks, int* out);
// One block of 32 threads: out[t] = in[t] + in[(t + 8) % 16] for t < 16 (a rotation within the
// lower half-warp); broken: __shfl_down_sync with mask 0x0000ffff called by lanes 0..15 only, so
// lanes 8..15 read lanes 16..23, which are not in the round.
cudaError_t half_warp_rotate(bool broken, const float* in, float* out);
// One block of 32 threads: out[t] = in[t + 16] for t < 16, through shared memory; broken: lanes
// 0..15 sync with mask 0x0000ffff only, so the writes of lanes 16..31 are not ordered before the reads.
cudaError_t half_warp_exchange(bool broken, const float* in, float* out);
// One block of n threads (n <= 64): out[t] = in[t] + in[t + 1] (0 past the end) through dynamic
// shared memory of n floats; broken: n + 1 floats, and thread n - 1 reads the one nobody wrote.
cudaError_t neighbour_sum(bool broken, int n, const float* in, float* out);
// One block of 64 threads: out[t] = in[t % 32] through a static __shared__ array; broken: the
// threads 32..63 read entries 32..63, which nobody wrote.
cudaError_t static_copy(bool broken, const float* in, float* out);
// `blocks` blocks of 128 threads: *count += blocks * 128 by atomicAdd on global memory, and
// *block_count += blocks by a shared-memory atomic counter per block: no race.
cudaError_t atomic_counts(int blocks, int* count, int* block_count);

}  // namespace simt_race
