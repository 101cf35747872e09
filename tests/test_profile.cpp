// The kernel profiler (core/profile.h, report/profile.h): records carry the right op, node,
// phase and closed-form costs; checkpoint replays are counted; the trace is valid, nested
// trace-event JSON; the table's shares add up; emulated CUDA is marked; nothing is recorded off.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "kernels/ops.h"
#include "nn/gpt.h"
#include "optim/optimizer.h"
#include "report/profile.h"
#include "testing.h"

using namespace reel;
using profile::KernelRecord;
using reel::testing::random_ids;
using profile::Phase;

namespace {

std::vector<KernelRecord> records_of(const Profiler& p, const std::string& kernel) {
  std::vector<KernelRecord> out;
  for (const KernelRecord& r : p.kernels())
    if (r.kernel == kernel) out.push_back(r);
  return out;
}


// One training step of a tiny GPT with sqrt checkpointing, profiled; `checkpointed` gets the tape
// positions of the nodes inside checkpoint segments.
std::unique_ptr<Profiler> profiled_gpt_step(Device device, std::set<int64_t>* checkpointed = nullptr) {
  nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 4, /*n_head*/ 2, /*n_embd*/ 16};
  manual_seed(3);
  nn::GPT gpt(c);
  gpt.to(device);
  gpt.set_checkpoint(nn::CheckpointPolicy::parse("sqrt"));
  optim::AdamW opt(gpt.parameters(), 1e-3);
  const Tensor ids = random_ids(2, 8, 11, 4, device), targets = random_ids(2, 8, 11, 5, device);
  auto prof = std::make_unique<Profiler>();
  Tensor loss;
  {
    const profile::PhaseScope forward(Phase::Forward);
    loss = cross_entropy(gpt(ids), targets);
  }
  const autograd::Tape& tape = autograd::Tape::current();
  for (size_t i = 0; i < tape.size() && checkpointed; ++i)
    if (tape.node(i).segment) checkpointed->insert(static_cast<int64_t>(i));
  autograd::backward(loss);
  opt.step();
  prof->stop();
  return prof;
}

}  // namespace

TEST_CASE("kernel records: the op, the tape node, the phase and closed-form costs") {
  const Tensor a = randn({6, 5}), b = randn({5, 7});
  const Tensor x = randn({4, 3, 8}), w = randn({8}), bias = randn({8});
  Profiler prof;
  const Tensor c = kernels::matmul(a, b);
  const kernels::LayerNormForward ln = kernels::layernorm_forward(x, w, bias);
  const Tensor s = kernels::softmax_forward(x);
  std::vector<Tensor> params{randn({10}), randn({3, 4})}, grads{randn({10}), randn({3, 4})},
      m{zeros({10}), zeros({3, 4})}, v{zeros({10}), zeros({3, 4})};
  kernels::adamw_update(params, grads, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, true);
  prof.stop();

  const std::vector<KernelRecord> mm = records_of(prof, "matmul");
  REQUIRE(mm.size() == 1);
  CHECK(mm[0].cost.flops == 2 * 6 * 7 * 5);
  CHECK(mm[0].cost.bytes_read == (6 * 5 + 5 * 7) * 4);
  CHECK(mm[0].cost.bytes_written == 6 * 7 * 4);
  CHECK(mm[0].shapes == "(6, 5) (5, 7) (6, 7)");
  CHECK(mm[0].dtype == DType::f32);
  CHECK(mm[0].device == Device::cpu());
  CHECK(mm[0].dur_ns >= 0);
  CHECK(mm[0].op.empty());  // a kernel called directly: no tape op
  CHECK(mm[0].phase == Phase::None);

  const std::vector<KernelRecord> norm = records_of(prof, "layernorm_forward");
  REQUIRE(norm.size() == 1);
  const int64_t R = 12, C = 8;
  CHECK(norm[0].cost.flops == 8 * R * C);
  CHECK(norm[0].cost.bytes_read == (R * C + 2 * C) * 4);
  CHECK(norm[0].cost.bytes_written == (R * C + 2 * R) * 4);

  const std::vector<KernelRecord> sm = records_of(prof, "softmax_forward");
  REQUIRE(sm.size() == 1);
  CHECK(sm[0].cost.flops == 4 * 96);
  CHECK(sm[0].cost.bytes() == 2 * 96 * 4);

  const std::vector<KernelRecord> adam = records_of(prof, "adamw_update");
  REQUIRE(adam.size() == 1);
  CHECK(adam[0].cost.flops == 14 * 22);
  CHECK(adam[0].cost.bytes_read == 4 * 22 * 4);
  CHECK(adam[0].cost.bytes_written == 3 * 22 * 4);
}

TEST_CASE("ops through the tape: kernels carry their op, node and phase; backward and optimizer phases") {
  manual_seed(1);
  Tensor w = randn({4, 3});
  w.set_requires_grad();
  optim::SGD opt({w}, 0.1);
  Profiler prof;
  const Tensor loss = sum(gelu(matmul(randn({2, 4}), w)));
  autograd::backward(loss);
  opt.step();
  prof.stop();
  const std::vector<KernelRecord> gelu_fwd = records_of(prof, "unary.gelu");
  REQUIRE(gelu_fwd.size() == 1);
  CHECK(gelu_fwd[0].op == "gelu");
  CHECK_FALSE(gelu_fwd[0].op_backward);
  CHECK(gelu_fwd[0].phase == Phase::Forward);
  CHECK(gelu_fwd[0].node == 1);  // matmul is node 0
  const std::vector<KernelRecord> gelu_bwd = records_of(prof, "unary_backward.gelu");
  REQUIRE(gelu_bwd.size() == 1);
  CHECK(gelu_bwd[0].op == "gelu");
  CHECK(gelu_bwd[0].op_backward);
  CHECK(gelu_bwd[0].phase == Phase::Backward);
  CHECK(gelu_bwd[0].node == 1);
  const std::vector<KernelRecord> sgd = records_of(prof, "sgd_update");
  REQUIRE(sgd.size() == 1);
  CHECK(sgd[0].phase == Phase::Optimizer);
  // Every op span has a matching name; spans of the backward phase and the optimizer exist.
  std::map<std::string, int> spans;
  for (const profile::SpanRecord& s : prof.spans()) ++spans[s.name];
  CHECK(spans["gelu"] == 1);
  CHECK(spans["gelu.backward"] == 1);
  CHECK(spans["backward"] == 1);
  CHECK(spans["optimizer"] == 1);
}

TEST_CASE("checkpoint replay: as many replayed kernel runs per node as the node ran in forward") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    std::set<int64_t> checkpointed;
    const std::unique_ptr<Profiler> profiled = profiled_gpt_step(device, &checkpointed);
    const Profiler& prof = *profiled;
    REQUIRE_FALSE(checkpointed.empty());
    std::map<int64_t, int> forward_runs, replay_runs;  // by tape node
    std::set<int> segments;
    for (const KernelRecord& r : prof.kernels()) {
      if (r.op.empty() || r.op_backward) continue;
      if (r.phase == Phase::Forward) ++forward_runs[r.node];
      if (r.phase == Phase::Replay) {
        ++replay_runs[r.node];
        segments.insert(r.segment);
      }
    }
    REQUIRE_FALSE(replay_runs.empty());
    CHECK_FALSE(segments.count(-1));
    // Exactly the checkpointed nodes run again, each with as many kernels as in forward.
    for (const auto& entry : forward_runs) {
      const int64_t node = entry.first;
      CAPTURE(node);
      CHECK(replay_runs[node] == (checkpointed.count(node) ? entry.second : 0));
    }
    for (const auto& [node, runs] : replay_runs) CHECK((checkpointed.count(node) || runs == 0));
  }
}

TEST_CASE("the roof by dtype: a row per kernel and dtype, at the dtype's width, placed against its own roof") {
  // The CPU's roof measures f64, bf16 and f16 GEMMs beside the SGEMM.
  const profile::Roof& cpu = profile::roof_for(Device::cpu());
  for (DType dt : {DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(dt);
    CHECK(cpu.flops_for(dt) > 1e7);
  }
  CHECK(cpu.flops_for(DType::f32) == cpu.flops_per_s);

  // The same matmul in f32 and bf16: two rows, the bf16 one with half the bytes.
  Profiler prof;
  const int64_t n = 64;
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor a = full({n, n}, 0.5, dt, Device::cpu()), b = full({n, n}, 0.25, dt, Device::cpu());
    (void)matmul(a, b);
  }
  prof.stop();
  std::map<DType, profile::KernelSummary> by_dtype;
  for (const profile::KernelSummary& s : profile::summarize_kernels(prof))
    if (s.kernel.find("matmul") != std::string::npos) by_dtype[s.dtype] = s;
  REQUIRE(by_dtype.count(DType::f32));
  REQUIRE(by_dtype.count(DType::bf16));
  CHECK(by_dtype[DType::f32].bytes == 3 * n * n * 4);
  CHECK(by_dtype[DType::bf16].bytes == 3 * n * n * 2);
  std::ostringstream os;
  profile::print_table(os, prof);
  CHECK(os.str().find("bf16") != std::string::npos);

  // Placement uses the dtype's compute roof: 1 GFLOP in 1 s at high intensity is 100 % of a
  // 1 GFLOP/s bf16 roof and 10 % of a 10 GFLOP/s f32 one.
  profile::Roof roof;
  roof.bytes_per_s = 1e12;
  roof.flops_per_s = 1e10;
  roof.flops_by_dtype = {{DType::bf16, 1e9}};
  CHECK(profile::place_on_roof(roof, 1e3, 1e9, 1.0, DType::bf16).fraction == doctest::Approx(1.0));
  CHECK(profile::place_on_roof(roof, 1e3, 1e9, 1.0, DType::f32).fraction == doctest::Approx(0.1));
  CHECK(profile::place_on_roof(roof, 1e3, 1e9, 1.0).compute_bound);
}

TEST_CASE("the table: shares add up to 100 %, kernel time fits in the wall time, rows against the roof") {
  const std::unique_ptr<Profiler> profiled = profiled_gpt_step(Device::cpu());
  const Profiler& prof = *profiled;
  const std::vector<profile::KernelSummary> rows = profile::summarize_kernels(prof);
  REQUIRE_FALSE(rows.empty());
  double share = 0;
  int64_t kernel_ns = 0, calls = 0;
  for (const profile::KernelSummary& s : rows) {
    share += s.share;
    kernel_ns += s.total_ns;
    calls += s.calls;
    CHECK(s.roof_fraction >= 0);
  }
  CHECK(share == doctest::Approx(1.0));
  CHECK(calls == static_cast<int64_t>(prof.kernels().size()));
  CHECK(kernel_ns <= prof.wall_ns());
  const profile::Roof& roof = profile::roof_for(Device::cpu());
  CHECK(roof.bytes_per_s > 1e8);
  CHECK(roof.flops_per_s > 1e8);
  std::ostringstream os;
  profile::print_table(os, prof);
  CHECK(os.str().find("% roof") != std::string::npos);
  CHECK(os.str().find("matmul") != std::string::npos);
  CHECK(os.str().find("replay") != std::string::npos);
  MESSAGE(os.str());
}

TEST_CASE("the trace: valid trace-event JSON, spans nested per track, memory counters") {
  const std::unique_ptr<Profiler> profiled = profiled_gpt_step(reel::testing::devices().back());
  const Profiler& prof = *profiled;
  const std::string path = "test_profile_trace.json";
  profile::write_trace(path, prof);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::remove(path.c_str());
  REQUIRE(trace.contains("traceEvents"));
  std::map<int, std::vector<std::pair<double, double>>> spans;  // track -> (ts, end)
  int kernels = 0, counters = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    for (const char* key : {"ph", "ts", "pid", "tid", "name"}) REQUIRE(e.contains(key));
    const std::string ph = e["ph"];
    if (ph == "X") {
      REQUIRE(e["dur"].get<double>() >= 0);
      spans[e["tid"].get<int>()].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
      if (e["cat"] == "kernel") ++kernels;
    }
    if (ph == "C") ++counters;
  }
  CHECK(kernels == static_cast<int>(prof.kernels().size()));
  CHECK(counters == kernels);
  // On each track spans nest: sorted by start (the longer first on ties), each one ends before
  // the span that encloses it ends.
  const double slack = 1e-3;  // us: rounding of ns to us
  for (auto& entry : spans) {
    const int track = entry.first;
    std::vector<std::pair<double, double>>& list = entry.second;
    CAPTURE(track);
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open_ends;
    for (const auto& [ts, end] : list) {
      while (!open_ends.empty() && open_ends.back() <= ts + slack) open_ends.pop_back();
      if (!open_ends.empty()) CHECK(end <= open_ends.back() + slack);
      open_ends.push_back(end);
    }
  }
}

TEST_CASE("emulated CUDA kernels are marked; nothing is recorded with no Profiler; one Profiler at a time") {
  if (cuda_available()) {
    const Tensor a = randn({8, 8}, DType::f32, Device::cuda()), b = randn({8, 8}, DType::f32, Device::cuda());
    Profiler prof;
    const Tensor c = kernels::matmul(a, b);
    prof.stop();
    const std::vector<KernelRecord> mm = records_of(prof, "matmul");
    REQUIRE(mm.size() == 1);
#if defined(REEL_CUDA_EMULATED)
    CHECK(mm[0].emulated);
    CHECK(prof.track_name(mm[0].track).find("emulated") != std::string::npos);
#else
    CHECK_FALSE(mm[0].emulated);
#endif
    CHECK(mm[0].track == profile::kDeviceTrack);
    CHECK(mm[0].dur_ns >= 0);
  }
  Profiler prof;
  CHECK_THROWS_WITH_AS(Profiler(), doctest::Contains("another Profiler"), Error);
  prof.stop();
  const size_t recorded = prof.kernels().size();
  CHECK_FALSE(profile::enabled());
  const Tensor y = kernels::matmul(randn({4, 4}), randn({4, 4}));
  CHECK(prof.kernels().size() == recorded);
  Profiler again;  // after stop() a new one may start
  CHECK(again.running());
}

TEST_CASE("async spans: recorded at end() on in-flight lanes, overlapping ones apart, only under their own Profiler") {
  profile::AsyncSpan before = profile::AsyncSpan::begin("no profiler");
  CHECK(!before.open());
  profile::AsyncSpan stale;
  {
    Profiler first;
    stale = profile::AsyncSpan::begin("begun under the first profiler");
    CHECK(stale.open());
  }
  Profiler prof;
  stale.end();  // the first Profiler's clock: dropped
  profile::AsyncSpan a = profile::AsyncSpan::begin("a");
  profile::AsyncSpan b = profile::AsyncSpan::begin("b");  // overlaps a
  a.end();
  b.end();
  b.end();  // a second end records nothing
  profile::AsyncSpan c = profile::AsyncSpan::begin("c");  // after both: back on lane 0
  c.end();
  prof.stop();
  std::map<std::string, const profile::SpanRecord*> by_name;
  for (const profile::SpanRecord& s : prof.spans()) by_name[s.name] = &s;
  REQUIRE(by_name.size() == 3);
  CHECK(by_name["a"]->track == profile::kInFlightTrack);
  CHECK(by_name["b"]->track == profile::kInFlightTrack + 1);
  CHECK(by_name["c"]->track == profile::kInFlightTrack);
  CHECK(by_name["b"]->start_ns >= by_name["a"]->start_ns);
  CHECK(prof.track_name(profile::kInFlightTrack + 1) == "in flight, lane 1");
}

TEST_CASE("a kernel record counts the device launches its entry point made") {
  for (const Device device : {Device::meta(), Device::cuda()}) {
    if (device.is_cuda() && !cuda_available()) continue;
    CAPTURE(device);
    // scale_ over 70 tensors: a launch holds 64 (kernels/cuda/multi_tensor.h), so two launches; over
    // 3 tensors, one. attention's backward: one kernel (dq and dK, dV blocks). The gradient norm:
    // one launch per list launch, the fold in the last one's last block.
    std::vector<Tensor> many, few;
    for (int i = 0; i < 70; ++i) many.push_back(ones({3}, DType::f32, device));
    for (int i = 0; i < 3; ++i) few.push_back(ones({3}, DType::f32, device));
    const Tensor q = randn({1, 2, 5, 4}).to(device).set_requires_grad(true);
    const Tensor out = attention(q, q, q);
    Profiler prof;
    kernels::scale_(many, 0.5);
    kernels::scale_(few, 0.5);
    autograd::backward(sum(out));
    const Tensor norms = empty({2}, DType::f64, device);
    kernels::global_grad_norm_(many, norms, 1.0, Tensor(), false);
    kernels::global_grad_norm_(few, norms, 1.0, Tensor(), false);
    prof.stop();
    const std::vector<KernelRecord> scales = records_of(prof, "scale_");
    REQUIRE(scales.size() == 2);
    CHECK(scales[0].launches == 2);
    CHECK(scales[1].launches == 1);
    const std::vector<KernelRecord> attention = records_of(prof, "attention_backward");
    REQUIRE(attention.size() == 1);
    CHECK(attention[0].launches == 1);
    const std::vector<KernelRecord> norm = records_of(prof, "grad_norm_device");
    REQUIRE(norm.size() == 2);
    CHECK(norm[0].launches == 2);
    CHECK(norm[1].launches == 1);
    // The per-step line sums the launches, not the records.
    int64_t launches = 0;
    for (const KernelRecord& r : prof.kernels()) launches += r.launches;
    CHECK(launches > static_cast<int64_t>(prof.kernels().size()));
    CHECK(profile::step_counts(prof, 1).launches == doctest::Approx(static_cast<double>(launches)));
  }
}

TEST_CASE("host syncs: each wait of the host for a device is recorded once, with its kind and op; none on the cpu") {
  // The cpu never syncs: its copies and waits are not recorded.
  {
    Profiler prof;
    const Tensor a = randn({4, 4});
    const double v = a.to(Device::cpu()).reshape({-1}).slice(0, 0, 1).item();
    Stream::compute(Device::cpu()).synchronize();
    prof.stop();
    CHECK(prof.host_syncs().empty());
    CHECK(std::isfinite(v));
    CHECK(profile::format_step_counts(profile::step_counts(prof, 1)).find("0 host syncs") != std::string::npos);
  }
  for (const Device device : {Device::meta(), Device::cuda()}) {
    if (device.is_cuda() && !cuda_available()) continue;
    CAPTURE(device);
    const Tensor host = randn({8, 8});
    Profiler prof;
    const Tensor x = host.to(device);                             // a blocking copy from pageable memory
    const Tensor y = kernels::matmul(x, x);                       // a launch, no wait
    const Tensor back = y.to(Device::cpu());                      // the host waits for the matmul
    Stream::compute(device).synchronize();                        // a wait
    Event done;
    done.record(Stream::compute(device));
    done.synchronize();                                           // a wait
    const Tensor emb = embedding(random_ids(1, 4, 8, 1, device), x);  // range check: its flag read back
    prof.stop();
    std::map<profile::HostSyncKind, int> kinds;
    for (const profile::HostSyncRecord& h : prof.host_syncs()) {
      CHECK(h.device == device);
      ++kinds[h.kind];
    }
    CHECK(kinds[profile::HostSyncKind::CopyFromHost] >= 2);  // x, and random_ids' upload
    CHECK(kinds[profile::HostSyncKind::StreamSync] == 1);
    CHECK(kinds[profile::HostSyncKind::EventSync] == 1);
    CHECK(kinds[profile::HostSyncKind::CopyToHost] >= 1);
    // The wait inside embedding is attributed to its op.
    const bool in_embedding = std::any_of(prof.host_syncs().begin(), prof.host_syncs().end(),
                                          [](const profile::HostSyncRecord& h) { return h.op == "embedding"; });
    CHECK(in_embedding == (kinds[profile::HostSyncKind::CopyToHost] > 1));
    // The per-step line counts launches (the device's kernel runs and the copies) and the syncs.
    const profile::StepCounts c = profile::step_counts(prof, 2);
    CHECK(c.host_syncs == doctest::Approx(static_cast<double>(prof.host_syncs().size()) / 2));
    CHECK(c.launches >= 1.5);  // the upload, the matmul, the copy back at least, over 2 steps
    const std::string line = profile::format_step_counts(c);
    CHECK(line.rfind("per step: ", 0) == 0);
    CHECK(line.find(" launches, ") != std::string::npos);
    CHECK(line.find("stream synchronize 0.5") != std::string::npos);
    // The trace shows each as an instant on the host thread.
    const std::string path = "test_profile_host_syncs.json";
    profile::write_trace(path, prof);
    std::ifstream in(path);
    const nlohmann::json trace = nlohmann::json::parse(in);
    size_t instants = 0;
    for (const auto& e : trace["traceEvents"])
      if (e.value("cat", "") == "host_sync") ++instants;
    CHECK(instants == prof.host_syncs().size());
    std::remove(path.c_str());
  }
}
