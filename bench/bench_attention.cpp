// bench_attention: the fused attention op against the composed one (matmul, scale, mask, softmax,
// matmul), as a model calls them: q, k and v are the head views of one (B, T, 3C) projection, as
// nn::CausalSelfAttention makes them, and the output is merged back to (B, T, C). Times forward
// alone and forward + backward through the tape, per shape, and prints the fused/composed ratio.
// Causal attention computes half of the (T, T) scores, so the fused op should take at most about
// half of the composed op's time, which computes them all.
//
//   ./bench_attention [--repeats N] [--threads N] [--device cpu|cuda] [--kernels 1 (the second table alone)]
// Shapes: examples/char_gpt's (B 32, H 4, T 64, D 24) and a GPT-2 small layer's (B 8, H 12, T 256, D 64).
// A second table times the kernels alone (kernels::attention_forward / attention_backward, one call
// each, inputs laid out as the head views above) in f32, bf16 and f16, in microseconds per call:
// the 16-bit kernels against the f32 ones, alternating the dtypes in one run.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/ops.h"
#include "reel.h"

using namespace reel;

namespace {

struct Shape4 {
  const char* name;
  int64_t B, H, T, D;
};

// y (B, T, C) from x_qkv (B, T, 3C) the way nn::CausalSelfAttention runs it.
Tensor attend(const Tensor& qkv, const Shape4& s, bool fused) {
  const int64_t C = s.H * s.D;
  const std::vector<Tensor> parts = split(qkv, {C, C, C}, -1);  // 3 x (B, T, C) views
  auto heads = [&](const Tensor& t) { return transpose(view(t, {s.B, s.T, s.H, s.D}), 1, 2); };  // (B, H, T, D)
  const Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  const Tensor y = fused ? attention(q, k, v, true) : attention_composed(q, k, v, true);  // (B, H, T, D)
  return reshape(transpose(y, 1, 2), {s.B, s.T, C});
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20, threads = 0, kernels_only = 0;
  Device device = Device::cpu();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--device") device = Device(argv[i + 1]);
    else if (flag == "--kernels") kernels_only = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_attention: unknown option '%s' (--repeats N, --threads N, --device D, --kernels 1)\n",
                   flag.c_str());
      return 2;
    }
  }
  if (threads > 0) omp_set_num_threads(threads);
  const std::vector<Shape4> shapes = {{"char GPT   (32, 4, 64, 24)", 32, 4, 64, 24},
                                      {"GPT-2 small (8, 12, 256, 64)", 8, 12, 256, 64}};
  std::printf("attention, causal, f32 on %s, %d thread(s), median of %d runs, ms\n", device.str().c_str(),
              omp_get_max_threads(), repeats);
  std::printf("%-30s %-18s %9s %9s %7s\n", "shape (B, H, T, D)", "pass", "fused", "composed", "ratio");
  for (const Shape4& s : shapes) {
    if (kernels_only) break;
    manual_seed(5);
    const Tensor qkv = randn({s.B, s.T, 3 * s.H * s.D}).to(device).set_requires_grad();
    const Tensor dy = randn({s.B, s.T, s.H * s.D}).to(device);
    double fwd[2], both[2];
    for (int fused = 0; fused < 2; ++fused) {
      fwd[fused] = bench::median_ms(device, repeats, [&] {
        autograd::NoGrad no_grad;
        attend(qkv, s, fused);
      });
      both[fused] = bench::median_ms(device, repeats, [&] {
        autograd::backward(attend(qkv, s, fused), dy);
        qkv.grad().fill_(0.0);
      });
    }
    std::printf("%-30s %-18s %9.3f %9.3f %7.2f\n", s.name, "forward", fwd[1], fwd[0], fwd[1] / fwd[0]);
    std::printf("%-30s %-18s %9.3f %9.3f %7.2f\n", "", "forward + backward", both[1], both[0], both[1] / both[0]);
  }
  std::printf("ratio: fused / composed (below 1: the fused op is faster; causal attention skips half the scores)\n");

  // The kernels alone, per dtype: median of `repeats` calls, the dtypes taking turns.
  std::printf("\nkernels alone, causal, %d thread(s), median us per call\n", omp_get_max_threads());
  std::printf("%-30s %-9s %10s %10s %10s\n", "shape (B, H, T, D)", "pass", "f32", "bf16", "f16");
  const DType dtypes[3] = {DType::f32, DType::bf16, DType::f16};
  for (const Shape4& s : shapes) {
    if (!device.is_cpu()) break;
    manual_seed(5);
    const Tensor qkv = randn({s.B, s.T, 3 * s.H * s.D}), dy = randn({s.B, s.T, s.H * s.D});
    std::vector<Tensor> q(3), k(3), v(3), dout(3);
    std::vector<kernels::AttentionForward> fwd(3);
    for (int d = 0; d < 3; ++d) {
      const Tensor x = qkv.to(dtypes[d]);
      const int64_t C = s.H * s.D;
      const std::vector<Tensor> parts = split(x, {C, C, C}, -1);
      auto heads = [&](const Tensor& t) { return transpose(view(t, {s.B, s.T, s.H, s.D}), 1, 2); };
      q[d] = heads(parts[0]), k[d] = heads(parts[1]), v[d] = heads(parts[2]);
      dout[d] = heads(dy.to(dtypes[d]));
      fwd[d] = kernels::attention_forward(q[d], k[d], v[d]);
    }
    std::vector<double> ms_f[3], ms_b[3];
    for (int rep = 0; rep < repeats + 1; ++rep)
      for (int d = 0; d < 3; ++d) {
        const double tf = bench::timed_ms(device, [&] { kernels::attention_forward(q[d], k[d], v[d]); });
        const double tb = bench::timed_ms(
            device, [&] { kernels::attention_backward(dout[d], q[d], k[d], v[d], fwd[d].out, fwd[d].lse); });
        if (rep > 0) ms_f[d].push_back(tf), ms_b[d].push_back(tb);  // the first round warms up
      }
    std::printf("%-30s %-9s %10.1f %10.1f %10.1f\n", s.name, "forward", 1e3 * bench::median(ms_f[0]),
                1e3 * bench::median(ms_f[1]), 1e3 * bench::median(ms_f[2]));
    std::printf("%-30s %-9s %10.1f %10.1f %10.1f\n", "", "backward", 1e3 * bench::median(ms_b[0]),
                1e3 * bench::median(ms_b[1]), 1e3 * bench::median(ms_b[2]));
  }
  return 0;
}
