// The host's roof for the profiler's table (kernels/device_backends.h): measured, not looked up,
// because what counts is what this machine's cores and memory give a program now (a shared
// machine, a container's CPU quota). A stream-style copy gives the memory roof, a large SGEMM on
// the CPU backend the f32 compute roof (kernels/cpu/gemm.h: oneDNN's sgemm, or Eigen's GEMM in a
// build without oneDNN), and 512^3 GEMMs in f64, bf16 and f16 the other dtypes' compute roofs (the
// 16-bit ones through the path this CPU takes: oneDNN's native matmul, or converted to f32; see
// kernels/cpu/gemm.h gemm16_path); each is the best of a few runs: a short calibration, which
// report/profile.h roof_for runs once per process.
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
  // The other dtypes' GEMMs, smaller: the 16-bit ones may run far below the SGEMM on a CPU without
  // native instructions for them.
  const int64_t s = 512;
  for (DType dtype : {DType::f64, DType::bf16, DType::f16}) {
    const Tensor x = full({s, s}, 0.5, dtype, Device::cpu());
    const Tensor y = full({s, s}, 0.25, dtype, Device::cpu());
    const Tensor z = empty({s, s}, dtype, Device::cpu());
    const double seconds = best_seconds(3, [&] { cpu::matmul(x, y, z, Tensor(), false); });
    roof.flops_by_dtype.emplace_back(dtype, 2.0 * static_cast<double>(s * s * s) / seconds);
  }
  roof.source = "measured on this host: 64 MiB copy, 1024^3 SGEMM, 512^3 GEMM in f64, bf16, f16";
  return roof;
}

}  // namespace reel::kernels
