// bench_op_overhead: what a small op costs on the CPU beyond its arithmetic, and where a second
// thread starts to pay. Small batches (gradient accumulation's micro-batches) run many kernels on
// small tensors, so this fixed cost, not the FLOPs, sets their step time.
//   1. The fixed cost per call, in ns: a kernel entry point (checks, output allocation from the
//      caching allocator, dispatch, the kernel) and a recorded tape op, on tensors of n elements.
//   2. For the elementwise, row-wise and reduction kernels at n elements: the time with 2 threads
//      over the time with 1 (interleaved rounds, medians). Below the kernels' parallel threshold
//      (kernels/cpu/parallel.h) both run one thread and the ratio is ~1.
//   ./bench_op_overhead [rounds]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "bench_util.h"
#include "kernels/ops.h"

using namespace reel;

namespace {

// Nanoseconds per call of fn, over enough calls to last ~20 ms, after a warm-up.
double ns_per_call(const std::function<void()>& fn) {
  for (int i = 0; i < 200; ++i) fn();
  int calls = 256;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (ns > 2e7 || calls >= (1 << 22)) return ns / calls;
    calls *= 4;
  }
}

struct Row {
  const char* name;
  std::function<void()> fn;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int max_threads = omp_get_max_threads();

  std::printf("== fixed cost per call (ns, median of %d rounds, %d threads)\n", rounds, max_threads);
  std::printf("%-44s %10s %10s %10s %10s\n", "call", "n=1", "n=256", "n=4096", "n=16384");
  const std::vector<int64_t> small = {1, 256, 4096, 16384};
  std::vector<std::vector<std::vector<double>>> fixed;  // [row][size][round]
  const char* fixed_names[] = {"kernels::binary add (entry point)", "kernels::unary relu (entry point)",
                               "kernels::sum, all elements", "reel::add recorded on the tape",
                               "reel::add + backward"};
  fixed.assign(5, std::vector<std::vector<double>>(small.size()));
  for (int round = 0; round < rounds; ++round) {
    for (size_t s = 0; s < small.size(); ++s) {
      const int64_t n = small[s];
      const Tensor a = randn({n}), b = randn({n});
      const Tensor leaf = randn({n}).set_requires_grad();
      const std::vector<Row> rows = {
          {fixed_names[0], [&] { kernels::binary(kernels::BinaryOp::Add, a, b); }},
          {fixed_names[1], [&] { kernels::unary(kernels::UnaryOp::Relu, a); }},
          {fixed_names[2], [&] { kernels::sum(a, {0}); }},
          {fixed_names[3], [&] {
             Tensor y = add(leaf, b);
             autograd::Tape::current().clear();
           }},
          {fixed_names[4], [&] {
             autograd::backward(sum(add(leaf, b)));
             autograd::zero_grad({leaf});
           }},
      };
      for (size_t r = 0; r < rows.size(); ++r) fixed[r][s].push_back(ns_per_call(rows[r].fn));
    }
  }
  for (size_t r = 0; r < fixed.size(); ++r) {
    std::printf("%-44s", fixed_names[r]);
    for (auto& per_size : fixed[r]) std::printf(" %10.0f", bench::median(per_size));
    std::printf("\n");
  }

  if (max_threads < 2) return 0;
  std::printf("\n== time with 2 threads / time with 1 (median of %d interleaved rounds)\n", rounds);
  const std::vector<int64_t> sizes = {1 << 10, 1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 18, 1 << 20};
  const char* kernel_names[] = {"binary add", "unary gelu", "softmax rows of 256", "layernorm rows of 256",
                                "sum over rows of 256"};
  std::printf("%-24s", "kernel");
  for (int64_t n : sizes) std::printf(" %8ld", static_cast<long>(n));
  std::printf("\n");
  for (size_t k = 0; k < 5; ++k) {
    std::printf("%-24s", kernel_names[k]);
    for (int64_t n : sizes) {
      const Tensor a = randn({n / 256, 256}), b = randn({n / 256, 256}), w = ones({256}), bias = zeros({256});
      const std::vector<std::function<void()>> fns = {
          [&] { kernels::binary(kernels::BinaryOp::Add, a, b); },
          [&] { kernels::unary(kernels::UnaryOp::Gelu, a); },
          [&] { kernels::softmax_forward(a); },
          [&] { kernels::layernorm_forward(a, w, bias); },
          [&] { kernels::sum(a, {1}); },
      };
      std::vector<double> ratios;
      for (int round = 0; round < rounds; ++round) {
        omp_set_num_threads(1);
        const double one = ns_per_call(fns[k]);
        omp_set_num_threads(2);
        ratios.push_back(ns_per_call(fns[k]) / one);
      }
      std::printf(" %8.2f", bench::median(ratios));
    }
    std::printf("\n");
  }
  omp_set_num_threads(max_threads);
  return 0;
}
