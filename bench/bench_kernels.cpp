// bench_kernels: times the kernel families at realistic sizes on a device and prints, per kernel,
// the median time, the bytes moved and FLOPs counted from the shapes, and the achieved GB/s and
// GFLOP/s. Compare GEMM with the machine's SGEMM roof and the rest with its memory bandwidth.
//   ./bench_kernels [cpu|cuda] [repeats]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "kernels/dropout.h"
#include "kernels/ops.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_only.h"
#endif

using namespace reel;
using namespace reel::kernels;

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
    bench::KernelTable table(device, repeats);
    const double n = static_cast<double>(rows * C);
    table.add("add (8192x768)", 3 * n * f, n, [&] { binary(BinaryOp::Add, x, y); });
    table.add("add bias (8192x768 + 768)", 2 * n * f, n, [&] { binary(BinaryOp::Add, x, bias); });
    table.add("mul scalar", 2 * n * f, n, [&] { binary(BinaryOp::Mul, x, 0.5); });
    table.add("gelu", 2 * n * f, 8 * n, [&] { unary(UnaryOp::Gelu, x); });
    table.add("exp", 2 * n * f, n, [&] { unary(UnaryOp::Exp, x); });
    // The fused backward passes (kernels::unary_backward): read dy and x, write dx, one pass each
    // (GELU's backward used to be 13 elementwise kernels).
    table.add("gelu backward (fused)", 3 * n * f, 20 * n, [&] { unary_backward(UnaryOp::Gelu, y, x); });
    table.add("silu backward (fused)", 3 * n * f, 8 * n, [&] { unary_backward(UnaryOp::Silu, y, x); });
    Tensor zero = zeros({}, DType::f32, device);
    table.add("where(x > 0, y, 0) (compare + where)", 5 * n * f, 2 * n,
        [&] { where(compare(CompareOp::Gt, x, 0.0), y, zero); });
    table.add("sum rows (axis -1)", n * f, n, [&] { sum(x, {1}); });
    table.add("sum cols (axis 0)", n * f, n, [&] { sum(x, {0}); });
    table.add("max total", n * f, n, [&] { max(x); });
    table.add("dropout mask (p = 0.1)", n * f, 0, [&] { dropout_mask({rows, C}, DType::f32, device, 0.1, 1, 2); });
    table.add("randn", n * f, 0, [&] { randn({rows, C}, DType::f32, device); });
    table.add("contiguous(transpose)", 2 * n * f, 0, [&] { x.t().contiguous(); });
    const double M = rows, K = C, N = 4 * C;
    table.add("matmul x @ w^T (8192x768x3072)", (M * K + N * K + M * N) * f, 2 * M * N * K,
        [&] { matmul(x, w, false, true); });
#if defined(REEL_HAS_CUDA_BACKEND)
    if (device.is_cuda()) {  // the teaching kernel on the same product, b row-major (coalesced loads)
      Tensor wt = w.t().contiguous();
      Tensor out = empty({rows, 4 * C}, DType::f32, device);
      table.add("matmul tiled 16x16 (teaching, same)", (M * K + N * K + M * N) * f, 2 * M * N * K,
          [&] { kernels::cuda::matmul_tiled(x, wt, out); });
    }
#endif
    Tensor h = randn({rows, 4 * C}, DType::f32, device);
    table.add("matmul h^T @ x (dW: 3072x8192x768)", (M * N + M * K + N * K) * f, 2 * M * N * K,
        [&] { matmul(h, x, true, false); });
    Tensor q = randn({8, 12, 256, 64}, DType::f32, device);
    table.add("bmm q @ k^T (8x12, 256x64x256)", (2.0 * 96 * 256 * 64 + 96.0 * 256 * 256) * f,
        2.0 * 96 * 256 * 256 * 64, [&] { matmul(q, q, false, true); });

    table.print("kernel benchmark");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
