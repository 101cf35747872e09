// What a Profiler's records (core/profile.h, which records) become: a table in the terminal that
// places every kernel against its device's roof, and a Chrome trace-event file (Perfetto UI,
// chrome://tracing). Part of report/ (reel_report), the renderers' layer above autograd; the names
// stay in `reel::profile`.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "core/profile.h"

namespace reel::profile {

// The roof of `device`, from its backend (DeviceBackend::roof): measured once per process.
const Roof& roof_for(Device device);

// Where work of `bytes` and `flops` done in `seconds` sits under `roof`: the fraction of what is
// attainable at its arithmetic intensity (the memory slope below the ridge point, the flat compute
// roof above it; bytes/s against the memory roof for work without FLOPs), and which roof bounds
// it. 0 when the roof or the time is unknown.
struct RoofPlacement {
  double fraction = 0;
  bool compute_bound = false;
};
RoofPlacement place_on_roof(const Roof& roof, double bytes, double flops, double seconds);

// One row of the kernel table: every run of one kernel on one device.
struct KernelSummary {
  std::string kernel;
  Device device;
  bool emulated = false;
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t flops = 0, bytes = 0;
  double share = 0;         // of all kernel time in the records, in [0, 1]
  double gbytes_per_s = 0;  // achieved
  double gflops_per_s = 0;
  bool compute_bound = false;  // by arithmetic intensity against the roof's ridge point
  double roof_fraction = 0;    // achieved / attainable at this intensity (0 when unknown)
};
// Kernel rows, largest total time first; shares add up to 1.
std::vector<KernelSummary> summarize_kernels(const Profiler& profiler);

// Time of the kernels grouped by `key(record)`: (key, calls, total ns), largest first.
struct GroupSummary {
  std::string key;
  int64_t calls = 0;
  int64_t total_ns = 0;
};
std::vector<GroupSummary> summarize_ops(const Profiler& profiler);     // "layernorm", "matmul.backward"
std::vector<GroupSummary> summarize_phases(const Profiler& profiler);  // "forward", "replay", ...

// Prints the roofs, where each device's kernel times came from (Profiler::time_sources), the kernel
// table (the `top` largest rows), the op table and the phase table.
void print_table(std::ostream& os, const Profiler& profiler, int top = 20);

// Writes the records as Chrome trace-event JSON: one track per host thread and device stream,
// phase and op spans enclosing their kernels, a counter track of memory by category per device.
// reel::Error when the file cannot be written.
void write_trace(const std::string& path, const Profiler& profiler);

}  // namespace reel::profile
