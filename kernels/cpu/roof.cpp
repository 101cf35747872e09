// The host's roof for the profiler's table (kernels/device_backends.h): measured, not looked up,
// because what counts is what this machine's cores and memory give a program now (a shared
// machine, a container's CPU quota). A stream-style copy gives the memory roof, a large SGEMM on
// the CPU backend the compute roof (kernels/cpu/gemm.h: oneDNN's sgemm, or Eigen's GEMM in a
// build without oneDNN); each is the best of a few runs. About 0.2 s, once.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/device_backends.h"

namespace reel::kernels {

namespace {

template <typename Fn>
double best_seconds(int runs, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

profile::Roof measure_cpu_roof() {
  // Copy: 2 x 64 MiB, far beyond the last-level cache; read + written bytes per pass.
  const int64_t n = int64_t{16} << 20;
  std::vector<float> src(static_cast<size_t>(n), 1.0f), dst(static_cast<size_t>(n), 0.0f);
  const double copy_s = best_seconds(4, [&] {
    float* d = dst.data();
    const float* s = src.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
  });
  // SGEMM 1024^3 through the CPU backend's matmul.
  const int64_t m = 1024;
  const Tensor a = full({m, m}, 0.5, DType::f32, Device::cpu());
  const Tensor b = full({m, m}, 0.25, DType::f32, Device::cpu());
  const Tensor c = empty({m, m}, DType::f32, Device::cpu());
  const double gemm_s = best_seconds(4, [&] { cpu::matmul(a, b, c, Tensor(), false); });

  profile::Roof roof;
  roof.bytes_per_s = 2.0 * static_cast<double>(n) * sizeof(float) / copy_s;
  roof.flops_per_s = 2.0 * static_cast<double>(m * m * m) / gemm_s;
  roof.source = "measured on this host: 64 MiB copy, 1024^3 SGEMM";
  return roof;
}

}  // namespace reel::kernels
