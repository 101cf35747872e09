// bench_conv: times conv2d's forward and its three backward kernels (kernels/conv.h) on the layers
// of a small Fashion-MNIST CNN (batch 128: 1 -> 32 channels 3x3 padding 1 on 28x28, then 32 -> 64
// channels 3x3 padding 1 on 14x14), and prints per kernel the median time and GFLOP/s
// (2 * N * C_out * OH * OW * C_in / groups * kH * kW per product; the bias kernels count one add per
// element). On cpu this is im2col + Eigen GEMM per sample; on cuda, cuDNN (emulated in the host
// build: its figures measure the emulator, not a GPU).
//   ./bench_conv [cpu|cuda] [repeats] [batch]
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "bench_util.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/ops.h"

using namespace reel;
using namespace reel::kernels;

namespace {

struct Layer {
  const char* name;
  int64_t C, O, H, W, k, pad;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Device device(argc > 1 ? argv[1] : "cpu");
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
    const int64_t N = argc > 3 ? std::atoll(argv[3]) : 128;
    const Layer layers[] = {{"conv1 1->32 3x3 p1 28x28", 1, 32, 28, 28, 3, 1},
                            {"conv2 32->64 3x3 p1 14x14", 32, 64, 14, 14, 3, 1}};
    std::printf("conv2d on %s, batch %lld, median of %d runs\n", device.str().c_str(), static_cast<long long>(N),
                repeats);
    std::printf("%-28s %-16s %10s %10s\n", "layer", "kernel", "ms", "GFLOP/s");
    for (const Layer& l : layers) {
      Generator gen(1);
      const Tensor x = randn({N, l.C, l.H, l.W}, DType::f32, device, &gen);
      const Tensor w = randn({l.O, l.C, l.k, l.k}, DType::f32, device, &gen);
      const Tensor b = randn({l.O}, DType::f32, device, &gen);
      const Conv2d p{{1, 1}, {l.pad, l.pad}, {1, 1}, 1};
      const Tensor y = conv2d_forward(x, w, b, p);
      const Tensor dy = randn(y.shape(), DType::f32, device, &gen);
      const double product = 2.0 * static_cast<double>(y.numel()) * static_cast<double>(l.C * l.k * l.k);
      auto row = [&](const char* kernel, double flops, const std::function<void()>& fn) {
        const double ms = bench::median_ms(device, repeats, fn);
        std::printf("%-28s %-16s %10.3f %10.2f\n", l.name, kernel, ms, flops / (ms * 1e6));
      };
      row("forward", product + static_cast<double>(y.numel()), [&] { conv2d_forward(x, w, b, p); });
      row("backward_input", product, [&] { conv2d_backward_input(dy, w, x.shape(), p); });
      row("backward_weight", product, [&] { conv2d_backward_weight(dy, x, w.shape(), p); });
      row("backward_bias", static_cast<double>(y.numel()), [&] { conv2d_backward_bias(dy); });
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: %s\n", e.what());
    return 1;
  }
}
