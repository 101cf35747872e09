// tests/simt_race_kernels.cu: planted bugs for SIMT_CHECK=race,uninit (tests/test_simt_race.cpp),
// each next to its correct version: a shared-memory tree reduction without its barriers, a tiled
// loop without its second barrier, a whole block writing one global element, half-warp shuffles
// and syncs with wrong masks, reads of shared memory nobody wrote; and atomics, which never race.
// The test finds the lines the checker must name by their `// RACE:` markers.
#include "simt_race_kernels.h"

namespace simt_race {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__global__ void tree_sum_kernel(bool broken, const float* in, float* out) {
  __shared__ float s[64];
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  __syncthreads();
  for (unsigned stride = 32; stride > 0; stride >>= 1) {
    if (t < stride) {
      const float other = s[t + stride];  // RACE: tree read
      s[t] += other;                       // RACE: tree write
    }
    if (!broken) __syncthreads();
  }
  if (t == 0) *out = s[0];
}

__global__ void tiled_sum_kernel(bool broken, int n, const float* in, float* out) {
  __shared__ float tile[32];
  const unsigned t = threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += 32) {
    tile[t] = in[k0 + t];  // RACE: tile write
    __syncthreads();
    for (int k = 0; k < 32; ++k) acc += tile[k];  // RACE: tile read
    if (!broken) __syncthreads();
  }
  out[t] = acc;
}

__global__ void block_ids_kernel(bool broken, int* out) {
  if (broken || threadIdx.x == 0) out[blockIdx.x] = int(blockIdx.x);  // RACE: block id write
}

__global__ void half_warp_rotate_kernel(bool broken, const float* in, float* out) {
  const unsigned lane = threadIdx.x;
  float v = in[lane];
  if (broken) {
    if (lane < 16) {
      const float r = __shfl_down_sync(0x0000ffffu, v, 8);  // RACE: shuffle wrong mask
      out[lane] = v + (lane < 8 ? r : in[lane - 8]);
    }
  } else {
    // Width 16: lane 8 + k reads lane k of its own half-warp, and every lane takes part.
    const float r = __shfl_sync(kFullMask, v, int(lane) + 8, 16);
    if (lane < 16) out[lane] = v + r;
  }
}

__global__ void half_warp_exchange_kernel(bool broken, const float* in, float* out) {
  __shared__ float s[32];
  const unsigned lane = threadIdx.x;
  s[lane] = in[lane];  // RACE: exchange write
  if (!broken) __syncwarp();
  if (lane < 16) {
    if (broken) __syncwarp(0x0000ffffu);
    out[lane] = s[lane + 16];  // RACE: exchange read
  }
}

__global__ void neighbour_sum_kernel(int n, const float* in, float* out, bool broken) {
  SIMT_DYNAMIC_SHARED(float, s);
  const int t = int(threadIdx.x);
  s[t] = in[t];
  __syncthreads();
  const float next = (broken || t + 1 < n) ? s[t + 1] : 0.f;  // RACE: neighbour read
  out[t] = s[t] + next;
}

__global__ void static_copy_kernel(bool broken, const float* in, float* out) {
  __shared__ float s[64];
  const unsigned t = threadIdx.x;
  if (t < 32) s[t] = in[t];
  __syncthreads();
  out[t] = s[broken ? t : t % 32];  // RACE: static read
}

__global__ void atomic_counts_kernel(int* count, int* block_count) {
  __shared__ int in_block;
  if (threadIdx.x == 0) in_block = 0;
  __syncthreads();
  atomicAdd(&in_block, 1);
  atomicAdd(count, 1);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(block_count, in_block / int(blockDim.x));
}

}  // namespace

cudaError_t tree_sum(bool broken, const float* in, float* out) {
  return simt::launch(tree_sum_kernel, 1, 64, 0, nullptr, broken, in, out);
}
cudaError_t tiled_sum(bool broken, int n, const float* in, float* out) {
  return simt::launch(tiled_sum_kernel, 1, 32, 0, nullptr, broken, n, in, out);
}
cudaError_t block_ids(bool broken, int blocks, int* out) {
  return simt::launch(block_ids_kernel, blocks, 64, 0, nullptr, broken, out);
}
cudaError_t half_warp_rotate(bool broken, const float* in, float* out) {
  return simt::launch(half_warp_rotate_kernel, 1, 32, 0, nullptr, broken, in, out);
}
cudaError_t half_warp_exchange(bool broken, const float* in, float* out) {
  return simt::launch(half_warp_exchange_kernel, 1, 32, 0, nullptr, broken, in, out);
}
cudaError_t neighbour_sum(bool broken, int n, const float* in, float* out) {
  const size_t shmem = sizeof(float) * size_t(broken ? n + 1 : n);
  return simt::launch(neighbour_sum_kernel, 1, n, shmem, nullptr, n, in, out, broken);
}
cudaError_t static_copy(bool broken, const float* in, float* out) {
  return simt::launch(static_copy_kernel, 1, 64, 0, nullptr, broken, in, out);
}
cudaError_t atomic_counts(int blocks, int* count, int* block_count) {
  return simt::launch(atomic_counts_kernel, blocks, 128, 0, nullptr, count, block_count);
}

}  // namespace simt_race
