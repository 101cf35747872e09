// bench_profiler: what collecting costs. One training step of the char_gpt example's default model
// (3 blocks of width 96, 4 heads, 32 sequences of 64 tokens, AdamW) is timed with a Profiler
// collecting and without one, the two alternating step by step so that both see the same machine;
// it prints the median of each, the overhead, and the records a step makes.
//
//   bench_profiler [device=cpu] [steps=20] [checkpoint=none]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "reel.h"

using namespace reel;

int main(int argc, char** argv) {
  const Device device(argc > 1 ? argv[1] : "cpu");
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string checkpoint = argc > 3 ? argv[3] : "none";
  nn::GPTConfig config{/*vocab_size*/ 114, /*block_size*/ 64, /*n_layer*/ 3, /*n_head*/ 4, /*n_embd*/ 96};
  manual_seed(1);
  nn::GPT gpt(config);
  gpt.to(device);
  gpt.set_checkpoint(nn::CheckpointPolicy::parse(checkpoint));
  optim::AdamW opt(gpt.parameters(), 1e-3);
  const int64_t B = 32, T = 64;
  Generator gen(2);
  const auto ids = [&] {
    std::vector<int64_t> v;
    for (double u : rand({B, T}, DType::f64, Device::cpu(), &gen).to_vector<double>())
      v.push_back(static_cast<int64_t>(u * 114));
    return from_vector(v, {B, T}, device);
  };
  const Tensor x = ids(), y = ids();
  const auto step = [&] {
    autograd::backward(cross_entropy(gpt(x), y));
    opt.step();
    opt.zero_grad();
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator cache, threads, optimizer state

  std::vector<double> off_ms, on_ms, stop_ms;
  size_t records = 0;
  for (int i = 0; i < 2 * steps; ++i) {
    if (i % 2 == 0) {
      off_ms.push_back(bench::timed_ms(device, step));
      continue;
    }
    Profiler prof;
    on_ms.push_back(bench::timed_ms(device, step));
    stop_ms.push_back(bench::timed_ms(device, [&] { prof.stop(); }));
    records = prof.kernels().size() + prof.spans().size();
  }
  const double off = bench::median(off_ms), on = bench::median(on_ms);
  std::printf("profiler overhead on one char_gpt training step on %s (checkpoint %s), median of %d steps each\n",
              device.str().c_str(), checkpoint.c_str(), steps);
  std::printf("%-28s %10s\n", "", "ms");
  std::printf("%-28s %10.3f\n", "step, no profiler", off);
  std::printf("%-28s %10.3f\n", "step, profiler collecting", on);
  std::printf("%-28s %10.3f\n", "stop() after the step", bench::median(stop_ms));
  std::printf("overhead while collecting: %+.1f %% (%zu records a step)\n", 100 * (on / off - 1), records);
}
