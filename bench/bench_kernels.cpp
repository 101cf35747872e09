// bench_kernels: times the kernel families at realistic sizes on a device and prints, per kernel,
// the median time, the bytes moved and FLOPs its entry points report to the profiler, the achieved
// GB/s and GFLOP/s, and the % of the device's roof (GEMM against its SGEMM roof, the rest against
// its memory bandwidth). On a cuda device it then measures the copy bandwidth the kernels are
// judged against in practice: host -> device and device -> host (pinned and pageable host memory)
// and device -> device, on 256 MiB (32 MiB emulated), printed as "copy bandwidth ..." lines.
//   ./bench_kernels [cpu|cuda] [repeats] [filter]   (filter: only kernels whose name contains it)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "kernels/dropout.h"
#include "kernels/ops.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_only.h"
#endif

using namespace reel;
using namespace reel::kernels;

namespace {

// One line per copy direction: the median GB/s of `repeats` copies of the same buffer (bytes
// copied per second; a device -> device copy reads and writes each byte, so the memory moves twice
// that), and beside it the memory roof the kernel table uses.
void print_copy_bandwidth(Device device, int repeats) {
#if defined(REEL_CUDA_EMULATED)
  const int64_t n = int64_t{8} << 20;  // 32 MiB of f32: host memcpy on the emulator
#else
  const int64_t n = int64_t{64} << 20;  // 256 MiB of f32: past every cache
#endif
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const Tensor dev = zeros({n}, DType::f32, device);
  const Tensor dev2 = zeros({n}, DType::f32, device);
  const Tensor host = zeros({n}, DType::f32, Device::cpu());
  PinnedBuffer pinned(bytes);
  const Stream stream = Stream::copy(device);
  const auto line = [&](const char* what, const std::function<void()>& fn) {
    const double ms = bench::median_ms(device, repeats, [&] {
      fn();
      stream.synchronize();
    });
    std::printf("copy bandwidth %-30s %8.1f GB/s  (%.0f MiB, %.3f ms)\n", what, bytes / ms / 1e6, bytes / 1048576.0, ms);
  };
  line("host -> device (pinned)", [&] { copy_async(pinned, dev, stream); });
  line("device -> host (pinned)", [&] { copy_async(dev, pinned, stream); });
  line("host -> device (pageable)", [&] { dev.copy_(host); });
  line("device -> host (pageable)", [&] { host.copy_(dev); });
  line("device -> device", [&] { dev2.copy_(dev); });
  std::printf("copy bandwidth: a device -> device copy moves twice its bytes through memory; the roof above is %.1f GB/s\n",
              profile::roof_for(device).bytes_per_s * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Device device(argc > 1 ? argv[1] : "cpu");
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
    const std::string filter = argc > 3 ? argv[3] : "";
    const int64_t rows = 8192, C = 768;  // B*T = 8192 rows of width 768, as in GPT-2 small
    Tensor x = randn({rows, C}, DType::f32, device);
    Tensor y = randn({rows, C}, DType::f32, device);
    Tensor bias = randn({C}, DType::f32, device);
    Tensor w = randn({4 * C, C}, DType::f32, device);
    bench::KernelTable table(device, repeats, filter);
    table.add("add (8192x768)", [&] { binary(BinaryOp::Add, x, y); });
    table.add("add bias (8192x768 + 768)", [&] { binary(BinaryOp::Add, x, bias); });
    table.add("mul scalar", [&] { binary(BinaryOp::Mul, x, 0.5); });
    table.add("gelu", [&] { unary(UnaryOp::Gelu, x); });
    table.add("exp", [&] { unary(UnaryOp::Exp, x); });
    // The fused backward passes (kernels::unary_backward): read dy and x, write dx, one pass each
    // (GELU's backward used to be 13 elementwise kernels).
    table.add("gelu backward (fused)", [&] { unary_backward(UnaryOp::Gelu, y, x); });
    table.add("silu backward (fused)", [&] { unary_backward(UnaryOp::Silu, y, x); });
    Tensor zero = zeros({}, DType::f32, device);
    table.add("where(x > 0, y, 0) (compare + where)", [&] { where(compare(CompareOp::Gt, x, 0.0), y, zero); });
    table.add("sum rows (axis -1)", [&] { sum(x, {1}); });
    table.add("sum cols (axis 0)", [&] { sum(x, {0}); });
    table.add("max total", [&] { max(x); });
    table.add("dropout mask (p = 0.1)", [&] { dropout_mask({rows, C}, DType::f32, device, 0.1, 1, 2); });
    table.add("randn", [&] { randn({rows, C}, DType::f32, device); });
    table.add("contiguous(transpose)", [&] { x.t().contiguous(); });
    table.add("matmul x @ w^T (8192x768x3072)", [&] { matmul(x, w, false, true); });
#if defined(REEL_HAS_CUDA_BACKEND)
    if (device.is_cuda()) {  // the teaching kernel on the same product, b row-major (coalesced loads)
      Tensor wt = w.t().contiguous();
      Tensor out = empty({rows, 4 * C}, DType::f32, device);
      // A backend function called directly, outside the profiled entry points: the row above's cost.
      table.add_same_as("matmul tiled 16x16 (teaching, same)", "matmul x @ w^T (8192x768x3072)",
          [&] { kernels::cuda::matmul_tiled(x, wt, out); });
    }
#endif
    Tensor h = randn({rows, 4 * C}, DType::f32, device);
    table.add("matmul h^T @ x (dW: 3072x8192x768)", [&] { matmul(h, x, true, false); });
    Tensor q = randn({8, 12, 256, 64}, DType::f32, device);
    table.add("bmm q @ k^T (8x12, 256x64x256)", [&] { matmul(q, q, false, true); });

    table.print("kernel benchmark");
    if (device.is_cuda()) print_copy_bandwidth(device, repeats);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
