// bench_nn_kernels: times the neural-network kernel families (kernels/ops.h), forward and
// backward, at GPT-2-small sizes on a device and prints, per kernel, the median time, the bytes
// moved and FLOPs its entry points report to the profiler (the minimum traffic: each input read
// once, each output written once), the achieved GB/s and GFLOP/s and the % of the device's roof.
// Everything but attention is bound by memory bandwidth: compare those GB/s with
// `bench_kernels <device>`'s add; attention with its matmuls.
//   ./bench_nn_kernels [cpu|cuda] [repeats] [filter]   (filter: only kernels whose name contains it)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "kernels/ops.h"

using namespace reel;
using namespace reel::kernels;

namespace {
Tensor ids_tensor(int64_t n, int64_t vocab, Device device) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t s = 12345;
  for (int32_t& id : ids) {  // a cheap LCG: realistic spread of ids with repeats
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  return from_vector<int32_t>(ids, {n}).to(device);
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const Device device(argc > 1 ? argv[1] : "cpu");
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
    const std::string filter = argc > 3 ? argv[3] : "";
    const int64_t rows = 8192, C = 768, V = 8192;         // B*T = 8192 tokens of width 768, GPT-2 small
    const int64_t B = 8, H = 12, T = 256, D = 64;         // attention
    bench::KernelTable table(device, repeats, filter);

    // ---- norms: x (8192, 768) -------------------------------------------------------------------
    Tensor x = randn({rows, C}, DType::f32, device), dy = randn({rows, C}, DType::f32, device);
    Tensor w = randn({C}, DType::f32, device), b = randn({C}, DType::f32, device);
    // In f32, bf16 and f16 (statistics f32, each 16-bit output rounded once: half the bytes of f32).
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      const std::string tag = dt == DType::f32 ? std::string() : std::string(" ") + dtype_name(dt);
      Tensor xh = x.to(dt), dyh = dy.to(dt), wh = w.to(dt), bh = b.to(dt);
      LayerNormForward lnh{};
      RMSNormForward rnh{};
      try {
        lnh = layernorm_forward(xh, wh, bh);
        rnh = rmsnorm_forward(xh, wh);
      } catch (const Error&) {
      }
      table.add("layernorm fwd" + tag + (tag.empty() ? " (8192x768)" : ""), [=] { layernorm_forward(xh, wh, bh); });
      table.add("layernorm bwd" + tag + (tag.empty() ? " (dx, dw, db)" : ""),
                [=] { layernorm_backward(dyh, xh, wh, lnh.mean, lnh.rstd); });
      table.add("rmsnorm fwd" + tag, [=] { rmsnorm_forward(xh, wh); });
      table.add("rmsnorm bwd" + tag + (tag.empty() ? " (dx, dw)" : ""), [=] { rmsnorm_backward(dyh, xh, wh, rnh.rstd); });
    }

    // ---- softmax / log-softmax / max along the last dim -----------------------------------------
    Tensor y, ly;
    try {
      y = softmax_forward(x);
      ly = log_softmax_forward(x);
    } catch (const Error&) {
    }
    table.add("softmax fwd (8192x768)", [&] { softmax_forward(x); });
    table.add("softmax bwd", [&] { softmax_backward(dy, y); });
    table.add("log_softmax fwd", [&] { log_softmax_forward(x); });
    table.add("log_softmax bwd", [&] { log_softmax_backward(dy, ly); });
    MaxWithIndices mx{};
    try {
      mx = max_with_indices(x, -1);
    } catch (const Error&) {
    }
    table.add("max_with_indices (axis -1)", [&] { max_with_indices(x, -1); });
    table.add("max_backward (scatter)", [&] { max_backward(mx.values, mx.indices, {rows, C}, -1); });

    // ---- cross-entropy: logits (8192, 8192) -----------------------------------------------------
    {
      Tensor logits = randn({rows, V}, DType::f32, device);
      Tensor targets = ids_tensor(rows, V, device);
      CrossEntropyForward ce{};
      try {
        ce = cross_entropy_forward(logits, targets);
      } catch (const Error&) {
      }
      table.add("cross_entropy fwd (8192x8192)", [&] { cross_entropy_forward(logits, targets); });
      table.add("cross_entropy fwd + fused dlogits",
          [&] { cross_entropy_forward(logits, targets, Reduction::Mean, -100, 1.0); });
      table.add("cross_entropy bwd (from lse)", [&] {
        cross_entropy_backward(scalar_tensor(1.0, DType::f32, device), logits, targets, ce.lse);
      });
    }

    // ---- embedding: ids (8192), table (8192, 768) -----------------------------------------------
    {
      Tensor ids = ids_tensor(rows, V, device);
      Tensor wte = randn({V, C}, DType::f32, device);
      table.add("embedding fwd (gather 8192 rows)", [&] { embedding_forward(ids, wte); });
      table.add("embedding bwd (dtable 8192x768)", [&] { embedding_backward(dy, ids, V); });
    }

    // ---- attention: (8, 12, 256, 64), causal ----------------------------------------------------
    {
      Tensor q = randn({B, H, T, D}, DType::f32, device), k = randn({B, H, T, D}, DType::f32, device);
      Tensor v = randn({B, H, T, D}, DType::f32, device), dout = randn({B, H, T, D}, DType::f32, device);
      AttentionForward at{};
      try {
        at = attention_forward(q, k, v);
      } catch (const Error&) {
      }
      table.add("attention fwd (8x12x256x64 causal)", [&] { attention_forward(q, k, v); });
      table.add("attention bwd", [&] { attention_backward(dout, q, k, v, at.out, at.lse); });
    }

    // ---- optimizer: ~11M parameters in a GPT-like list ---------------------------------------
    {
      const std::vector<Shape> shapes = {{V, C}, {C, 3 * C}, {3 * C}, {C, C}, {C}, {C, 4 * C}, {4 * C}, {C}, {C}};
      std::vector<Tensor> p, g, m, s;
      double P = 0;  // parameters, for the row's name
      for (const Shape& sh : shapes) {
        p.push_back(randn(sh, DType::f32, device));
        g.push_back(randn(sh, DType::f32, device));
        m.push_back(zeros(sh, DType::f32, device));
        s.push_back(zeros(sh, DType::f32, device));
        P += static_cast<double>(shape_numel(sh));
      }
      char np[32];
      std::snprintf(np, sizeof np, "%.1fM", P / 1e6);
      int64_t step = 1;
      table.add(std::string("adamw_update (") + np + " params)",
          [&] { adamw_update(p, g, m, s, 1e-4, 0.9, 0.95, 1e-8, 0.1, step++); });
      table.add("sgd_update, nesterov momentum",
          [&] { sgd_update(p, g, m, 1e-4, 0.9, 0.0, 0.0, true, step++); });
      table.add("global_grad_norm", [&] { global_grad_norm(g); });
      table.add("scale_ (clip)", [&] { scale_(g, 0.999); });
    }

    table.print("nn kernel benchmark");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
