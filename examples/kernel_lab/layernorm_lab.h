// examples/kernel_lab/layernorm_lab.h: the kernel lab's four LayerNorm forward kernels
// (examples/kernel_lab/layernorm_lab.cu), as plain C++ entry points that the example program
// (kernel_lab.cpp) and its test (tests/test_kernel_lab.cpp) both call. docs/kernel_lab.md is the
// tutorial that walks through them.
//
// Each version computes, over the last dim of x (R, C), f32:
//   mean[r] = sum_c x[r, c] / C,   rstd[r] = 1 / sqrt(sum_c (x[r, c] - mean[r])^2 / C + eps)
//   y[r, c] = (x[r, c] - mean[r]) * rstd[r] * w[c] + b[c]
// (the biased variance, as reel's layernorm kernels: kernels/cuda/layernorm.cu, kernels/cpu/layernorm.cpp).
//
//   v1  one thread per row: three sweeps of its row, each thread alone (no communication)
//   v2  one warp per row: the lanes stride the row (coalesced) and add up with warp shuffles
//   v3  one block per row: a fused single sweep for the statistics (sum and sum of squares
//       together), warp shuffles, then the warps' partials through shared memory
//   v4  v3 with a planted race: the __syncthreads() between writing the warps' partials to shared
//       memory and reading them is missing. Under simt's race checker (SIMT_CHECK=race) its launch
//       raises reel::Error; without it the answer depends on the scheduling order.
//
// Plain C++ (no CUDA types): the kernels build with nvcc for a GPU, or as C++ against
// kernels/simt in the emulated build, and this header is the same in both.
#pragma once
#include <cstdint>
#include <vector>

namespace reel::lab {

enum class Version { v1, v2, v3, v4 };
constexpr Version kVersions[] = {Version::v1, Version::v2, Version::v3, Version::v4};

const char* version_name(Version v);   // "v1"
const char* version_what(Version v);   // "one thread per row", ...
// How it is launched for R rows: "(R/256 blocks) x 256", for the table.
const char* version_launch(Version v);

// Launches version v on cuda:0 (the current device) on the compute stream and returns without
// waiting. Device pointers, contiguous: x, y (R, C); w, b (C); mean, rstd (R). R, C >= 1.
// reel::Error names the kernel when the launch fails (and, under the race checker, the race).
void layernorm_forward(Version v, const float* x, const float* w, const float* b, float eps, float* y, float* mean,
                       float* rstd, int64_t R, int64_t C);

// Runs layernorm_forward(v, ...) `repeats` times, each launch between two CUDA events on the compute
// stream, and returns each launch's time in seconds. On a GPU these are device times; in the
// emulated build the events read the host clock (the launch runs when it is made).
std::vector<double> time_launches(Version v, const float* x, const float* w, const float* b, float eps, float* y,
                                  float* mean, float* rstd, int64_t R, int64_t C, int repeats);

}  // namespace reel::lab
