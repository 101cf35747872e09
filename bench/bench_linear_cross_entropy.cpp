// bench_linear_cross_entropy: an LM head and its loss, unfused (cross_entropy(linear(h, W))) against
// fused and chunked (linear_cross_entropy), on shapes of N rows, C features and V classes. For each
// it prints the bytes the tape saves after forward (unfused: cross_entropy's dlogits N*V; fused:
// dh N*C + dW V*C), the peak of all allocations above the start over forward + backward (measured
// by the allocator; it includes the .grad buffers of h and W, made at that first backward), and
// the median time of forward + backward. The fused head saves less when V >> C; for V < C (a
// character GPT) dh (N, C) outweighs dlogits (N, V).
//
//   bench_linear_cross_entropy [device=cpu] [steps=5]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "reel.h"

using namespace reel;

namespace {

struct Shape3 {
  const char* name;
  int64_t N, C, V;
};

struct Measure {
  int64_t saved = 0, peak = 0;
  double ms = 0;
};

template <typename Loss>
Measure measure(Device device, int steps, const Tensor& h, const Tensor& w, Loss loss) {
  Measure m;
  autograd::Tape::current().clear();
  const int64_t start = memory_stats(device).current_bytes;
  reset_peak_memory(device);
  {
    const Tensor l = loss(h, w);
    m.saved = autograd::Tape::current().saved_bytes();
    autograd::backward(l);
  }
  m.peak = memory_stats(device).peak_bytes - start;
  h.set_grad(Tensor());
  w.set_grad(Tensor());
  m.ms = bench::median_ms(device, steps, [&] {
    autograd::backward(loss(h, w));
    h.set_grad(Tensor());
    w.set_grad(Tensor());
  });
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const Device device(argc > 1 ? argv[1] : "cpu");
  const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::vector<Shape3> shapes = {
      {"char GPT (32 x 64 tokens, C 96, V 114)", 32 * 64, 96, 114},
      {"small vocab GPT (8 x 256 tokens, C 128, V 8192)", 8 * 256, 128, 8192},
      {"GPT-2 head, 1 x 512 tokens (C 768, V 50257)", 512, 768, 50257},
  };
  std::printf("%-50s %-8s %12s %12s %10s\n", "shape", "head", "saved", "peak", "ms");
  for (const Shape3& s : shapes) {
    Generator g(1);
    const Tensor h = randn({s.N, s.C}, DType::f32, Device::cpu(), &g).to(device).set_requires_grad();
    const Tensor w = (randn({s.V, s.C}, DType::f32, Device::cpu(), &g) * 0.02).to(device).set_requires_grad();
    std::vector<int64_t> t;
    for (int64_t i = 0; i < s.N; ++i) t.push_back((i * 7919) % s.V);
    const Tensor targets = from_vector(t, {s.N}, device);
    const Measure plain = measure(device, steps, h, w, [&](const Tensor& x, const Tensor& wt) {
      return cross_entropy(linear(x, wt), targets);
    });
    const Measure fused = measure(device, steps, h, w, [&](const Tensor& x, const Tensor& wt) {
      return linear_cross_entropy(x, wt, targets);
    });
    for (const auto& [name, m] : {std::pair<const char*, const Measure&>{"unfused", plain}, {"fused", fused}})
      std::printf("%-50s %-8s %12s %12s %10.2f\n", s.name, name, bench::mib(m.saved).c_str(), bench::mib(m.peak).c_str(), m.ms);
    std::printf("%-50s %-8s %12s\n", "", "formula", bench::mib((s.N * s.C + s.V * s.C) * 4).c_str());
  }
  return 0;
}
