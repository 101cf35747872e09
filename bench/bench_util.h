// Timing and table printing shared by the benchmarks in bench/: a wall-clock time that waits for
// the device, the median of repeated runs after a warm-up, and the kernel table (median ms, bytes
// moved, FLOPs, achieved GB/s and GFLOP/s) that bench_kernels and bench_nn_kernels print.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device_backend.h"
#include "core/tensor.h"

namespace reel::bench {

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

// One row per kernel: its median time and the bytes and FLOPs counted from the shapes.
class KernelTable {
 public:
  // Only kernels whose name contains `filter` are run ("": all).
  KernelTable(Device device, int repeats, std::string filter = "")
      : device_(device), repeats_(repeats), filter_(std::move(filter)) {}

  // Times fn; a reel::Error it throws (a kernel the device does not run) is printed in its row.
  void add(const std::string& name, double bytes, double flops, const std::function<void()>& fn) {
    if (name.find(filter_) == std::string::npos) return;
    try {
      rows_.push_back({name, median_ms(device_, repeats_, fn), bytes, flops, ""});
    } catch (const Error& e) {
      rows_.push_back({name, 0, bytes, flops, e.what()});
    }
  }

  // "<title> on <device>, median of <repeats> runs", then the table.
  void print(const char* title) const {
    std::printf("%s on %s, median of %d runs\n", title, device_.str().c_str(), repeats_);
    std::printf("%-38s %10s %10s %10s %10s %10s\n", "kernel", "ms", "MB", "GFLOP", "GB/s", "GFLOP/s");
    for (const Row& r : rows_) {
      if (!r.error.empty()) {
        std::printf("%-38s %s\n", r.name.c_str(), r.error.c_str());
        continue;
      }
      std::printf("%-38s %10.3f %10.1f %10.2f %10.1f %10.1f\n", r.name.c_str(), r.ms, r.bytes / 1e6, r.flops / 1e9,
                  r.bytes / r.ms / 1e6, r.flops / r.ms / 1e6);
    }
  }

 private:
  struct Row {
    std::string name;
    double ms, bytes, flops;
    std::string error;  // set when the device does not run this kernel (yet)
  };
  Device device_;
  int repeats_;
  std::string filter_;
  std::vector<Row> rows_;
};

}  // namespace reel::bench
