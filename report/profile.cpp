// The profiler's reports (report/profile.h): summaries, the terminal table, the trace file.
#include "report/profile.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "core/device_backend.h"
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

}  // namespace

RoofPlacement place_on_roof(const Roof& roof, double bytes, double flops, double seconds) {
  RoofPlacement p;
  if (roof.bytes_per_s <= 0 || roof.flops_per_s <= 0 || seconds <= 0) return p;
  if (flops <= 0) {
    p.fraction = bytes / seconds / roof.bytes_per_s;
    return p;
  }
  const double intensity = bytes > 0 ? flops / bytes : 1e30;
  p.compute_bound = intensity * roof.bytes_per_s >= roof.flops_per_s;
  p.fraction = flops / seconds / std::min(roof.flops_per_s, intensity * roof.bytes_per_s);
  return p;
}

std::vector<KernelSummary> summarize_kernels(const Profiler& profiler) {
  std::map<std::string, KernelSummary> rows;
  for (const KernelRecord& r : profiler.kernels()) {
    KernelSummary& s = rows[r.kernel + " @" + r.device.str()];
    s.kernel = r.kernel;
    s.device = r.device;
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
        place_on_roof(roof_for(s.device), static_cast<double>(s.bytes), static_cast<double>(s.flops), seconds);
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

void print_table(std::ostream& os, const Profiler& profiler, int top) {
  const std::vector<KernelSummary> kernels = summarize_kernels(profiler);
  const double all_ns = static_cast<double>(total_kernel_ns(profiler));
  std::set<std::string> devices;
  for (const KernelSummary& s : kernels) devices.insert(s.device.str());
  os << "profile: " << profiler.kernels().size() << " kernel runs, "
     << format("%.3f", all_ns * 1e-6) << " ms in kernels of " << format("%.3f", profiler.wall_ns() * 1e-6)
     << " ms profiled (" << format("%.1f", profiler.wall_ns() > 0 ? 100 * all_ns / profiler.wall_ns() : 0)
     << " %)\n";
  for (const std::string& d : devices) {
    const Roof& roof = roof_for(Device(d));
    os << "roof " << d << ": " << format("%.1f", roof.bytes_per_s * 1e-9) << " GB/s, "
       << format("%.1f", roof.flops_per_s * 1e-9) << " GFLOP/s (" << roof.source << ")\n";
  }
  for (const auto& [device, source] : profiler.time_sources()) os << device << " kernel times: " << source << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %-7s %7s %10s %10s %6s %9s %9s %8s %7s\n", "kernel", "device", "calls",
                "total ms", "mean us", "share", "GB/s", "GFLOP/s", "bound", "% roof");
  os << line;
  int shown = 0;
  for (const KernelSummary& s : kernels) {
    if (shown++ == top) {
      os << "  ... " << kernels.size() - static_cast<size_t>(top) << " more kernels\n";
      break;
    }
    const std::string device = s.device.str() + (s.emulated ? "*" : "");
    std::snprintf(line, sizeof line, "%-28s %-7s %7lld %10.3f %10.2f %5.1f%% %9.2f %9.2f %8s %6.1f%%\n",
                  s.kernel.c_str(), device.c_str(), static_cast<long long>(s.calls), s.total_ns * 1e-6,
                  s.total_ns * 1e-3 / static_cast<double>(s.calls), 100 * s.share, s.gbytes_per_s, s.gflops_per_s,
                  s.compute_bound ? "compute" : "memory", 100 * s.roof_fraction);
    os << line;
  }
  const auto any = [&](auto pred) { return std::any_of(kernels.begin(), kernels.end(), pred); };
  if (any([](const KernelSummary& s) { return s.emulated; }))
    os << "  * cuda emulated on the host by simt: host times, not GPU times; % roof against the host's roof\n";
  // A memory-bound kernel over its roof; a compute-bound one over 100 % only beat the measured SGEMM.
  if (any([](const KernelSummary& s) { return s.roof_fraction > 1 && !s.compute_bound; }))
    os << "  % roof over 100: the kernel's data was served from cache, faster than the memory roof\n";
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
                 {"bytes_written", r.cost.bytes_written}};
    if (r.node >= 0) args["node"] = r.node;
    if (r.segment >= 0) args["segment"] = r.segment;
    if (!r.scope.empty()) args["scope"] = r.scope;
    if (r.emulated) args["emulated"] = true;
    events.push_back({{"name", r.kernel}, {"cat", "kernel"}, {"ph", "X"}, {"ts", us(r.start_ns)},
                      {"dur", us(r.dur_ns)}, {"pid", 1}, {"tid", r.track}, {"args", args}});
    json memory = json::object();
    for (int c = 0; c < kNumCategories; ++c) memory[category_name(static_cast<Category>(c))] = r.memory[c];
    events.push_back({{"name", "memory " + r.device.str()}, {"ph", "C"}, {"ts", us(r.start_ns)}, {"pid", 1}, {"tid", 0},
                      {"args", memory}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"ts", 0}, {"pid", 1}, {"tid", 0},
                    {"args", {{"name", "reel"}}}});
  for (int t : tracks) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"ts", 0}, {"pid", 1}, {"tid", t},
                      {"args", {{"name", profiler.track_name(t)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"ts", 0}, {"pid", 1}, {"tid", t},
                      {"args", {{"sort_index", t}}}});
  }
  const json trace = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  std::ofstream out(path);
  REEL_CHECK(out.good(), "Profiler: cannot write the trace to ", path);
  out << trace.dump() << "\n";
  REEL_CHECK(out.good(), "Profiler: writing the trace to ", path, " failed");
}

}  // namespace reel::profile
