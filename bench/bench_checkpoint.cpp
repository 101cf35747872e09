// bench_checkpoint: what segment recomputation buys and costs on a chain of N Linear+GELU
// blocks, x (B, D) -> gelu(x @ W_i + b_i) -> ... -> sum. For N = 16, 64, 256, without
// checkpointing and with sqrt(N) segments of sqrt(N) blocks, it prints the activation peak the
// allocator measured over one forward+backward (category activation), the peak predicted from
// the shapes (2N saved (B, D) tensors, or S - 1 + 2k with S segments of k blocks), and the
// median step time over several steps.
//
//   bench_checkpoint [device=cpu] [batch=32] [width=256] [steps=7]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "reel.h"

using namespace reel;

namespace {

struct Chain {
  std::vector<Tensor> params;  // W0 (D, D), b0 (D), W1, b1, ...
};

Chain make_chain(int n, int64_t width, Device device) {
  Generator gen(1);
  MemoryCategory category(Category::Parameter);
  Chain c;
  for (int i = 0; i < n; ++i) {
    c.params.push_back((randn({width, width}, DType::f32, Device::cpu(), &gen) * (1.0 / std::sqrt(width)))
                           .to(device).set_requires_grad());
    c.params.push_back(zeros({width}, DType::f32, device).set_requires_grad());
  }
  return c;
}

// One forward + backward; segments of `k` blocks when k > 0.
void step(const Chain& c, const Tensor& x, int k) {
  const int n = static_cast<int>(c.params.size() / 2);
  Tensor h = x;
  std::unique_ptr<autograd::Checkpoint> segment;
  for (int i = 0; i < n; ++i) {
    if (k > 0 && i % k == 0) segment = std::make_unique<autograd::Checkpoint>();
    h = gelu(matmul(h, c.params[2 * i]) + c.params[2 * i + 1]);
    if (k > 0 && i % k == k - 1) segment.reset();
  }
  segment.reset();
  autograd::backward(sum(h));
}

struct Measure {
  int64_t peak_bytes;
  double median_ms;
};

Measure measure(const Chain& c, Device device, int64_t batch, int64_t width, int k, int steps) {
  Generator gen(2);
  autograd::zero_grad(c.params);
  step(c, randn({batch, width}, DType::f32, device, &gen), k);  // warm-up: grads and the cache exist
  const int64_t base = memory_stats(device)[Category::Activation].current_bytes;
  reset_peak_memory(device);
  std::vector<double> ms;
  for (int s = 0; s < steps; ++s) {
    Tensor x = randn({batch, width}, DType::f32, device, &gen);
    ms.push_back(bench::timed_ms(device, [&] { step(c, x, k); }));
  }
  return {memory_stats(device)[Category::Activation].peak_bytes - base, bench::median(ms)};
}

}  // namespace

int main(int argc, char** argv) {
  const Device device(argc > 1 ? argv[1] : "cpu");
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 32;
  const int64_t width = argc > 3 ? std::atoll(argv[3]) : 256;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 7;
  const int64_t tensor_bytes = batch * width * 4;  // one saved (B, D) f32 activation

  std::printf("chain of Linear(%lld, %lld)+GELU blocks, batch %lld, f32, on %s; median of %d steps\n",
              static_cast<long long>(width), static_cast<long long>(width), static_cast<long long>(batch),
              device.str().c_str(), steps);
  std::printf("%5s  %12s %12s  | %12s %12s %9s  | %9s %9s %6s\n", "N", "plain peak", "predicted", "ckpt peak",
              "predicted", "segments", "plain ms", "ckpt ms", "ratio");
  for (int n : {16, 64, 256}) {
    const int k = static_cast<int>(std::lround(std::sqrt(n)));  // blocks per segment
    const int segments = (n + k - 1) / k;
    const Chain chain = make_chain(n, width, device);
    const Measure plain = measure(chain, device, batch, width, 0, steps);
    const Measure ckpt = measure(chain, device, batch, width, k, steps);
    const std::string shape = std::to_string(segments) + " x " + std::to_string(k);
    std::printf("%5d  %12s %12s  | %12s %12s %9s  | %9.2f %9.2f %6.2f\n", n, bench::mib(plain.peak_bytes).c_str(),
                bench::mib(2 * n * tensor_bytes).c_str(), bench::mib(ckpt.peak_bytes).c_str(),
                bench::mib((segments - 1 + 2 * k) * tensor_bytes).c_str(), shape.c_str(), plain.median_ms, ckpt.median_ms,
                ckpt.median_ms / plain.median_ms);
  }
  return 0;
}
