// What a Profiler's records (core/profile.h, which records) become: a table in the terminal that
// places every kernel against its device's roof, and a Chrome trace-event file (Perfetto UI,
// chrome://tracing). Part of report/ (reel_report), the renderers' layer above autograd; the names
// stay in `reel::profile`.
#pragma once
#include <array>
#include <cstdint>
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
// it. 0 when the roof or the time is unknown. The compute roof is `dtype`'s (Roof::flops_for).
struct RoofPlacement {
  double fraction = 0;
  bool compute_bound = false;
};
RoofPlacement place_on_roof(const Roof& roof, double bytes, double flops, double seconds,
                            DType dtype = DType::f32);

// One row of the kernel table: every run of one kernel in one dtype on one stream of one device.
struct KernelSummary {
  std::string kernel;
  Device device;
  DType dtype = DType::f32;  // the kernel's element type (its bytes are at this width)
  StreamKind stream = StreamKind::Compute;
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

// A span of time on one clock, [start_ns, end_ns).
struct Interval {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};
// The length of the union of `intervals` (overlaps counted once).
int64_t covered_ns(std::vector<Interval> intervals);
// How much of the time `copies` cover is also covered by `compute`: the length of the union of the
// copies intersected with the union of the compute spans. Pure: intervals in, nanoseconds out.
int64_t hidden_ns(std::vector<Interval> copies, std::vector<Interval> compute);

// The copy stream of one device: its copies, their bytes, the time they took (the union of their
// spans) and how much of that the device's compute stream was busy too (hidden behind compute:
// overlap with the compute stream's records on the same device, by the records' times).
struct CopySummary {
  Device device;
  bool emulated = false;
  int64_t copies = 0;
  int64_t bytes = 0;      // moved over the host link, each copy's once
  int64_t copy_ns = 0;
  int64_t hidden_ns = 0;  // <= copy_ns
  double hidden_fraction() const { return copy_ns > 0 ? static_cast<double>(hidden_ns) / copy_ns : 0; }
};
// One row per device with records on its copy stream, in device order.
std::vector<CopySummary> summarize_copies(const Profiler& profiler);

// What a GPU step is made of beside its kernels' time: how many launches (each record's
// KernelRecord::launches: the kernels, cuBLAS and cuDNN calls, copies and memsets its entry point
// issued, copies to and from the host included: each one an API call and a launch floor) and how many host
// syncs (core/profile.h: HostSyncRecord) the records hold, divided by the `steps` they cover. A run
// on the cpu alone has no host syncs; its launches are its kernel runs. A CUDA graph's launch
// (kGraphKernel) is one launch, counted in graph_launches too, its nodes in graph_nodes.
struct StepCounts {
  double steps = 1;
  double launches = 0;                              // per step (graph launches included)
  double graph_launches = 0;                        // per step
  double graph_nodes = 0;                           // per step: the nodes those launches ran
  double host_syncs = 0;                            // per step
  std::array<double, kNumHostSyncKinds> by_kind{};  // per step, by HostSyncKind
};
StepCounts step_counts(const Profiler& profiler, int64_t steps);
// "per step: 142 launches, 9 host syncs (copy to host 9)": one line a script can read (counts that
// are not whole numbers, when the steps differ, with one decimal). With graph launches:
// "per step: 1 graph launch (412 nodes), 0 host syncs", and "... (412 nodes) + 2 launches, ..."
// when other launches (copies before a replay) remain beside it.
std::string format_step_counts(const StepCounts& counts);

// Prints the roofs, where each device's kernel times came from (Profiler::time_sources), the kernel
// table (the `top` largest rows; a row on a copy stream is marked `[copy]`), a line per device with
// copies on its copy stream (copy time and the fraction hidden behind compute), the op table and the
// phase table; the first line also counts the host syncs.
void print_table(std::ostream& os, const Profiler& profiler, int top = 20);

// Writes the records as Chrome trace-event JSON: one track per host thread and device stream (a
// device's copy stream right below its compute stream, each copy a span with its bytes), phase and
// op spans enclosing their kernels, a counter track of memory by category per device, and each host
// sync as an instant ("host sync: copy to host") on the host thread that waited.
// reel::Error when the file cannot be written.
void write_trace(const std::string& path, const Profiler& profiler);

}  // namespace reel::profile
