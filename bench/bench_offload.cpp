// bench_offload: the planner's three-way choice (keep, recompute, offload) against a memory budget.
//
// Part 1, measured on cuda:0 (emulated without CUDA: the copies are real host copies, the streams
// and events simt's): char_gpt's GPT with 8 blocks, for budgets from 20 % to 100 % of the plain
// activation peak with offload auto. Per budget: the plan (examples/policy_sweep.h runs_str: c
// segment, s selective, o offloaded), its predicted and measured device activation peak and the
// prediction's error, whether the measured peak is within the budget, the host bytes, the
// predicted and measured step time, and whether the gradients are bit-identical to the plain run's.
//
// Part 2, predicted: a GPT-2-small-shaped chain (12 blocks, n_embd 768, 12 heads, T 1024, batch B)
// on an H200, at 25 % of its plain peak, for a host link of 64 GB/s (PCIe Gen5) and 450 GB/s
// (NVLink-C2C), with the unfused head (cross_entropy on the logits) and the fused one
// (linear_cross_entropy): the planner's plan and time against sqrt N recomputation's, sqrt N with
// its boundaries offloaded, and every block offloaded (with the copy time the planner predicts at
// Offload's default in-flight bound, autograd/checkpoint_planner.h). Per-block bytes are measured (one
// GPT-2-small block's forward on cpu at batch 1, scaled by B: every saved tensor is linear in B);
// the head's and loss's saves are measured at batch 1 and 2 and two small vocabularies and
// extrapolated bilinearly to batch B and GPT-2's 50257; per-block forward time is each recorded kernel's H200
// prediction (report/predict.h predict_record: max(bytes / HBM bandwidth, FLOPs / f32 rate, launch)), and a selective
// scope's recompute is the non-GEMM kernels' share of it.
//
//   bench_offload [rounds=3] [n_embd=64] [batch=16]    # part 1 about a minute on two cores; rounds 0: part 2 only
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "examples/policy_sweep.h"
#include "reel.h"
#include "report/predict.h"

using namespace reel;

namespace {

// Part 1: the sweep on emulated cuda.
void sweep(int rounds, int64_t n_embd, int64_t batch) {
  const Device device("cuda:0");
  manual_seed(2);
  nn::GPTConfig c{/*vocab_size*/ 114, /*block_size*/ 64, /*n_layer*/ 8, /*n_head*/ 4, /*n_embd*/ n_embd};
  nn::GPT gpt(c);
  gpt.to(device);
  std::vector<int64_t> tokens(static_cast<size_t>(batch * c.block_size));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7919 + i / 5) % 114);
  const Tensor ids = from_vector(tokens, {batch, c.block_size}).to(device);
  const auto forward_loss = [&] { return cross_entropy(gpt(ids), ids, -100, "sum"); };
  const int64_t plain = examples::step_activation_peak(device, forward_loss);
  using autograd::CheckpointPolicy;
  using autograd::OffloadMode;
  std::vector<examples::PlanRow> rows = {{"plain", CheckpointPolicy::parse("none"), OffloadMode::None},
                                         {"sqrt", CheckpointPolicy::parse("sqrt"), OffloadMode::None}};
  for (int pct = 20; pct <= 100; pct += 10)
    rows.emplace_back("budget " + std::to_string(pct) + " %",
                      CheckpointPolicy::budget(static_cast<int64_t>(pct / 100.0 * static_cast<double>(plain))),
                      OffloadMode::Auto);
  std::printf("char GPT: 8 blocks, n_embd %lld, %lld heads, %lld x %lld tokens on %s (host link %.1f GB/s); plain "
              "activation peak %s; median of %d rounds\n",
              static_cast<long long>(c.n_embd), static_cast<long long>(c.n_head), static_cast<long long>(batch),
              static_cast<long long>(c.block_size), device.str().c_str(), autograd::host_link_bytes_per_s(device) * 1e-9,
              format_bytes(plain).c_str(), rounds);
  examples::measure_plans(gpt, device, rounds, forward_loss, rows);
  examples::print_plan_table("offload auto at budgets from 20 % to 100 % of the plain peak (error: predicted against "
                             "measured peak; pred. ms: plain's measured step + the plan's predicted extra)",
                             rows);
  int over = 0, off = 0, differ = 0;
  for (const examples::PlanRow& r : rows) {
    over += r.budgeted() && r.peak > r.budget();
    off += std::fabs(static_cast<double>(r.predicted.peak_bytes - r.peak)) > 0.05 * static_cast<double>(r.peak);
    differ += !r.identical;
  }
  std::printf("rows over budget: %d; predictions off by more than 5 %%: %d; gradients not bit-identical: %d\n", over,
              off, differ);
}

// The chain cost of a GPT with GPT-2-small's blocks, `vocab` tokens and `batch` sequences of 1024,
// measured on cpu. fused: the loss through nn::GPT::loss (linear_cross_entropy: the head saves dh and
// dW, never the logits), else cross_entropy on the logits (it saves dlogits, batch x 1024 x vocab).
autograd::ChainCost measured_cost(int64_t vocab, int n_layer, int64_t batch, bool fused) {
  const Device cpu = Device::cpu();
  manual_seed(3);
  nn::GPTConfig c{vocab, /*block_size*/ 1024, n_layer, /*n_head*/ 12, /*n_embd*/ 768};
  nn::GPT gpt(c);
  std::vector<int64_t> tokens(static_cast<size_t>(batch * 1024));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i % static_cast<size_t>(vocab));
  const Tensor ids = from_vector(tokens, {batch, 1024}).to(cpu);
  gpt.set_checkpoint(autograd::CheckpointPolicy::budget(int64_t{1} << 60));
  gpt.plan_checkpoint([&] { return fused ? gpt.loss(ids, ids, -100, "sum") : cross_entropy(gpt(ids), ids, -100, "sum"); });
  return *gpt.chain_cost();
}

// What the head and loss save (ChainCost::after_bytes) at `batch` sequences and `vocab` tokens: the
// bilinear a + b B + c V + d B V through four measurements at B in {1, 2} and two small vocabularies.
// Unfused, d (the dlogits) dominates; fused, b (dh) and c (dW, whatever the batch).
double head_bytes(int64_t batch, int64_t vocab, bool fused) {
  const int64_t v1 = 128, v2 = 256;
  double m[2][2];
  for (int bi = 0; bi < 2; ++bi)
    for (int vi = 0; vi < 2; ++vi)
      m[bi][vi] = static_cast<double>(measured_cost(vi ? v2 : v1, 2, bi + 1, fused).after_bytes);
  const double d = (m[1][1] - m[1][0] - m[0][1] + m[0][0]) / static_cast<double>(v2 - v1);
  const double c = (m[0][1] - m[0][0]) / static_cast<double>(v2 - v1) - d;
  const double b = m[1][0] - m[0][0] - d * static_cast<double>(v1);
  const double a = m[0][0] - b - c * static_cast<double>(v1) - d * static_cast<double>(v1);
  const double B = static_cast<double>(batch), V = static_cast<double>(vocab);
  return a + b * B + c * V + d * B * V;
}

void h200(int64_t batch) {
  const profile::DeviceSpec& spec = profile::device_spec("h200");
  // Bytes: the blocks' at batch 1 (every saved tensor of a block is linear in the batch); the head's
  // and loss's extrapolated to GPT-2's vocabulary and the batch (head_bytes), unfused and fused.
  const int64_t v1 = 128, v_gpt2 = 50257;
  const autograd::ChainCost c1 = measured_cost(v1, 2, 1, false);
  const double after_unfused = head_bytes(batch, v_gpt2, false), after_fused = head_bytes(batch, v_gpt2, true);
  // Time: one block's forward kernels at batch 1, each predicted on the H200.
  manual_seed(4);
  nn::GPTConfig c{v1, 1024, 1, 12, 768};
  nn::GPT gpt(c);
  const Tensor x = randn({1, 1024, 768}, DType::f32, Device::cpu()).set_requires_grad(true);
  double fwd_s = 0, gemm_s = 0;
  {
    Profiler prof;
    Tensor y = (*gpt.h)[0](x);
    prof.stop();
    for (const profile::KernelRecord& k : prof.kernels()) {
      if (k.op_backward) continue;
      const double s = profile::predict_record(spec, k).seconds;
      fwd_s += s;
      if (k.kernel.find("gemm") != std::string::npos || k.kernel.find("matmul") != std::string::npos) gemm_s += s;
    }
  }
  std::printf("\nGPT-2-small-shaped chain on an %s, batch %lld x 1024 tokens (predicted, not measured)\n",
              spec.description.c_str(), static_cast<long long>(batch));
  std::printf("  per block at batch 1 (measured on cpu): saves %s plain, %s selective, input %s\n",
              format_bytes(c1.units[0].saved_bytes).c_str(), format_bytes(c1.units[0].selective_bytes).c_str(),
              format_bytes(c1.units[0].input_bytes).c_str());
  std::printf("  head + loss at batch %lld, vocab %lld (extrapolated from measurements at batch 1, 2 and vocab 128, "
              "256): cross_entropy on the logits saves %s, linear_cross_entropy (fused, chunked) %s\n",
              static_cast<long long>(batch), static_cast<long long>(v_gpt2),
              format_bytes(static_cast<int64_t>(after_unfused)).c_str(),
              format_bytes(static_cast<int64_t>(after_fused)).c_str());
  std::printf("  per block forward on the H200 (predict_record, f32): %.3f ms at batch 1, of which GEMMs %.3f ms\n",
              fwd_s * 1e3, gemm_s * 1e3);
  autograd::ChainCost cost;
  const double b = static_cast<double>(batch);
  for (int i = 0; i < 12; ++i) {
    autograd::UnitCost u;
    const autograd::UnitCost& m = c1.units[1];  // a block past the first (the first's input is the embedding sum)
    u.saved_bytes = static_cast<int64_t>(b * static_cast<double>(m.saved_bytes));
    u.selective_bytes = static_cast<int64_t>(b * static_cast<double>(m.selective_bytes));
    u.input_bytes = static_cast<int64_t>(b * static_cast<double>(m.input_bytes));
    u.forward_ns = b * fwd_s * 1e9;
    u.selective_ns = b * (fwd_s - gemm_s) * 1e9;
    cost.units.push_back(u);
  }
  cost.before_bytes = static_cast<int64_t>(b * static_cast<double>(c1.before_bytes));
  using autograd::CheckpointPolicy;
  std::vector<CheckpointPolicy::Run> sqrt_runs = CheckpointPolicy::parse("sqrt").plan(12);
  for (const bool fused : {false, true})
  for (const double link : {64e9, 450e9}) {
    cost.after_bytes = static_cast<int64_t>(fused ? after_fused : after_unfused);
    cost.host_bytes_per_s = link;
    const autograd::Prediction plain = autograd::predict(cost, CheckpointPolicy::parse("none").plan(12));
    const double step_ms = 3 * 12 * b * fwd_s * 1e3;  // forward + backward of the blocks (backward = 2 forwards)
    const int64_t budget = plain.peak_bytes / 4;
    std::printf("\n  %s head, host link %.0f GB/s: plain peak %s, budget 25 %% = %s; blocks' step (3 forwards) %.2f ms\n",
                fused ? "fused" : "unfused", link * 1e-9, format_bytes(plain.peak_bytes).c_str(),
                format_bytes(budget).c_str(), step_ms);
    const auto row = [&](const char* name, const std::vector<CheckpointPolicy::Run>& runs) {
      const autograd::Prediction p = autograd::predict(cost, runs);
      std::printf("    %-20s peak %s, extra %.2f ms (x%.3f) = recompute %.2f + copy %.2f, host %s  %s\n", name,
                  format_bytes(p.peak_bytes).c_str(), p.time_ns() * 1e-6, (step_ms + p.time_ns() * 1e-6) / step_ms,
                  p.recompute_ns * 1e-6, p.copy_ns * 1e-6, format_bytes(p.host_bytes).c_str(),
                  examples::runs_str(runs).c_str());
    };
    row("sqrt", sqrt_runs);
    std::vector<CheckpointPolicy::Run> sqrt_offloaded = sqrt_runs, every_offloaded;
    for (CheckpointPolicy::Run& r : sqrt_offloaded) r.offloaded = r.checkpointed;
    for (int64_t i = 0; i < 12; ++i) every_offloaded.push_back({i, i + 1, false, false, true});
    row("sqrt, boundaries off", sqrt_offloaded);
    row("every block offloaded", every_offloaded);
    {  // ...at Offload's default in-flight bound: what the planner prices as the compute waiting
      autograd::ChainCost bounded = cost;
      bounded.offload_inflight_bytes = autograd::kDefaultOffloadInflightBytes;
      const autograd::Prediction p = autograd::predict(bounded, every_offloaded);
      std::printf(
          "    %-20s copy %.2f ms at the default %s in-flight bound, of which waiting for copies out "
          "%.2f ms (%.2f ms with no bound)\n",
          "", p.copy_ns * 1e-6, format_bytes(bounded.offload_inflight_bytes).c_str(), p.copy_out_ns * 1e-6,
          autograd::predict(cost, every_offloaded).copy_out_ns * 1e-6);
    }
    for (const autograd::OffloadMode mode : {autograd::OffloadMode::None, autograd::OffloadMode::Auto}) {
      try {
        const autograd::CheckpointPlan p = autograd::plan_checkpoint(cost, budget, mode);
        std::printf("    planner, offload %-4s peak %s, extra %.2f ms (x%.3f) = recompute %.2f + copy %.2f, host %s  %s\n",
                    autograd::offload_mode_name(mode), format_bytes(p.predicted.peak_bytes).c_str(),
                    p.predicted.time_ns() * 1e-6, (step_ms + p.predicted.time_ns() * 1e-6) / step_ms,
                    p.predicted.recompute_ns * 1e-6, p.predicted.copy_ns * 1e-6,
                    format_bytes(p.predicted.host_bytes).c_str(), examples::runs_str(p.runs).c_str());
      } catch (const Error& e) {
        std::printf("    planner, offload %-4s %s\n", autograd::offload_mode_name(mode), e.what());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const int64_t n_embd = argc > 2 ? std::atoll(argv[2]) : 64;
  const int64_t batch = argc > 3 ? std::atoll(argv[3]) : 16;
  try {
    if (rounds == 0) std::printf("rounds 0: the measured sweep is skipped\n");
    else if (cuda_available()) sweep(rounds, n_embd, batch);
    else std::printf("no cuda device in this build: the measured sweep is skipped\n");
    h200(/*batch*/ 8);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_offload: %s\n", e.what());
    return 1;
  }
  return 0;
}
