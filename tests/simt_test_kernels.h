// tests/simt_test_kernels.h: host-callable launchers of the kernels in simt_test_kernels.cu, the
// test material for the simt emulator (tests/test_simt.cpp). The same .cu builds with nvcc for a
// GPU and with g++ -DSIMT_EMULATE for the CPU. Pointers are device pointers (cudaMalloc).
#pragma once
#include <cstddef>

#include "kernels/simt/simt.h"

namespace simt_test {

// y = a * x + y, grid-stride loop over at most 1024 blocks of 256 threads.
cudaError_t axpy(int n, float a, const float* x, float* y);
// y = a * x through float4 loads and stores; n % 4 == 0, x and y 16-byte aligned.
cudaError_t scale4(int n, float a, const float* x, float* y);
// Row-major C[M,N] = A[M,K] * B[K,N] with 16x16 shared-memory tiles.
cudaError_t sgemm_tiled(int m, int n, int k, const float* a, const float* b, float* c);
// *out += sum of x (warp shuffles, shared memory, one atomicAdd per block). block % 32 == 0.
cudaError_t reduce_sum(int n, const float* x, float* out, int block, int grid);
// Row-wise softmax, one block of 256 threads per row, per-warp partials in dynamic shared memory.
cudaError_t softmax_rows(int rows, int cols, const float* x, float* y);

// One block of 64 threads; per thread 4 ints: ballot(lane % 3 == 0), any(lane == 5 in warp 1),
// all(lane < 32), and for lanes < 16 a ballot over mask 0xffff of (lane odd), else -1.
cudaError_t warp_votes(int* out);
// One block of 96 threads; per thread 4 ints: __syncthreads_count(t % 3 == 0),
// __syncthreads_and(t < 96), __syncthreads_or(t == 95), __syncthreads_and(t < 50).
cudaError_t block_votes(int* out);
constexpr int kShuffleOutputs = 6;
// One block of 64 threads, in[t] given; per thread kShuffleOutputs ints: xor-butterfly warp sum,
// broadcast of lane 7, inclusive scan (shfl_up), sum over groups of 8 (shfl_xor, width 8),
// lane (lane + 1) % 16 of its half-warp (shfl, width 16), and lane 31 - lane through shared
// memory after __syncwarp().
cudaError_t warp_shuffles(const int* in, int* out);

struct AtomicCounters {
  int count;          // atomicAdd(+1) per thread
  int max;            // atomicMax(global id)
  int min;            // atomicMin(-global id)
  unsigned cas_count; // +1 per thread through an atomicCAS loop
  unsigned bits;      // atomicOr(1 << (global id % 32))
  unsigned wrap;      // atomicInc(wrap, 999) per thread
  unsigned long long big;  // atomicAdd(1ull << 33)
  float fsum;         // atomicAdd(1.0f)
  double dsum;        // atomicAdd(0.5)
};
// blocks x threads updates of *c (zero-initialised by the caller).
cudaError_t atomics(int blocks, int threads, AtomicCounters* c);

// Grid (3,4,5) x block (4,3,2): out[global linear id] = packed (block, thread) indices, see
// pack_index(); the ids run x fastest, block-major.
constexpr int kIndexThreads = 3 * 4 * 5 * 4 * 3 * 2;
__host__ __device__ inline int pack_index(int bx, int by, int bz, int tx, int ty, int tz) {
  return ((((bx * 8 + by) * 8 + bz) * 8 + tx) * 8 + ty) * 8 + tz;
}
cudaError_t indices_3d(int* out);

// out[i] = in[i ^ 255 within its block of 256] through static shared memory: each block reverses
// its 256 elements. n % 256 == 0. The second one lacks the __syncthreads() between the write and
// the read of shared memory (deliberate bug).
cudaError_t reverse_blocks(int n, const int* in, int* out);
cudaError_t reverse_blocks_missing_sync(int n, const int* in, int* out);

// A kernel that does nothing, for launch-configuration checks.
cudaError_t launch_empty(dim3 grid, dim3 block, size_t shmem);
// Each of 32 threads writes `bytes` / 32 floats of dynamic shared memory and out[t] = their
// sum; opt_in raises the kernel's limit with cudaFuncSetAttribute first.
cudaError_t big_dynamic_shared(float* out, size_t bytes, bool opt_in);
// out[t] = dynamic shared memory word t, read before anything writes it (32 threads).
cudaError_t read_unwritten_dynamic_shared(float* out);

// Deliberately broken kernels, each aborts the emulator with "divergent barrier":
cudaError_t bug_early_return(int n, float* y);   // return before __syncthreads() (n % 256 != 0)
cudaError_t bug_split_barrier(float* y);         // two halves of a block at different barriers
cudaError_t bug_shuffle_vs_barrier(float* y);    // half a warp in a shuffle, half at __syncthreads()
cudaError_t bug_mixed_masks(float* y);           // lanes of one round with different masks

}  // namespace simt_test
