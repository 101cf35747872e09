// The predicted device step (report/predict.h): each recorded kernel run against a device spec's
// roof and launch floor, grouped by kernel and by op, printed beside the measured run.
#include "report/predict.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <utility>

namespace reel::profile {

namespace {

std::string op_key(const KernelRecord& r) {
  if (r.op.empty()) return "(outside ops)";
  return r.op + (r.op_backward ? ".backward" : "");
}

void add(PredictedGroup& g, const KernelRecord& r, const Prediction& p) {
  ++g.calls;
  g.measured_s += static_cast<double>(r.dur_ns) * 1e-9;
  g.predicted_s += p.seconds;
  g.bound_s[static_cast<int>(p.bound)] += p.seconds;
  g.flops += r.cost.flops;
  g.bytes += r.cost.bytes();
}

std::vector<PredictedGroup> largest_first(std::map<std::string, PredictedGroup>& groups) {
  std::vector<PredictedGroup> rows;
  for (auto& [key, g] : groups) {
    g.key = key;
    rows.push_back(g);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const PredictedGroup& a, const PredictedGroup& b) { return a.predicted_s > b.predicted_s; });
  return rows;
}

}  // namespace

Bound PredictedGroup::bound() const {
  int best = static_cast<int>(Bound::Launch);
  for (int b = 0; b < kNumBounds; ++b)
    if (bound_s[b] > bound_s[best]) best = b;
  return static_cast<Bound>(best);
}

bool PredictedGroup::mixed() const {
  return std::count_if(std::begin(bound_s), std::end(bound_s), [](double s) { return s > 0; }) > 1;
}

StepPrediction predict_step(const std::vector<KernelRecord>& records, const DeviceSpec& spec,
                            int64_t offload_inflight_bytes) {
  StepPrediction out;
  out.total.key = "step";
  const bool cuda_run =
      std::any_of(records.begin(), records.end(), [](const KernelRecord& r) { return !r.device.is_cpu(); });  // cuda or meta
  out.from_cpu = !cuda_run && !records.empty();
  std::map<std::string, PredictedGroup> kernels, ops;
  DeviceSpec no_launch = spec;  // for the roofline alone: what fusing launches away could reach
  no_launch.launch_s = 0;
  out.offload_stalls.key = kOffloadStallKernel;
  out.fetch_waits.key = kOffloadFetchWaitKernel;
  // The copy stream beside the compute stream, in the order the host enqueued the work: each copy
  // starts once the copy stream is free and the compute work enqueued before it has run (offload's
  // copies wait on a compute event), and a stall holds the compute stream until the copies it
  // waits for are done: the copy stream's end less the bytes queued behind them.
  double compute_end = 0, copy_end = 0;
  // With a bound: offload's copies out still waiting, oldest first (predicted end, bytes), as
  // Offload counts them at each pack: those done by the time the next one is enqueued are gone.
  std::deque<std::pair<double, int64_t>> waiting;
  int64_t waiting_bytes = 0;
  // A wait of the compute stream for offload's copies (a stall, predicted or recorded, or a wait
  // for a copy back): its time in every table it belongs to.
  const auto add_stall = [&](const KernelRecord& r, const Prediction& p) {
    add(r.kernel == kOffloadFetchWaitKernel ? out.fetch_waits : out.offload_stalls, r, p);
    add(kernels[r.kernel], r, p);
    add(ops[op_key(r)], r, p);
    add(out.total, r, p);
    out.tf32_s += p.seconds;
    out.roofline_s += p.seconds;
  };
  const auto bounded_copy_out = [&](const KernelRecord& r, double end) {
    while (!waiting.empty() && waiting.front().first <= compute_end) {
      waiting_bytes -= waiting.front().second;
      waiting.pop_front();
    }
    waiting.emplace_back(end, r.cost.bytes_written);
    waiting_bytes += r.cost.bytes_written;
    double until = compute_end;
    int64_t waited = 0;
    while (waiting_bytes > offload_inflight_bytes && !waiting.empty()) {
      until = std::max(until, waiting.front().first);
      waited += waiting.front().second;
      waiting_bytes -= waiting.front().second;
      waiting.pop_front();
    }
    if (waited == 0) return;
    KernelRecord stall = r;  // a stall of the compute stream, made here rather than recorded
    stall.kernel = kOffloadStallKernel;
    stall.stream = StreamKind::Compute;
    stall.dur_ns = 0;
    stall.cost = KernelCost{};
    stall.cost.bytes_written = waited;
    const Prediction p{until - compute_end, Bound::Memory};
    compute_end = until;
    add_stall(stall, p);
  };
  for (const KernelRecord& r : records) {
    if (r.kernel == kOffloadStallKernel && offload_inflight_bytes > 0) continue;  // re-decided below
    if (r.kernel == kOffloadStallKernel || r.kernel == kOffloadFetchWaitKernel) {  // until its copies are done
      const double target = copy_end - static_cast<double>(r.cost.bytes_read) / spec.host_link_bytes_per_s;
      const Prediction p{std::max(0.0, target - compute_end), Bound::Memory};
      compute_end += p.seconds;
      add_stall(r, p);
      continue;
    }
    if (cuda_run && r.device.is_cpu() && r.kernel != "copy_to_host") {
      ++out.host_runs;  // host work of a CUDA run: it stays on the host
      out.host_measured_s += static_cast<double>(r.dur_ns) * 1e-9;
      continue;
    }
    const Prediction p = predict_record(spec, r);
    if (r.stream == StreamKind::Copy) {
      // The copy stream runs beside compute: its copies are listed, not added to the step.
      add(kernels[r.kernel], r, p);
      add(out.copy_stream, r, p);
      copy_end = std::max(copy_end, compute_end) + p.seconds;
      if (offload_inflight_bytes > 0 && r.kernel == "copy_async.d2h") bounded_copy_out(r, copy_end);
      continue;
    }
    compute_end += p.seconds;
    add(kernels[r.kernel], r, p);
    add(ops[op_key(r)], r, p);
    add(out.total, r, p);
    out.tf32_s += predict_record(spec, r, true).seconds;
    out.roofline_s += predict_record(no_launch, r).seconds;
    out.emulated = out.emulated || r.emulated;
    out.dry = out.dry || r.device.is_meta();
  }
  out.kernels = largest_first(kernels);
  out.ops = largest_first(ops);
  return out;
}

void print_prediction(std::ostream& os, const Profiler& profiler, const DeviceSpec& spec, int64_t steps,
                      int64_t offload_inflight_bytes) {
  constexpr int kTop = 20;
  const StepPrediction sp = predict_step(profiler.kernels(), spec, offload_inflight_bytes);
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  char line[320];
  std::snprintf(line, sizeof line,
                "predict %s: %s: %.0f GB/s; TFLOP/s FP32 %.1f, TF32 %.1f, BF16 %.1f, FP16 %.1f, FP64 %.2f; %d SMs; "
                "host link %.0f GB/s; launch %.1f us\n",
                spec.name.c_str(), spec.description.c_str(), spec.bytes_per_s * 1e-9, spec.fp32_flops_per_s * 1e-12,
                spec.tf32_flops_per_s * 1e-12, spec.bf16_flops_per_s * 1e-12, spec.fp16_flops_per_s * 1e-12,
                spec.fp64_flops_per_s * 1e-12, spec.sms, spec.host_link_bytes_per_s * 1e-9, spec.launch_s * 1e6);
  os << line;
  os << "model: each kernel run takes max(bytes / bandwidth, FLOPs / its dtype's rate (f32: FP32 CUDA cores), "
        "launch latency), one after another; host copies over the host link\n";
  const char* source = sp.dry        ? "meta, a dry run (nothing measured)"
                       : sp.emulated ? "cuda emulated by simt (measured: host times)"
                       : sp.from_cpu ? "cpu (measured: this host's times)"
                                     : "cuda";
  std::snprintf(line, sizeof line, "placed: %lld kernel runs of %lld step%s, recorded on %s\n",
                static_cast<long long>(sp.total.calls), static_cast<long long>(steps), steps == 1 ? "" : "s", source);
  os << line;

  const auto calls = [&](int64_t c) {
    char buf[32];
    const double per = static_cast<double>(c) / n;
    std::snprintf(buf, sizeof buf, per == static_cast<double>(static_cast<int64_t>(per)) ? "%.0f" : "%.1f", per);
    return std::string(buf);
  };
  const auto table = [&](const char* title, const std::vector<PredictedGroup>& rows) {
    std::snprintf(line, sizeof line, "%-28s %10s %12s %13s %11s %6s  %s\n", title, "calls/step", "measured ms",
                  "predicted us", "us/call", "share", "bound");
    os << line;
    int shown = 0;
    for (const PredictedGroup& g : rows) {
      if (shown++ == kTop) {
        os << "  ... " << rows.size() - static_cast<size_t>(kTop) << " more\n";
        break;
      }
      const std::string bound = std::string(bound_name(g.bound())) + (g.mixed() ? "*" : "");
      std::snprintf(line, sizeof line, "%-28s %10s %12.3f %13.2f %11.2f %5.1f%%  %s\n", g.key.c_str(),
                    calls(g.calls).c_str(), g.measured_s * 1e3 / n, g.predicted_s * 1e6 / n,
                    g.predicted_s * 1e6 / static_cast<double>(g.calls),
                    sp.total.predicted_s > 0 ? 100 * g.predicted_s / sp.total.predicted_s : 0, bound.c_str());
      os << line;
    }
  };
  table("kernel", sp.kernels);
  table("op", sp.ops);
  if (std::any_of(sp.kernels.begin(), sp.kernels.end(), [](const PredictedGroup& g) { return g.mixed(); }))
    os << "  * its runs differ in bound: the one holding most of its predicted time is shown\n";

  const PredictedGroup& t = sp.total;
  const auto us = [&](double s) { return s * 1e6 / n; };
  const double link_us = us(t.bound_s[static_cast<int>(Bound::Interconnect)]);
  char link[64] = "";  // collectives (a --dist run, or one simulated on meta): the interconnect's share
  if (link_us > 0) std::snprintf(link, sizeof link, "; interconnect %.1f us", link_us);
  std::snprintf(line, sizeof line,
                "step on %s: predicted %.1f us (memory %.1f, compute %.1f, launch %.1f us%s); measured %.3f ms%s\n",
                spec.name.c_str(), us(t.predicted_s), us(t.bound_s[0]), us(t.bound_s[1]), us(t.bound_s[2]), link,
                t.measured_s * 1e3 / n,
                sp.dry ? " (meta: a dry run, not a time)" : sp.emulated ? " (emulated, host time)" : sp.from_cpu ? " (cpu)" : "");
  os << line;
  std::snprintf(line, sizeof line, "  with the f32 GEMMs (matmul, convolutions) on TF32 tensor cores: %.1f us\n",
                us(sp.tf32_s));
  os << line;
  std::snprintf(line, sizeof line, "  the roofline alone (no launch floor: as if launches were fused away): %.1f us\n",
                us(sp.roofline_s));
  os << line;
  if (sp.copy_stream.calls > 0) {
    std::snprintf(line, sizeof line,
                  "  copy stream: %s copies a step, %.1f us over the host link, beside compute (not in the step)\n",
                  calls(sp.copy_stream.calls).c_str(), us(sp.copy_stream.predicted_s));
    os << line;
    const std::string bound = offload_inflight_bytes > 0
                                  ? "at a bound of " + format_bytes(offload_inflight_bytes) + " waiting, on this device"
                                  : "as the profiled run stalled";
    std::snprintf(line, sizeof line,
                  "  offload stalls (the compute stream waiting for copies to the host, %s): %s a step, %.1f us "
                  "predicted (in the step)\n",
                  bound.c_str(), calls(sp.offload_stalls.calls).c_str(), us(sp.offload_stalls.predicted_s));
    os << line;
    if (sp.fetch_waits.calls > 0) {
      std::snprintf(line, sizeof line,
                    "  waits for copies back (backward's rules reading offloaded saves before their copy has "
                    "landed): %s a step, %.1f us predicted (in the step)\n",
                    calls(sp.fetch_waits.calls).c_str(), us(sp.fetch_waits.predicted_s));
      os << line;
    }
  }
  if (sp.host_runs > 0) {
    std::snprintf(line, sizeof line, "  not placed: the run's host work, CPU kernel runs a step: %s (%.3f ms)\n",
                  calls(sp.host_runs).c_str(), sp.host_measured_s * 1e3 / n);
    os << line;
  }
}

}  // namespace reel::profile
