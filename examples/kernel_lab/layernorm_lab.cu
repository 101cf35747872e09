// examples/kernel_lab/layernorm_lab.cu: LayerNorm forward written three ways, and a fourth with a
// planted race (the contract and the versions: layernorm_lab.h; the walk-through:
// docs/kernel_lab.md). Plain CUDA C++ that nvcc compiles for a GPU and g++ compiles against
// kernels/simt (the emulator): launches go through kernels/cuda/launch.h, never <<<>>>.
//
// Every version works on a row shifted by its first value, x - x[0] (as reel's own kernels do):
// the sums then stay small when a row sits far from 0, which matters most to v3's single pass,
// whose variance E[d^2] - E[d]^2 would otherwise cancel catastrophically.
#include "examples/kernel_lab/layernorm_lab.h"

#include "kernels/cuda/launch.h"

namespace reel::lab {

namespace {

using kernels::cuda::kFullMask;

constexpr int kThreads = 256;              // block size of every version
constexpr int kWarps = kThreads / 32;      // v2: rows per block; v3: partials per block

// ---- v1: one thread per row ----------------------------------------------------------------------
// Thread r owns row r and sweeps it three times: the mean, the variance, the output. Nothing is
// shared, so nothing needs a barrier. But neighbouring threads read addresses C floats apart, so a
// warp's 32 loads touch 32 different cache lines: the memory system serves one useful float of
// each 32-byte sector it fetches, and with few rows most of the GPU has no thread at all.
// x, y: (R, C); w, b: (C); mean, rstd: (R).
__global__ void layernorm_v1(const float* x, const float* w, const float* b, float eps, float* y, float* mean,
                             float* rstd, int64_t R, int64_t C) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (row >= R) return;  // the last block's tail: no barrier follows, so an early return is safe
  const float* xr = x + row * C;
  float* yr = y + row * C;
  const float shift = xr[0];
  float s = 0;
  for (int64_t c = 0; c < C; ++c) s += xr[c] - shift;
  const float m = s / C;  // mean of x - shift
  float v = 0;
  for (int64_t c = 0; c < C; ++c) v += (xr[c] - shift - m) * (xr[c] - shift - m);
  const float rs = 1.f / sqrtf(v / C + eps);
  for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - shift - m) * rs * w[c] + b[c];
  mean[row] = shift + m;
  rstd[row] = rs;
}

// ---- v2: one warp per row ------------------------------------------------------------------------
// The 32 lanes of a warp share a row: lane l reads columns l, l + 32, ..., so each load of the warp
// is 128 contiguous bytes (coalesced). The lanes' partial sums meet through shuffles, register to
// register, with no shared memory and no barrier: after 5 rounds of __shfl_down_sync lane 0 holds
// the total, and one __shfl_sync hands it to every lane. The three sweeps stay: the second and
// third read the row again, from L1 (a row of a few thousand floats fits).
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(kFullMask, v, offset);
  return __shfl_sync(kFullMask, v, 0);  // lane 0's total, to every lane
}

// Block of kWarps warps, warp k of block i owns row i * kWarps + k. Shapes as v1.
__global__ void layernorm_v2(const float* x, const float* w, const float* b, float eps, float* y, float* mean,
                             float* rstd, int64_t R, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t{kWarps} + (threadIdx.x >> 5);
  if (row >= R) return;  // the same for the 32 lanes of a warp: no shuffle is left half-attended
  const float* xr = x + row * C;
  float* yr = y + row * C;
  const float shift = xr[0];
  float s = 0;
  for (int64_t c = lane; c < C; c += 32) s += xr[c] - shift;
  const float m = warp_sum(s) / C;
  float v = 0;
  for (int64_t c = lane; c < C; c += 32) v += (xr[c] - shift - m) * (xr[c] - shift - m);
  const float rs = 1.f / sqrtf(warp_sum(v) / C + eps);
  for (int64_t c = lane; c < C; c += 32) yr[c] = (xr[c] - shift - m) * rs * w[c] + b[c];
  if (lane == 0) {
    mean[row] = shift + m;
    rstd[row] = rs;
  }
}

// ---- v3 (and v4): one block per row, fused single pass --------------------------------------------
// 256 threads share one row, so a wide row is read by 8 times more threads than in v2, and the
// statistics take ONE sweep instead of two: each thread adds d = x - x[0] and d * d together, and
// var = E[d^2] - E[d]^2 at the end. Reduction in two levels: shuffles within each warp, then lane 0
// of each warp puts its warp's partials in shared memory, a barrier, and warp 0 adds the 8 partials
// with shuffles again; its lane 0 publishes the row's statistics through shared memory, a second
// barrier, and every thread writes its columns of y. Sweeps of x: two (statistics, output) not three.
//
// kRacy (v4) leaves out the first barrier: warp 0 may read a partial before the warp that owns it
// has written it (in the emulator's forward order it reads the previous row's value).
template <bool kRacy>
__global__ void layernorm_v3(const float* x, const float* w, const float* b, float eps, float* y, float* mean,
                             float* rstd, int64_t C) {
  __shared__ float part_s[kWarps], part_q[kWarps];  // (kWarps) each warp's sum of d and of d^2
  __shared__ float row_mean, row_rstd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * C;
  float* yr = y + row * C;
  const float shift = xr[0];
  float s = 0, q = 0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float d = xr[c] - shift;
    s += d;
    q += d * d;
  }
  for (int offset = 16; offset > 0; offset >>= 1) {  // level 1: within each warp, lane 0 gets the sums
    s += __shfl_down_sync(kFullMask, s, offset);
    q += __shfl_down_sync(kFullMask, q, offset);
  }
  if (lane == 0) {
    part_s[warp] = s;
    part_q[warp] = q;
  }
  if (!kRacy) __syncthreads();  // every partial written before warp 0 reads them (v4: missing!)
  if (warp == 0) {  // level 2: warp 0 adds the kWarps partials
    s = lane < kWarps ? part_s[lane] : 0.f;
    q = lane < kWarps ? part_q[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      s += __shfl_down_sync(kFullMask, s, offset);
      q += __shfl_down_sync(kFullMask, q, offset);
    }
    if (lane == 0) {
      const float m = s / C;                          // E[d]
      const float var = fmaxf(q / C - m * m, 0.f);    // E[d^2] - E[d]^2, never below 0 by rounding
      row_mean = shift + m;
      row_rstd = 1.f / sqrtf(var + eps);
      mean[row] = row_mean;
      rstd[row] = row_rstd;
    }
  }
  __syncthreads();  // row_mean, row_rstd published
  const float m = row_mean, rs = row_rstd;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
}

unsigned blocks(int64_t n, int64_t per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

}  // namespace

const char* version_name(Version v) {
  switch (v) {
    case Version::v1: return "v1";
    case Version::v2: return "v2";
    case Version::v3: return "v3";
    case Version::v4: return "v4";
  }
  return "?";
}

const char* version_what(Version v) {
  switch (v) {
    case Version::v1: return "one thread per row";
    case Version::v2: return "one warp per row, shuffles";
    case Version::v3: return "one block per row, smem, one pass";
    case Version::v4: return "v3 without its first barrier";
  }
  return "?";
}

const char* version_launch(Version v) {
  switch (v) {
    case Version::v1: return "ceil(R/256) blocks x 256";
    case Version::v2: return "ceil(R/8) blocks x 256";
    case Version::v3:
    case Version::v4: return "R blocks x 256";
  }
  return "?";
}

void layernorm_forward(Version v, const float* x, const float* w, const float* b, float eps, float* y, float* mean,
                       float* rstd, int64_t R, int64_t C) {
  using kernels::cuda::launch;
  const dim3 block(kThreads);
  switch (v) {
    case Version::v1:
      launch("layernorm_v1", layernorm_v1, dim3(blocks(R, kThreads)), block, 0, x, w, b, eps, y, mean, rstd, R, C);
      break;
    case Version::v2:
      launch("layernorm_v2", layernorm_v2, dim3(blocks(R, kWarps)), block, 0, x, w, b, eps, y, mean, rstd, R, C);
      break;
    case Version::v3:
      launch("layernorm_v3", layernorm_v3<false>, dim3(static_cast<unsigned>(R)), block, 0, x, w, b, eps, y, mean,
             rstd, C);
      break;
    case Version::v4:
      launch("layernorm_v4", layernorm_v3<true>, dim3(static_cast<unsigned>(R)), block, 0, x, w, b, eps, y, mean,
             rstd, C);
      break;
  }
}

std::vector<double> time_launches(Version v, const float* x, const float* w, const float* b, float eps, float* y,
                                  float* mean, float* rstd, int64_t R, int64_t C, int repeats) {
  cudaEvent_t start, stop;
  REEL_CUDA_CHECK(cudaEventCreate(&start));
  REEL_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> seconds;
  try {
    for (int i = 0; i < repeats; ++i) {
      REEL_CUDA_CHECK(cudaEventRecord(start, kernels::cuda::stream()));
      layernorm_forward(v, x, w, b, eps, y, mean, rstd, R, C);
      REEL_CUDA_CHECK(cudaEventRecord(stop, kernels::cuda::stream()));
      REEL_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      REEL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      seconds.push_back(ms * 1e-3);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  REEL_CUDA_CHECK(cudaEventDestroy(start));
  REEL_CUDA_CHECK(cudaEventDestroy(stop));
  return seconds;
}

}  // namespace reel::lab
