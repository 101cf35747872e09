// Timing and table printing shared by the benchmarks in bench/: bytes in MiB, a wall-clock time that waits for
// the device, the median of repeated runs after a warm-up, and the kernel table (median ms, bytes
// moved, FLOPs, achieved GB/s and GFLOP/s, % of the device's roof) that bench_kernels and
// bench_nn_kernels print. The bytes and FLOPs are not written here: they are the costs the kernel
// entry points give the profiler (profile::KernelCost), summed over the kernels a row's call runs.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device_backend.h"
#include "core/profile.h"
#include "core/tensor.h"
#include "report/profile.h"

namespace reel::bench {

// Bytes as "12.34 MiB", the unit the memory benchmarks' tables share.
inline std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// Milliseconds fn takes on `device`, from an idle device to the end of its queued work.
inline double timed_ms(Device device, const std::function<void()>& fn) {
  backend_for(device).synchronize();
  const auto start = std::chrono::steady_clock::now();
  fn();
  backend_for(device).synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The median of `ms` (upper median for an even count); ms not empty.
inline double median(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median time of `repeats` runs of fn after one untimed warm-up run (caches, allocator, lazy
// initialisation).
inline double median_ms(Device device, int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) ms.push_back(timed_ms(device, fn));
  return median(ms);
}

// What one call of fn runs, from a reel::Profiler's records: the summed cost of its kernels, their
// names in order of first run ("compare.gt, where"; "fill x4" for repeats), the dtype of the one
// doing the most FLOPs (its compute roof places the row) and whether any ran on an emulated CUDA
// device.
struct CallCost {
  double bytes = 0, flops = 0;
  DType dtype = DType::f32;
  std::string kernels;
  bool emulated = false;
  bool recorded = false;  // the call ran at least one profiled kernel
};
inline CallCost profiled_cost(const std::function<void()>& fn) {
  Profiler profiler;
  fn();
  profiler.stop();
  CallCost c;
  std::vector<std::pair<std::string, int>> names;
  int64_t most_flops = -1;
  for (const profile::KernelRecord& r : profiler.kernels()) {
    c.recorded = true;
    if (r.cost.flops > most_flops) most_flops = r.cost.flops, c.dtype = r.dtype;
    c.bytes += static_cast<double>(r.cost.bytes());
    c.flops += static_cast<double>(r.cost.flops);
    c.emulated = c.emulated || r.emulated;
    auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == r.kernel; });
    if (it == names.end())
      names.emplace_back(r.kernel, 1);
    else
      ++it->second;
  }
  for (const auto& [name, count] : names) {
    if (!c.kernels.empty()) c.kernels += ", ";
    c.kernels += name + (count > 1 ? " x" + std::to_string(count) : "");
  }
  return c;
}

// One row per benchmarked call: its median time and the bytes and FLOPs its kernels report to the
// profiler.
class KernelTable {
 public:
  // Only kernels whose name contains `filter` are run ("": all).
  KernelTable(Device device, int repeats, std::string filter = "")
      : device_(device), repeats_(repeats), filter_(std::move(filter)) {}

  // Runs fn once to warm up, once under a reel::Profiler for its kernels' cost, then `repeats`
  // timed runs with no profiler (their median is the row's time). A reel::Error it throws (a
  // kernel the device does not run) is printed in its row.
  void add(const std::string& name, const std::function<void()>& fn) { add_row(name, "", fn); }

  // As add, for a call that runs no profiled kernel (a backend function called directly): its
  // bytes and FLOPs are those of the row named `same_as`, which computes the same thing.
  void add_same_as(const std::string& name, const std::string& same_as, const std::function<void()>& fn) {
    add_row(name, same_as, fn);
  }

  // "<title> on <device>, median of <repeats> runs", the device's roof, then the table.
  void print(const char* title) const {
    std::printf("%s on %s, median of %d runs\n", title, device_.str().c_str(), repeats_);
    const profile::Roof& roof = profile::roof_for(device_);
    std::printf("roof %s: %.1f GB/s, %.1f GFLOP/s f32", device_.str().c_str(), roof.bytes_per_s * 1e-9,
                roof.flops_per_s * 1e-9);
    for (const auto& [dt, rate] : roof.flops_by_dtype) std::printf(", %.1f %s", rate * 1e-9, dtype_name(dt));
    std::printf(" (%s)\n", roof.source.c_str());
    std::printf("%-38s %10s %10s %10s %10s %10s %7s  %s\n", "kernel", "ms", "MB", "GFLOP", "GB/s", "GFLOP/s",
                "% roof", "kernels run");
    bool any_emulated = false, any_over = false;
    for (const Row& r : rows_) {
      if (!r.error.empty()) {
        std::printf("%-38s %s\n", r.name.c_str(), r.error.c_str());
        continue;
      }
      if (!r.cost.recorded) {
        std::printf("%-38s %10.3f %s\n", r.name.c_str(), r.ms, "(no profiled kernel: bytes and FLOPs unknown)");
        continue;
      }
      const profile::RoofPlacement placed =
          profile::place_on_roof(roof, r.cost.bytes, r.cost.flops, r.ms * 1e-3, r.cost.dtype);
      const double fraction = placed.fraction;
      any_emulated = any_emulated || r.cost.emulated;
      any_over = any_over || (fraction > 1 && !placed.compute_bound);
      const std::string name = r.name + (r.cost.emulated ? "*" : "");
      std::printf("%-38s %10.3f %10.1f %10.2f %10.1f %10.1f %6.1f%%  %s\n", name.c_str(), r.ms, r.cost.bytes / 1e6,
                  r.cost.flops / 1e9, r.cost.bytes / r.ms / 1e6, r.cost.flops / r.ms / 1e6, 100 * fraction,
                  r.cost.kernels.c_str());
    }
    if (any_emulated)
      std::printf("  * cuda emulated on the host by simt: host times, not GPU times; %% roof against the host's roof\n");
    if (any_over)  // a memory-bound row over its roof; a compute-bound one only beat the measured SGEMM
      std::printf("  %% roof over 100: the kernel's data was served from cache, faster than the memory roof\n");
  }

 private:
  struct Row {
    std::string name;
    double ms = 0;
    CallCost cost;
    std::string error;  // set when the device does not run this kernel (yet)
  };

  void add_row(const std::string& name, const std::string& same_as, const std::function<void()>& fn) {
    if (name.find(filter_) == std::string::npos) return;
    Row row;
    row.name = name;
    try {
      fn();  // warm-up: caches, allocator, lazy initialisation; not profiled, not timed
      if (same_as.empty()) {
        row.cost = profiled_cost(fn);
      } else {
        const auto it = std::find_if(rows_.begin(), rows_.end(), [&](const Row& r) { return r.name == same_as; });
        if (it != rows_.end()) {
          row.cost = it->cost;
          row.cost.kernels = "(cost of \"" + same_as + "\")";
        }
      }
      std::vector<double> ms;
      for (int i = 0; i < repeats_; ++i) ms.push_back(timed_ms(device_, fn));
      row.ms = median(ms);
    } catch (const Error& e) {
      row.error = e.what();
    }
    rows_.push_back(std::move(row));
  }

  Device device_;
  int repeats_;
  std::string filter_;
  std::vector<Row> rows_;
};

}  // namespace reel::bench
