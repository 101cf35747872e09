// The profiler's reports (report/profile.h): summaries, the copy stream's overlap with compute,
// the terminal table, the trace file.
#include "report/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "core/device_backend.h"
#include "core/kernel_price.h"
#include "core/error.h"

namespace reel::profile {

const Roof& roof_for(Device device) {
  static std::mutex mutex;
  static std::map<std::string, Roof> measured;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = measured.find(device.str());
  if (it == measured.end()) it = measured.emplace(device.str(), backend_for(device).roof()).first;
  return it->second;
}

namespace {

int64_t total_kernel_ns(const Profiler& profiler) {
  int64_t total = 0;
  for (const KernelRecord& r : profiler.kernels()) total += r.dur_ns;
  return total;
}

template <typename KeyFn>
std::vector<GroupSummary> summarize_by(const Profiler& profiler, KeyFn key) {
  std::map<std::string, GroupSummary> groups;
  for (const KernelRecord& r : profiler.kernels()) {
    GroupSummary& g = groups[key(r)];
    ++g.calls;
    g.total_ns += r.dur_ns;
  }
  std::vector<GroupSummary> rows;
  for (auto& [k, g] : groups) {
    g.key = k;
    rows.push_back(g);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; });
  return rows;
}

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

// `intervals` as disjoint, sorted intervals with the same union (empty ones dropped).
std::vector<Interval> merged(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  std::vector<Interval> out;
  for (const Interval& i : intervals) {
    if (i.end_ns <= i.start_ns) continue;
    if (!out.empty() && i.start_ns <= out.back().end_ns) out.back().end_ns = std::max(out.back().end_ns, i.end_ns);
    else out.push_back(i);
  }
  return out;
}

// Trace tracks sort as numbered, except that a device's copy stream comes right after its compute
// stream.
int sort_index(int track) {
  if (track >= kCopyTrack && track < kInFlightTrack) return 2 * (kDeviceTrack + track - kCopyTrack) + 1;
  return 2 * track;
}

}  // namespace

int64_t covered_ns(std::vector<Interval> intervals) {
  int64_t total = 0;
  for (const Interval& i : merged(std::move(intervals))) total += i.end_ns - i.start_ns;
  return total;
}

int64_t hidden_ns(std::vector<Interval> copies, std::vector<Interval> compute) {
  const std::vector<Interval> a = merged(std::move(copies)), b = merged(std::move(compute));
  int64_t hidden = 0;
  // Both lists are disjoint and sorted: walk them together, advancing whichever ends first.
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    hidden += std::max<int64_t>(0, std::min(a[i].end_ns, b[j].end_ns) - std::max(a[i].start_ns, b[j].start_ns));
    if (a[i].end_ns < b[j].end_ns) ++i;
    else ++j;
  }
  return hidden;
}

std::vector<CopySummary> summarize_copies(const Profiler& profiler) {
  struct Spans {
    CopySummary summary;
    std::vector<Interval> copies, compute;
  };
  std::map<std::string, Spans> devices;
  for (const KernelRecord& r : profiler.kernels()) {
    Spans& d = devices[r.device.str()];
    const Interval span{r.start_ns, r.start_ns + r.dur_ns};
    if (r.stream != StreamKind::Copy) {
      d.compute.push_back(span);
      continue;
    }
    d.summary.device = r.device;
    d.summary.emulated = d.summary.emulated || r.emulated;
    ++d.summary.copies;
    d.summary.bytes += r.cost.bytes_written;
    d.copies.push_back(span);
  }
  std::vector<CopySummary> out;
  for (auto& [name, d] : devices) {
    if (d.summary.copies == 0) continue;
    d.summary.copy_ns = covered_ns(d.copies);
    d.summary.hidden_ns = hidden_ns(std::move(d.copies), std::move(d.compute));
    out.push_back(d.summary);
  }
  return out;
}

RoofPlacement place_on_roof(const Roof& roof, double bytes, double flops, double seconds, DType dtype) {
  RoofPlacement p;
  const double flops_per_s = roof.flops_for(dtype);
  if (roof.bytes_per_s <= 0 || flops_per_s <= 0 || seconds <= 0) return p;
  if (flops <= 0) {
    p.fraction = bytes / seconds / roof.bytes_per_s;
    return p;
  }
  const double intensity = bytes > 0 ? flops / bytes : 1e30;
  p.compute_bound = intensity * roof.bytes_per_s >= flops_per_s;
  p.fraction = flops / seconds / std::min(flops_per_s, intensity * roof.bytes_per_s);
  return p;
}

std::vector<KernelSummary> summarize_kernels(const Profiler& profiler) {
  std::map<std::string, KernelSummary> rows;
  for (const KernelRecord& r : profiler.kernels()) {
    KernelSummary& s =
        rows[r.kernel + " " + dtype_name(r.dtype) + " @" + r.device.str() + " " + stream_kind_name(r.stream)];
    s.kernel = r.kernel;
    s.device = r.device;
    s.dtype = r.dtype;
    s.stream = r.stream;
    s.emulated = r.emulated;
    ++s.calls;
    s.total_ns += r.dur_ns;
    s.flops += r.cost.flops;
    s.bytes += r.cost.bytes();
  }
  const double all_ns = static_cast<double>(total_kernel_ns(profiler));
  std::vector<KernelSummary> out;
  for (auto& [key, s] : rows) {
    const double seconds = static_cast<double>(s.total_ns) * 1e-9;
    s.share = all_ns > 0 ? static_cast<double>(s.total_ns) / all_ns : 0;
    if (seconds > 0) {
      s.gbytes_per_s = static_cast<double>(s.bytes) / seconds * 1e-9;
      s.gflops_per_s = static_cast<double>(s.flops) / seconds * 1e-9;
    }
    const RoofPlacement placed =
        place_on_roof(roof_for(s.device), static_cast<double>(s.bytes), static_cast<double>(s.flops), seconds, s.dtype);
    s.roof_fraction = placed.fraction;
    s.compute_bound = placed.compute_bound;
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; });
  return out;
}

std::vector<GroupSummary> summarize_ops(const Profiler& profiler) {
  return summarize_by(profiler, [](const KernelRecord& r) {
    if (r.op.empty()) return std::string("(outside ops)");
    return r.op + (r.op_backward ? ".backward" : "");
  });
}

std::vector<GroupSummary> summarize_phases(const Profiler& profiler) {
  return summarize_by(profiler, [](const KernelRecord& r) { return std::string(phase_name(r.phase)); });
}

StepCounts step_counts(const Profiler& profiler, int64_t steps) {
  StepCounts c;
  c.steps = static_cast<double>(std::max<int64_t>(1, steps));
  const std::vector<KernelRecord>& records = profiler.kernels();
  const bool device_run =
      std::any_of(records.begin(), records.end(), [](const KernelRecord& r) { return !r.device.is_cpu(); });
  for (const KernelRecord& r : records) {
    // An offload stall is a stream waiting on an event, not a launch; a CPU kernel of a device
    // run is host work (a copy to the host is recorded on its cpu destination).
    if (r.kernel == kOffloadStallKernel || r.kernel == kOffloadFetchWaitKernel) continue;
    if (device_run && r.device.is_cpu() && r.kernel != "copy_to_host") continue;
    c.launches += static_cast<double>(r.launches);  // an entry point's several kernels (or none)
    if (r.kernel == kGraphKernel) {
      c.graph_launches += 1;
      c.graph_nodes += static_cast<double>(r.graph_nodes);
    }
  }
  for (const HostSyncRecord& h : profiler.host_syncs()) {
    c.host_syncs += 1;
    c.by_kind[static_cast<size_t>(h.kind)] += 1;
  }
  c.launches /= c.steps;
  c.graph_launches /= c.steps;
  c.graph_nodes /= c.steps;
  c.host_syncs /= c.steps;
  for (double& k : c.by_kind) k /= c.steps;
  return c;
}

std::string format_step_counts(const StepCounts& c) {
  const auto count = [](double v) {
    return std::abs(v - std::round(v)) < 1e-9 ? format("%.0f", v) : format("%.1f", v);
  };
  std::string line = "per step: " + count(c.launches) + " launches, " + count(c.host_syncs) + " host syncs";
  if (c.graph_launches > 0) {
    const double others = c.launches - c.graph_launches;
    line = "per step: " + count(c.graph_launches) + (c.graph_launches == 1 ? " graph launch (" : " graph launches (") +
           count(c.graph_nodes) + " nodes)" +
           (others > 1e-9 ? " + " + count(others) + (std::abs(others - 1) < 1e-9 ? " launch" : " launches") : "") +
           ", " + count(c.host_syncs) + " host syncs";
  }
  std::string kinds;
  for (int k = 0; k < kNumHostSyncKinds; ++k)
    if (c.by_kind[k] > 0)
      kinds += (kinds.empty() ? "" : ", ") + std::string(host_sync_name(static_cast<HostSyncKind>(k))) + " " +
               count(c.by_kind[k]);
  return kinds.empty() ? line : line + " (" + kinds + ")";
}

void print_table(std::ostream& os, const Profiler& profiler, int top) {
  const std::vector<KernelSummary> kernels = summarize_kernels(profiler);
  const double all_ns = static_cast<double>(total_kernel_ns(profiler));
  std::set<std::string> devices;
  for (const KernelSummary& s : kernels) devices.insert(s.device.str());
  os << "profile: " << profiler.kernels().size() << " kernel runs, "
     << format("%.3f", all_ns * 1e-6) << " ms in kernels of " << format("%.3f", profiler.wall_ns() * 1e-6)
     << " ms profiled (" << format("%.1f", profiler.wall_ns() > 0 ? 100 * all_ns / profiler.wall_ns() : 0)
     << " %); " << profiler.host_syncs().size() << " host syncs\n";
  for (const std::string& d : devices) {
    const Roof& roof = roof_for(Device(d));
    os << "roof " << d << ": " << format("%.1f", roof.bytes_per_s * 1e-9) << " GB/s, "
       << format("%.1f", roof.flops_per_s * 1e-9) << " GFLOP/s f32";
    for (const auto& [dt, rate] : roof.flops_by_dtype) os << ", " << format("%.1f", rate * 1e-9) << " " << dt;
    os << " (" << roof.source << ")\n";
  }
  for (const auto& [device, source] : profiler.time_sources()) os << device << " kernel times: " << source << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %-5s %-7s %7s %10s %10s %6s %9s %9s %8s %7s\n", "kernel", "dtype", "device",
                "calls", "total ms", "mean us", "share", "GB/s", "GFLOP/s", "bound", "% roof");
  os << line;
  int shown = 0;
  for (const KernelSummary& s : kernels) {
    if (shown++ == top) {
      os << "  ... " << kernels.size() - static_cast<size_t>(top) << " more kernels\n";
      break;
    }
    const std::string device = s.device.str() + (s.emulated ? "*" : "");
    const std::string kernel = s.kernel + (s.stream == StreamKind::Copy ? " [copy]" : "");
    std::snprintf(line, sizeof line, "%-28s %-5s %-7s %7lld %10.3f %10.2f %5.1f%% %9.2f %9.2f %8s %6.1f%%\n",
                  kernel.c_str(), dtype_name(s.dtype), device.c_str(), static_cast<long long>(s.calls), s.total_ns * 1e-6,
                  s.total_ns * 1e-3 / static_cast<double>(s.calls), 100 * s.share, s.gbytes_per_s, s.gflops_per_s,
                  s.compute_bound ? "compute" : "memory", 100 * s.roof_fraction);
    os << line;
  }
  const auto any = [&](auto pred) { return std::any_of(kernels.begin(), kernels.end(), pred); };
  if (any([](const KernelSummary& s) { return s.emulated && !s.device.is_meta(); }))
    os << "  * cuda emulated on the host by simt: host times, not GPU times; % roof against the host's roof\n";
  if (any([](const KernelSummary& s) { return s.device.is_meta(); }))
    os << "  * meta: a dry run, no kernel ran; its times and % roof mean nothing (--predict prices the records)\n";
  // A memory-bound kernel over its roof; a compute-bound one over 100 % only beat the measured SGEMM.
  if (any([](const KernelSummary& s) { return s.roof_fraction > 1 && !s.compute_bound; }))
    os << "  % roof over 100: the kernel's data was served from cache, faster than the memory roof\n";
  for (const CopySummary& c : summarize_copies(profiler)) {
    std::snprintf(line, sizeof line,
                  "copy stream %s%s: %lld %s, %.3f MB, %.3f ms, %.1f %% hidden behind compute\n",
                  c.device.str().c_str(), c.emulated ? "*" : "", static_cast<long long>(c.copies),
                  c.copies == 1 ? "copy" : "copies", c.bytes * 1e-6,
                  c.copy_ns * 1e-6, 100 * c.hidden_fraction());
    os << line;
  }
  for (const auto& [title, rows] : {std::pair{"op", summarize_ops(profiler)},
                                    std::pair{"phase", summarize_phases(profiler)}}) {
    std::snprintf(line, sizeof line, "%-28s %7s %10s %6s\n", title, "kernels", "total ms", "share");
    os << line;
    for (const GroupSummary& g : rows) {
      std::snprintf(line, sizeof line, "%-28s %7lld %10.3f %5.1f%%\n", g.key.c_str(),
                    static_cast<long long>(g.calls), g.total_ns * 1e-6, all_ns > 0 ? 100 * g.total_ns / all_ns : 0);
      os << line;
    }
  }
}

void write_trace(const std::string& path, const Profiler& profiler) {
  using nlohmann::json;
  json events = json::array();
  const auto us = [](int64_t ns) { return static_cast<double>(ns) * 1e-3; };
  std::set<int> tracks;
  for (const SpanRecord& s : profiler.spans()) {
    tracks.insert(s.track);
    json args = {{"phase", phase_name(s.phase)}};
    if (s.node >= 0) args["node"] = s.node;
    if (s.segment >= 0) args["segment"] = s.segment;
    events.push_back({{"name", s.name}, {"cat", s.kind == SpanRecord::Kind::Op ? "op" : "phase"}, {"ph", "X"},
                      {"ts", us(s.start_ns)}, {"dur", us(s.dur_ns)}, {"pid", 1}, {"tid", s.track}, {"args", args}});
  }
  for (const KernelRecord& r : profiler.kernels()) {
    tracks.insert(r.track);
    json args = {{"op", r.op + (r.op_backward ? ".backward" : "")},
                 {"phase", phase_name(r.phase)},
                 {"shapes", r.shapes},
                 {"dtype", dtype_name(r.dtype)},
                 {"device", r.device.str()},
                 {"flops", r.cost.flops},
                 {"bytes_read", r.cost.bytes_read},
                 {"bytes_written", r.cost.bytes_written},
                 {"stream", stream_kind_name(r.stream)}};
    if (r.stream == StreamKind::Copy) args["bytes"] = r.cost.bytes_written;  // each byte crosses once
    if (r.node >= 0) args["node"] = r.node;
    if (r.segment >= 0) args["segment"] = r.segment;
    if (!r.scope.empty()) args["scope"] = r.scope;
    if (r.emulated) args["emulated"] = true;
    events.push_back({{"name", r.kernel}, {"cat", r.stream == StreamKind::Copy ? "copy" : "kernel"}, {"ph", "X"},
                      {"ts", us(r.start_ns)},
                      {"dur", us(r.dur_ns)}, {"pid", 1}, {"tid", r.track}, {"args", args}});
    json memory = json::object();
    for (int c = 0; c < kNumCategories; ++c) memory[category_name(static_cast<Category>(c))] = r.memory[c];
    events.push_back({{"name", "memory " + r.device.str()}, {"ph", "C"}, {"ts", us(r.start_ns)}, {"pid", 1}, {"tid", 0},
                      {"args", memory}});
  }
  for (const HostSyncRecord& h : profiler.host_syncs()) {  // an instant on the host thread that waited
    tracks.insert(h.track);
    json args = {{"device", h.device.str()}, {"op", h.op + (h.op_backward ? ".backward" : "")},
                 {"phase", phase_name(h.phase)}};
    events.push_back({{"name", std::string("host sync: ") + host_sync_name(h.kind)}, {"cat", "host_sync"},
                      {"ph", "i"}, {"s", "t"}, {"ts", us(h.at_ns)}, {"pid", 1}, {"tid", h.track}, {"args", args}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"ts", 0}, {"pid", 1}, {"tid", 0},
                    {"args", {{"name", "reel"}}}});
  for (int t : tracks) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"ts", 0}, {"pid", 1}, {"tid", t},
                      {"args", {{"name", profiler.track_name(t)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"ts", 0}, {"pid", 1}, {"tid", t},
                      {"args", {{"sort_index", sort_index(t)}}}});
  }
  const json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  std::ofstream out(path);
  REEL_CHECK(out.good(), "Profiler: cannot write the trace to ", path);
  out << trace.dump() << "\n";
  REEL_CHECK(out.good(), "Profiler: writing the trace to ", path, " failed");
}

}  // namespace reel::profile
