// tests/simt_test_kernels.cu: kernels that exercise the simt emulator (and, built by nvcc, the same
// code on a GPU): grid-stride loops, float4, shared-memory tiling, shuffles and votes, atomics,
// dynamic shared memory, 3D indices, and deliberately broken kernels. Launchers: simt_test_kernels.h.
#include "simt_test_kernels.h"

namespace simt_test {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

__global__ void axpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * __ldg(&x[i]) + y[i];
}

__global__ void scale4_kernel(int n4, float a, const float4* __restrict__ x, float4* __restrict__ y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += blockDim.x * gridDim.x) {
    const float4 v = __ldg(&x[i]);
    y[i] = make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
  }
}

template <int TILE>
__global__ void __launch_bounds__(TILE * TILE)
    sgemm_tiled_kernel(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                       float* __restrict__ C) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__global__ void reduce_sum_kernel(int n, const float* __restrict__ x, float* out) {
  __shared__ float warp_sums[32];
  float v = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
  v = warp_sum(v);
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / warpSize;
    v = lane < warps ? warp_sums[lane] : 0.f;
    v = warp_sum(v);
    if (lane == 0) atomicAdd(out, v);
  }
}

__global__ void softmax_rows_kernel(int cols, const float* __restrict__ x, float* __restrict__ y) {
  SIMT_DYNAMIC_SHARED(float, partial);  // one float per warp
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const int warps = blockDim.x / warpSize;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
  m = warp_max(m);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = partial[0];
  for (int i = 1; i < warps; ++i) m = fmaxf(m, partial[i]);
  __syncthreads();  // partial[] is reused below
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(xr[c] - m);
  s = warp_sum(s);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  s = 0.f;
  for (int i = 0; i < warps; ++i) s += partial[i];
  const float inv = 1.f / s;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = __expf(xr[c] - m) * inv;
}

__global__ void warp_votes_kernel(int* out) {
  const int t = threadIdx.x, lane = t % warpSize, warp = t / warpSize;
  int* o = out + 4 * t;
  o[0] = int(__ballot_sync(kFullMask, lane % 3 == 0));
  o[1] = __any_sync(kFullMask, lane == 5 && warp == 1);
  o[2] = __all_sync(kFullMask, lane < 32);
  o[3] = lane < 16 ? int(__ballot_sync(0x0000ffffu, lane & 1)) : -1;
}

__global__ void block_votes_kernel(int* out) {
  const int t = threadIdx.x;
  int* o = out + 4 * t;
  o[0] = __syncthreads_count(t % 3 == 0);
  o[1] = __syncthreads_and(t < 96);
  o[2] = __syncthreads_or(t == 95);
  o[3] = __syncthreads_and(t < 50);
}

__global__ void warp_shuffles_kernel(const int* in, int* out) {
  __shared__ int exchange[64];
  const int t = threadIdx.x, lane = t % warpSize;
  const int v = in[t];
  int* o = out + kShuffleOutputs * t;
  int sum = v;
  for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(kFullMask, sum, m);
  o[0] = sum;
  o[1] = __shfl_sync(kFullMask, v, 7);
  int scan = v;
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(kFullMask, scan, d);
    if (lane >= d) scan += up;
  }
  o[2] = scan;
  int group = v;
  for (int m = 4; m > 0; m >>= 1) group += __shfl_xor_sync(kFullMask, group, m, 8);
  o[3] = group;
  o[4] = __shfl_sync(kFullMask, v, lane + 1, 16);
  exchange[t] = v;
  __syncwarp();
  o[5] = exchange[t - lane + 31 - lane];
}

__global__ void atomics_kernel(AtomicCounters* c) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&c->count, 1);
  atomicMax(&c->max, gid);
  atomicMin(&c->min, -gid);
  unsigned old = atomicAdd(&c->cas_count, 0u), seen;
  while ((seen = atomicCAS(&c->cas_count, old, old + 1)) != old) old = seen;
  atomicOr(&c->bits, 1u << (gid % 32));
  atomicInc(&c->wrap, 999u);
  atomicAdd(&c->big, 1ull << 33);
  atomicAdd(&c->fsum, 1.0f);
  atomicAdd(&c->dsum, 0.5);
}

__global__ void indices_3d_kernel(int* out) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads_per_block = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads_per_block + thread] =
      pack_index(blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
}

__global__ void reverse_blocks_kernel(const int* in, int* out) {
  __shared__ int s[256];
  const int base = blockIdx.x * 256, t = threadIdx.x;
  s[t] = in[base + t];
  __syncthreads();
  out[base + t] = s[255 - t];
}

__global__ void reverse_blocks_missing_sync_kernel(const int* in, int* out) {
  __shared__ int s[256];
  const int base = blockIdx.x * 256, t = threadIdx.x;
  s[t] = in[base + t];
  // BUG (deliberate): no __syncthreads() here, s[255 - t] may not be written yet.
  out[base + t] = s[255 - t];
}

__global__ void empty_kernel() {}

__global__ void big_dynamic_shared_kernel(float* out, int floats_per_thread) {
  SIMT_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  for (int i = 0; i < floats_per_thread; ++i) s[t * floats_per_thread + i] = float(i);
  __syncthreads();
  float sum = 0.f;
  for (int i = 0; i < floats_per_thread; ++i) sum += s[t * floats_per_thread + i];
  out[t] = sum;
}

__global__ void read_unwritten_dynamic_shared_kernel(float* out) {
  SIMT_DYNAMIC_SHARED(float, s);
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void early_return_kernel(int n, float* y) {
  __shared__ float s[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;  // BUG (deliberate): these threads never reach the barrier below
  s[threadIdx.x] = float(i);
  __syncthreads();
  y[i] = s[(threadIdx.x + 1) % blockDim.x];
}

__global__ void split_barrier_kernel(float* y) {
  if (threadIdx.x < 16) {
    y[threadIdx.x] = 1.f;
    __syncthreads();  // BUG (deliberate): a different barrier from the one below
  } else {
    y[threadIdx.x] = 2.f;
    __syncthreads();
  }
}

__global__ void shuffle_vs_barrier_kernel(float* y) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16)
    v = __shfl_xor_sync(kFullMask, v, 1);  // BUG (deliberate): lanes 16..31 never join this round
  else
    __syncthreads();
  y[threadIdx.x] = v;
}

__global__ void mixed_masks_kernel(float* y) {
  float v = float(threadIdx.x);
  // BUG (deliberate): one round, two masks.
  v = __shfl_xor_sync(threadIdx.x < 16 ? 0x0000ffffu : kFullMask, v, 1);
  y[threadIdx.x] = v;
}

}  // namespace

cudaError_t axpy(int n, float a, const float* x, float* y) {
  return simt::launch(axpy_kernel, dim3(min(ceil_div(n, 256), 1024)), dim3(256), 0, nullptr, n, a, x, y);
}

cudaError_t scale4(int n, float a, const float* x, float* y) {
  const int n4 = n / 4;
  return simt::launch(scale4_kernel, dim3(max(1, min(ceil_div(n4, 256), 1024))), dim3(256), 0, nullptr, n4, a,
                      reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y));
}

cudaError_t sgemm_tiled(int m, int n, int k, const float* a, const float* b, float* c) {
  return simt::launch(sgemm_tiled_kernel<16>, dim3(ceil_div(n, 16), ceil_div(m, 16)), dim3(16, 16), 0, nullptr, m,
                      n, k, a, b, c);
}

cudaError_t reduce_sum(int n, const float* x, float* out, int block, int grid) {
  return simt::launch(reduce_sum_kernel, dim3(grid), dim3(block), 0, nullptr, n, x, out);
}

cudaError_t softmax_rows(int rows, int cols, const float* x, float* y) {
  const int block = 256;
  return simt::launch(softmax_rows_kernel, dim3(rows), dim3(block), (block / 32) * sizeof(float), nullptr, cols, x,
                      y);
}

cudaError_t warp_votes(int* out) { return simt::launch(warp_votes_kernel, dim3(1), dim3(64), 0, nullptr, out); }

cudaError_t block_votes(int* out) { return simt::launch(block_votes_kernel, dim3(1), dim3(96), 0, nullptr, out); }

cudaError_t warp_shuffles(const int* in, int* out) {
  return simt::launch(warp_shuffles_kernel, dim3(1), dim3(64), 0, nullptr, in, out);
}

cudaError_t atomics(int blocks, int threads, AtomicCounters* c) {
  return simt::launch(atomics_kernel, dim3(blocks), dim3(threads), 0, nullptr, c);
}

cudaError_t indices_3d(int* out) {
  return simt::launch(indices_3d_kernel, dim3(3, 4, 5), dim3(4, 3, 2), 0, nullptr, out);
}

cudaError_t reverse_blocks(int n, const int* in, int* out) {
  return simt::launch(reverse_blocks_kernel, dim3(n / 256), dim3(256), 0, nullptr, in, out);
}

cudaError_t reverse_blocks_missing_sync(int n, const int* in, int* out) {
  return simt::launch(reverse_blocks_missing_sync_kernel, dim3(n / 256), dim3(256), 0, nullptr, in, out);
}

cudaError_t launch_empty(dim3 grid, dim3 block, size_t shmem) {
  return simt::launch(empty_kernel, grid, block, shmem, nullptr);
}

cudaError_t big_dynamic_shared(float* out, size_t bytes, bool opt_in) {
  if (opt_in) {
    const cudaError_t e =
        cudaFuncSetAttribute(big_dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    if (e != cudaSuccess) return e;
  }
  return simt::launch(big_dynamic_shared_kernel, dim3(1), dim3(32), bytes, nullptr, out,
                      int(bytes / sizeof(float) / 32));
}

cudaError_t read_unwritten_dynamic_shared(float* out) {
  return simt::launch(read_unwritten_dynamic_shared_kernel, dim3(1), dim3(32), 32 * sizeof(float), nullptr, out);
}

cudaError_t bug_early_return(int n, float* y) {
  return simt::launch(early_return_kernel, dim3(ceil_div(n, 256)), dim3(256), 0, nullptr, n, y);
}

cudaError_t bug_split_barrier(float* y) { return simt::launch(split_barrier_kernel, dim3(1), dim3(32), 0, nullptr, y); }

cudaError_t bug_shuffle_vs_barrier(float* y) {
  return simt::launch(shuffle_vs_barrier_kernel, dim3(1), dim3(32), 0, nullptr, y);
}

cudaError_t bug_mixed_masks(float* y) { return simt::launch(mixed_masks_kernel, dim3(1), dim3(32), 0, nullptr, y); }

}  // namespace simt_test
