// bench_kernels: times the kernel families at realistic sizes on a device and prints, per kernel,
// the median time, the bytes moved and FLOPs counted from the shapes, and the achieved GB/s and
// GFLOP/s. Compare GEMM with the machine's SGEMM roof and the rest with its memory bandwidth.
//   ./bench_kernels [cpu|cuda] [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/device_backend.h"
#include "core/tensor.h"
#include "kernels/dropout.h"
#include "kernels/ops.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_kernels.h"
#endif

using namespace reel;
using namespace reel::kernels;

namespace {
struct Row {
  std::string name;
  double ms, bytes, flops;
};

double median_ms(Device device, int repeats, const std::function<void()>& fn) {
  fn();  // warm-up: caches, allocator, lazy initialisation
  backend_for(device).synchronize();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    backend_for(device).synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const Device device(argc > 1 ? argv[1] : "cpu");
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
    const int64_t rows = 8192, C = 768;  // B*T = 8192 rows of width 768, as in GPT-2 small
    const double f = 4.0;                // bytes per f32
    Tensor x = randn({rows, C}, DType::f32, device);
    Tensor y = randn({rows, C}, DType::f32, device);
    Tensor bias = randn({C}, DType::f32, device);
    Tensor w = randn({4 * C, C}, DType::f32, device);
    std::vector<Row> table;
    auto add = [&](const std::string& name, double bytes, double flops, const std::function<void()>& fn) {
      table.push_back({name, median_ms(device, repeats, fn), bytes, flops});
    };
    const double n = static_cast<double>(rows * C);
    add("add (8192x768)", 3 * n * f, n, [&] { binary(BinaryOp::Add, x, y); });
    add("add bias (8192x768 + 768)", 2 * n * f, n, [&] { binary(BinaryOp::Add, x, bias); });
    add("mul scalar", 2 * n * f, n, [&] { binary(BinaryOp::Mul, x, 0.5); });
    add("gelu", 2 * n * f, 8 * n, [&] { unary(UnaryOp::Gelu, x); });
    add("exp", 2 * n * f, n, [&] { unary(UnaryOp::Exp, x); });
    add("sum rows (axis -1)", n * f, n, [&] { sum(x, {1}); });
    add("sum cols (axis 0)", n * f, n, [&] { sum(x, {0}); });
    add("max total", n * f, n, [&] { max(x); });
    add("dropout mask (p = 0.1)", n * f, 0, [&] { dropout_mask({rows, C}, DType::f32, device, 0.1, 1, 2); });
    add("randn", n * f, 0, [&] { randn({rows, C}, DType::f32, device); });
    add("contiguous(transpose)", 2 * n * f, 0, [&] { x.t().contiguous(); });
    const double M = rows, K = C, N = 4 * C;
    add("matmul x @ w^T (8192x768x3072)", (M * K + N * K + M * N) * f, 2 * M * N * K,
        [&] { matmul(x, w, false, true); });
#if defined(REEL_HAS_CUDA_BACKEND)
    if (device.is_cuda()) {  // the teaching kernel on the same product, b row-major (coalesced loads)
      Tensor wt = w.t().contiguous();
      Tensor out = empty({rows, 4 * C}, DType::f32, device);
      add("matmul tiled 16x16 (teaching, same)", (M * K + N * K + M * N) * f, 2 * M * N * K,
          [&] { kernels::cuda::matmul_tiled(x, wt, out); });
    }
#endif
    Tensor h = randn({rows, 4 * C}, DType::f32, device);
    add("matmul h^T @ x (dW: 3072x8192x768)", (M * N + M * K + N * K) * f, 2 * M * N * K,
        [&] { matmul(h, x, true, false); });
    Tensor q = randn({8, 12, 256, 64}, DType::f32, device);
    add("bmm q @ k^T (8x12, 256x64x256)", (2.0 * 96 * 256 * 64 + 96.0 * 256 * 256) * f,
        2.0 * 96 * 256 * 256 * 64, [&] { matmul(q, q, false, true); });

    std::printf("kernel benchmark on %s, median of %d runs\n", device.str().c_str(), repeats);
    std::printf("%-38s %10s %10s %10s %10s %10s\n", "kernel", "ms", "MB", "GFLOP", "GB/s", "GFLOP/s");
    for (const Row& r : table)
      std::printf("%-38s %10.3f %10.1f %10.2f %10.1f %10.1f\n", r.name.c_str(), r.ms, r.bytes / 1e6, r.flops / 1e9,
                  r.bytes / r.ms / 1e6, r.flops / r.ms / 1e6);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
