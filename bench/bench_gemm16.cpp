// bench_gemm16: the CPU GEMM in bf16 and f16 against f32, on the GPT's Linear products. Prints the
// CPU's model and the lscpu flags that decide the 16-bit path (AVX-512, AVX512-BF16, AVX512-FP16,
// AMX), the path this process chose (kernels::cpu_gemm16_path()), then per product the GFLOP/s of
// kernels::matmul in f32, bf16 and f16 on reel's threads and the ratios bf16 / f32 and f16 / f32
// (the mixed-precision issue's target: bf16 at least 1.6x f32 on a CPU with AVX512-BF16).
//
//   ./bench_gemm16 [--rounds N] [--ms T] [--kn] [--backward] [filter]
//   --kn: W stored (C, out), x @ W, instead of nn::Linear's (out, C) and x @ W^T
//   --backward: also the two products of the Linear's backward rule, dx = dy @ W and dW = dy^T @ x
//   filter: only products whose name contains it (e.g. "gpt2", "head")
// Products: the forward of each Linear of a GPT block and of the head, x (M, C) @ W^T with W
// (out, C) as nn::Linear stores it: (C, 3C) qkv, (C, C) attention projection, (C, 4C) and (4C, C)
// the MLP, (C, V) the head. char_gpt: C = 96, M = B*T = 2048 (32 windows of 64), V = 114 (the
// characters of its fortunes corpus); GPT-2 small: C = 768, M = 512 rows (a (1, 512) window), V = 50257
// with M = 64 for the head (its 64 x 768 x 50257 product alone is 5 GFLOP).
// Timing: every cell runs once untimed (oneDNN makes its primitives), then `rounds` rounds time
// each dtype once in turn, each timing at least --ms milliseconds of back-to-back calls; a cell is
// the median of its rounds (wall time: the products run on reel's threads).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <omp.h>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/matmul.h"

namespace {

using namespace reel;

struct Product {
  std::string name;
  int64_t M, C, out;
};

// The flags of /proc/cpuinfo's first "flags" line that decide the 16-bit path, and the model name.
void print_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line.substr(line.find(':') + 2);
  }
  std::printf("CPU: %s\n", model.c_str());
  std::printf("flags:");
  std::istringstream words(flags);
  std::string w;
  bool any = false;
  while (words >> w)
    for (const char* f : {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                          "amx_fp16", "amx_int8"})
      if (w == f) std::printf(" %s", f), any = true;
  std::printf("%s\n", any ? "" : " (none of avx2, avx512*, amx*)");
}

// Seconds per call of f, median of rounds (filled by the caller's loop).
double time_calls(const std::function<void()>& f, double min_ms) {
  using clock = std::chrono::steady_clock;
  int reps = 1;
  for (;;) {
    const auto t0 = clock::now();
    for (int i = 0; i < reps; ++i) f();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s * 1e3 >= min_ms || reps >= (1 << 20)) return s / reps;
    reps = std::max(reps * 2, static_cast<int>(reps * min_ms / std::max(s * 1e3, 1e-3)) + 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  double ms = 100;
  std::string filter;
  bool kn = false, backward = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--ms") && i + 1 < argc) ms = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--kn")) kn = true;
    else if (!std::strcmp(argv[i], "--backward")) backward = true;
    else filter = argv[i];
  }
  print_cpu();
  std::printf("16-bit path: %s\nthreads: %d, rounds: %d, >= %.0f ms per timing, median of rounds; W stored %s\n\n",
              kernels::cpu_gemm16_path(), omp_get_max_threads(), rounds, ms, kn ? "(C, out): x @ W" : "(out, C): x @ W^T");
  std::vector<Product> products;
  for (const auto& [model, M, C, V, Mh] : std::vector<std::tuple<std::string, int64_t, int64_t, int64_t, int64_t>>{
           {"char_gpt", 2048, 96, 114, 2048}, {"gpt2", 512, 768, 50257, 64}}) {
    products.push_back({model + " qkv (C, 3C)", M, C, 3 * C});
    products.push_back({model + " proj (C, C)", M, C, C});
    products.push_back({model + " fc (C, 4C)", M, C, 4 * C});
    products.push_back({model + " fc2 (4C, C)", M, 4 * C, C});
    products.push_back({model + " head (C, V)", Mh, C, V});
  }
  std::printf("%-22s %18s %9s %9s %9s %10s %10s\n", "product", "(M, K) x (K, N)", "f32", "bf16", "f16", "bf16/f32",
              "f16/f32");
  std::printf("%-22s %18s %9s %9s %9s\n", "", "", "GFLOP/s", "GFLOP/s", "GFLOP/s");
  Generator gen(42);
  for (const Product& p : products) {
    if (!filter.empty() && p.name.find(filter) == std::string::npos) continue;
    const Tensor x = randn({p.M, p.C}, DType::f32, Device::cpu(), &gen);
    const Tensor w = kn ? randn({p.C, p.out}, DType::f32, Device::cpu(), &gen)
                        : randn({p.out, p.C}, DType::f32, Device::cpu(), &gen);
    const Tensor dy = randn({p.M, p.out}, DType::f32, Device::cpu(), &gen);
    const DType types[3] = {DType::f32, DType::bf16, DType::f16};
    Tensor xs[3], ws[3], dys[3];
    for (int d = 0; d < 3; ++d) xs[d] = x.to(types[d]), ws[d] = w.to(types[d]), dys[d] = dy.to(types[d]);
    // The forward product and, with --backward, the two of nn::Linear's backward rule: dx = dy @ W
    // (M, C) and dW = dy^T @ x (out, C) (with --kn: dy @ W^T and x^T @ dy).
    struct Pass {
      const char* suffix;
      std::function<void(int)> run;
      int64_t m, k, n;  // (m, k) x (k, n)
    };
    std::vector<Pass> passes{{"", [&](int d) { kernels::matmul(xs[d], ws[d], false, !kn); }, p.M, p.C, p.out}};
    if (backward) {
      passes.push_back({" dx", [&](int d) { kernels::matmul(dys[d], ws[d], false, kn); }, p.M, p.out, p.C});
      if (kn) passes.push_back({" dW", [&](int d) { kernels::matmul(xs[d], dys[d], true, false); }, p.C, p.M, p.out});
      else passes.push_back({" dW", [&](int d) { kernels::matmul(dys[d], xs[d], true, false); }, p.out, p.M, p.C});
    }
    for (const Pass& pass : passes) {
      std::vector<double> secs[3];
      for (int d = 0; d < 3; ++d) pass.run(d);  // warm-up
      for (int r = 0; r < rounds; ++r)
        for (int i = 0; i < 3; ++i) {
          const int d = (i + r) % 3;  // rotate the order, so a slow spell falls on all dtypes alike
          secs[d].push_back(time_calls([&] { pass.run(d); }, ms));
        }
      double gflops[3];
      for (int d = 0; d < 3; ++d) {
        std::sort(secs[d].begin(), secs[d].end());
        gflops[d] = 2.0 * p.M * p.C * p.out / secs[d][secs[d].size() / 2] / 1e9;
      }
      char shape[64];
      std::snprintf(shape, sizeof shape, "(%lld, %lld)x(%lld, %lld)", static_cast<long long>(pass.m),
                    static_cast<long long>(pass.k), static_cast<long long>(pass.k), static_cast<long long>(pass.n));
      std::printf("%-22s %18s %9.1f %9.1f %9.1f %9.2fx %9.2fx\n", (p.name + pass.suffix).c_str(), shape, gflops[0],
                  gflops[1], gflops[2], gflops[1] / gflops[0], gflops[2] / gflops[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}
