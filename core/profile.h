// Kernel-level profiling: one record per kernel run (what ran, on which device, inside which op,
// tape node and phase of the step, how long, how many bytes and FLOPs, how many device launches it
// issued: set_launch_counter), spans for the ops and
// phases around them, and reel::Profiler, the scope that collects them.
//
// Off (no Profiler alive, no CUDA graph captured on the thread) every hook costs one predictable
// branch on a relaxed atomic load and a thread-local pointer (profile::costing()). While a thread
// captures (GraphCaptureScope) a kernel run records nothing and is kept as one of the capture's
// runs, which the graph's replay record carries for the predictor (core/kernel_price.h). The
// scopes' context (phase, segment, op, node) is also kept while a MemoryTimeline collects, which
// stamps it on the allocator's events (core/memory_timeline.h).
// The hooks are placed once: kernel entry points time their backend call through
// REEL_DEVICE_DISPATCH (kernels/dispatch.h) with the cost written next to them; the tape opens
// op spans (autograd/tape.cpp) and the replay, backward and optimizer phases; core times its own
// copies and fills, each asynchronous copy (core/stream.h: copy_async) on the stream it was
// enqueued on, and each host sync (a wait of the host for a device: HostSyncRecord). Core only records: the reports (a table against the device's roof, a Chrome
// trace) are in report/profile.h, a layer above.
//
// Times: CPU kernels by a steady host clock around the call. CUDA kernels by markers the device
// records on its stream (cudaEvent pairs), resolved when the profiler stops; on a GPU these are
// device times. Where the device clock also keeps an activity log (CUPTI in the nvcc build, when
// it initialises) its records replace the markers' times (core/profile_activity.h); when the log is
// not whole, the markers' times stay and Profiler::time_source says why. In the emulated build the
// markers read the host clock and the records say `emulated`, so no one takes them for GPU times.
// A copy on the copy stream is timed by markers enqueued on the copy stream around it, so its span
// is when that stream ran it, beside (or overlapping) the compute stream's kernels; in the emulated
// build the copy stream's work runs when something waits for it, and its span is then.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/profile_activity.h"
#include "core/stream.h"

namespace reel::profile {

// What a kernel must move and compute at least once: the basis of GB/s, GFLOP/s and the roofline.
struct KernelCost {
  int64_t flops = 0;          // floating-point operations; a multiply-add counts 2
  int64_t bytes_read = 0;     // every input element read once
  int64_t bytes_written = 0;  // every output element written once
  const char* variant = nullptr;  // the kernel's op where one kernel serves several ("gelu", "sum")
  int64_t bytes() const { return bytes_read + bytes_written; }
};

// Where in a training step a kernel ran. Forward is any op run outside the other phases.
enum class Phase : uint8_t { None, Forward, Backward, Replay, Optimizer, User };
const char* phase_name(Phase phase);

// One kernel run a capture saw (GraphCaptureScope): what KernelRecord would have said of it.
struct CapturedRun {
  std::string kernel;
  DType dtype = DType::f32;
  StreamKind stream = StreamKind::Compute;
  KernelCost cost;
  int64_t launches = 1;  // the graph nodes it made (KernelRecord::launches)
};

// Device launches: what a kernel entry point issued to its device's streams (kernel launches, each
// cuBLAS or cuDNN call, copies and memsets, a graph's launch), counted per record. The CUDA
// backend sets the counter where it can count (the emulated build: kernels/simt counts the work
// this thread issues, simt::work_issued); without one each record counts as one launch.
void set_launch_counter(int64_t (*issued)());

struct KernelRecord {
  std::string kernel;    // the backend kernel, e.g. "layernorm_forward"
  std::string op;        // the tape op running it ("layernorm"), empty outside ops
  bool op_backward = false;  // inside the op's backward rule (else its forward)
  int64_t node = -1;     // the op's position on the tape, -1 when not recorded
  Phase phase = Phase::None;
  int segment = -1;      // Phase::Replay: the checkpoint segment being replayed
  std::string scope;     // the innermost user scope's name, empty if none
  std::string shapes;    // the tensor arguments' shapes, "(64, 128) (128)"
  DType dtype = DType::f32;
  Device device;
  StreamKind stream = StreamKind::Compute;  // the device stream it ran on; Copy for copy_async there
  bool emulated = false; // a CUDA kernel run on the host by the simt emulator: host time
  KernelCost cost;
  int64_t start_ns = 0;  // since the profiler started
  int64_t dur_ns = 0;
  int track = 0;         // host thread track (0, 1, ...), kDeviceTrack or kCopyTrack + device index
  std::array<int64_t, kNumCategories> memory{};  // bytes in use by category on the device at launch
  // The device launches the run issued (see set_launch_counter): an entry point may launch several
  // kernels (a GEMM and a reduction, a multi-tensor list in slices), or none (an empty tensor). A
  // record inside another counts its own launches only.
  int64_t launches = 1;
  // A CUDA graph's launch (core/graph.h: CudaGraph::replay) is one record, kernel kGraphKernel, of
  // this many nodes (its cost: the captured kernels' costs summed); 0: one kernel.
  int64_t graph_nodes = 0;
  // A graph launch's captured kernel runs, each as its own launch would have recorded it (kernel,
  // dtype, stream, cost): what the predictor prices node by node (core/kernel_price.h). Shared by
  // every replay of one graph; null for a kernel, or a graph captured while nothing was profiled.
  std::shared_ptr<const std::vector<CapturedRun>> graph_runs;
};
inline constexpr const char* kGraphKernel = "cuda_graph";

// A host sync: a point where the host waits for a device, so it cannot run ahead of the GPU and a
// step costs its host work plus its kernels rather than the larger of the two. Recorded by core
// where the wait happens, for every device but the cpu (meta too: it is a CUDA device that
// computes nothing, and its dry run must count what a GPU step would):
enum class HostSyncKind : uint8_t {
  CopyToHost,    // Tensor::to(cpu) of a device tensor: the host waits for the stream, then the copy
  CopyFromHost,  // a blocking copy from pageable host memory: CUDA synchronizes the stream before it
  StreamSync,    // Stream::synchronize()
  EventSync,     // Event::synchronize() of a recorded event
};
constexpr int kNumHostSyncKinds = 4;
const char* host_sync_name(HostSyncKind kind);  // "copy to host", ...
struct HostSyncRecord {
  HostSyncKind kind = HostSyncKind::CopyToHost;
  Device device;         // the device waited for
  std::string op;        // the tape op that waited, empty outside ops
  bool op_backward = false;
  Phase phase = Phase::None;
  int64_t at_ns = 0;     // since the profiler started
  int track = 0;         // the host thread's track
};
// Records a host sync on `device` while a Profiler collects (nothing for the cpu, or when off).
void record_host_sync(HostSyncKind kind, Device device);

// An op or phase around kernels, on the host thread that ran it.
struct SpanRecord {
  enum class Kind : uint8_t { Phase, Op };
  Kind kind = Kind::Op;
  std::string name;      // "layernorm", "layernorm.backward", "replay segment 3", "optimizer", a scope
  Phase phase = Phase::None;
  int segment = -1;
  int64_t node = -1;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int track = 0;
};

// A device's peaks: the memory roof (bytes/s) and the compute roof (FLOP/s) of each dtype. A kernel
// of arithmetic intensity I (FLOP per byte) in dtype t can reach at most
// min(flops_for(t), I * bytes_per_s). The compute roof differs by dtype: a GPU's tensor cores run
// bf16/f16 at many times its f32 rate and f64 at a fraction; a CPU's bf16 GEMM runs at whatever its
// instructions allow (measured).
struct Roof {
  double bytes_per_s = 0;
  double flops_per_s = 0;  // f32, and any dtype without an entry below
  std::string source;      // how it was found, printed with the table
  std::vector<std::pair<DType, double>> flops_by_dtype;  // the other dtypes' compute roofs (FLOP/s)
  double flops_for(DType dtype) const {
    for (const auto& [dt, rate] : flops_by_dtype)
      if (dt == dtype) return rate;
    return flops_per_s;
  }
};
constexpr int kDeviceTrack = 1000;  // track of CUDA device i's compute stream: kDeviceTrack + i
constexpr int kCopyTrack = 1500;    // track of CUDA device i's copy stream: kCopyTrack + i
constexpr int kInFlightTrack = 2000;  // lane i of the work in flight (AsyncSpan): kInFlightTrack + i

// Timestamps taken on a device's own stream, for devices whose kernels run asynchronously.
// Registered by the device's backend (DeviceBackend::clock(), core/device_backend.h).
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  virtual bool emulated() const = 0;
  // Enqueues a timestamp on the device's stream `stream`; returns its id. Marks of both streams are
  // on one clock: elapsed_ns may take one of each.
  virtual int64_t mark(StreamKind stream) = 0;
  // Nanoseconds from mark `from` to mark `to`, once the device has passed both (it waits for them).
  virtual double elapsed_ns(int64_t from, int64_t to) = 0;
  // Releases every mark.
  virtual void reset() = 0;
  // The device's activity log (CUPTI), beside the marks. Each kernel run is bracketed on its
  // launching thread by begin_run(its id in the session) after its start mark and end_run() before
  // its end mark. take_activity() is called once per session by Profiler::stop(), after every
  // mark resolved (the device has finished), and ends the log's session. Default: no log.
  virtual void begin_run(uint64_t run) { (void)run; }
  virtual void end_run() {}
  virtual ActivityLog take_activity() {
    ActivityLog log;
    log.unavailable = "this backend keeps no activity log";
    return log;
  }
};

class GraphCaptureScope;
namespace detail {
extern std::atomic<bool> g_enabled;
extern std::atomic<int> g_tracking;  // collectors alive that read the context: Profiler, MemoryTimeline
inline thread_local GraphCaptureScope* t_capture = nullptr;  // this thread's innermost capture
}
// True while a Profiler collects: kernel records and spans.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
// True while kernel runs are wanted: a Profiler collects, or this thread captures a CUDA graph
// (the capture keeps each run's cost for the predictor whether or not a Profiler sees it). The
// dispatch builds a KernelRun only then.
inline bool costing() { return enabled() || detail::t_capture != nullptr; }
// True while a Profiler or a reel::MemoryTimeline (core/memory_timeline.h) collects: the scopes
// below then keep the thread's context, which both stamp on what they record.
inline bool tracking() { return detail::g_tracking.load(std::memory_order_relaxed) != 0; }

// Where this thread is in the step: what the scopes below set. Meaningful only while tracking().
struct Context {
  Phase phase = Phase::None;  // as set by the innermost PhaseScope or Scope
  int segment = -1;           // Phase::Replay: the checkpoint segment replayed
  const char* op = nullptr;   // the tape op running (its name, a static string), or nullptr
  int64_t node = -1;          // its position on the tape, -1 when not recorded
  bool op_backward = false;   // inside the op's backward rule
  // The phase a record is attributed to: an op run outside any phase is in the forward.
  Phase effective_phase() const { return phase != Phase::None ? phase : (op ? Phase::Forward : Phase::None); }
};
Context current_context();

// RAII around one kernel run; built by the dispatch only while costing(). `stream`: the device
// stream the work inside is enqueued on (copy_async passes the copy stream's kind); a device with a
// clock times it there, on that stream's track. While this thread captures a CUDA graph
// (GraphCaptureScope) nothing runs: no record is made; the run's cost is added to the capture's.
class KernelRun {
 public:
  KernelRun(const char* kernel, Device device, DType dtype, std::string shapes, KernelCost cost,
            StreamKind stream = StreamKind::Compute);
  ~KernelRun();
  KernelRun(const KernelRun&) = delete;
  KernelRun& operator=(const KernelRun&) = delete;
  // A graph launch's record: its node count and the kernel runs its capture saw.
  void set_graph(int64_t nodes, std::shared_ptr<const std::vector<CapturedRun>> runs) {
    record_.graph_nodes = nodes;
    record_.graph_runs = std::move(runs);
  }

 private:
  bool captured_ = false;  // made during a capture: records nothing
  size_t captured_index_ = 0;  // its place in the capture's runs()
  KernelRecord record_;
  KernelRun* parent_ = nullptr;   // the run this one is inside, on this thread
  int64_t issued_before_ = -1;    // the launch counter at the start (-1: no counter)
  int64_t inner_launches_ = 0;    // launches of the runs inside this one
  DeviceClock* clock_ = nullptr;
  int64_t start_mark_ = -1;
  uint64_t run_ = 0;  // its id for the device's activity log
};

// RAII (core/graph.h's CudaGraph::capture): while it lives on this thread, KernelRun records
// nothing; it keeps each run it sees (the kernels captured) in runs() and sums their costs into cost().
class GraphCaptureScope {
 public:
  GraphCaptureScope();
  ~GraphCaptureScope();
  GraphCaptureScope(const GraphCaptureScope&) = delete;
  GraphCaptureScope& operator=(const GraphCaptureScope&) = delete;
  const KernelCost& cost() const { return cost_; }
  const std::vector<CapturedRun>& runs() const { return runs_; }
  static GraphCaptureScope* current();  // this thread's, or null

 private:
  friend class KernelRun;
  KernelCost cost_;
  std::vector<CapturedRun> runs_;
  GraphCaptureScope* previous_;
};

namespace detail {
// What the scopes below share: an NVTX range (nvcc build) and, while tracking(), the thread's
// context saved on entry and restored on exit. A derived scope sets its fields of the context
// when active() and, when spanned() (a Profiler collected as it opened), records its span in its
// destructor, before this one restores the context.
class ContextScope {
 public:
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 protected:
  explicit ContextScope(const char* nvtx_name);
  ~ContextScope();
  bool active() const { return active_; }
  bool spanned() const { return spanned_; }
  void record_span(SpanRecord::Kind kind, std::string name) const;
  // When it opened on a MemoryTimeline's clock, -1 when none collected then.
  int64_t timeline_start_ns() const { return timeline_start_ns_; }

 private:
  bool active_ = false;
  bool spanned_ = false;
  int64_t timeline_start_ns_ = -1;
  int64_t start_ns_ = 0;
};
}  // namespace detail

// RAII: the ops run inside are in `phase` (Replay: of checkpoint segment `segment`). A span
// named after the phase is recorded around them, for a Profiler and for a MemoryTimeline.
class PhaseScope : detail::ContextScope {
 public:
  explicit PhaseScope(Phase phase, int segment = -1);
  ~PhaseScope();
};

// RAII: the kernels run inside belong to tape op `op` (node `node`, -1 if not recorded), in its
// forward or its backward rule. Set by the tape; op authors do nothing.
class OpScope : detail::ContextScope {
 public:
  OpScope(const char* op, int64_t node, bool backward);
  ~OpScope();
};

// RAII for users: a named span ("eval", "data"); kernels inside are in Phase::User unless a
// phase inside says otherwise, and carry the name in KernelRecord::scope.
class Scope : detail::ContextScope {
 public:
  explicit Scope(const std::string& name);
  ~Scope();

 private:
  std::string name_;
};

// A span that does not nest in the thread's scopes: work in flight, such as a collective launched
// in the middle of backward and seen complete later. begin() takes the time, end() records the
// span (once) on a track of its own, lane kInFlightTrack + i: the first lane whose last span ended
// before this one began, so overlapping spans sit on separate lanes and a trace shows them beside
// the host thread's phases and ops. Recorded only when the same Profiler collected at begin() and
// at end(); otherwise begin() and end() cost a branch.
class AsyncSpan {
 public:
  AsyncSpan() = default;
  static AsyncSpan begin(std::string name);
  void end();
  bool open() const { return open_; }  // begun under a Profiler and not yet ended

 private:
  std::string name_;
  int64_t start_ns_ = 0;
  uint64_t session_ = 0;  // which Profiler's clock start_ns_ is on
  bool open_ = false;
};

}  // namespace reel::profile

namespace reel {

// Collects every kernel run, op span and phase span of this process from construction to stop()
// (or destruction). One at a time: a second one while one collects raises reel::Error.
//
//   reel::Profiler prof;
//   train_step();
//   prof.stop();
//   reel::profile::print_table(std::cout, prof);
//   reel::profile::write_trace("trace.json", prof);  // both in report/profile.h
class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Stops collecting, waits for the devices and resolves device times. Idempotent.
  void stop();
  bool running() const { return running_; }

  const std::vector<profile::KernelRecord>& kernels() const { return kernels_; }
  const std::vector<profile::SpanRecord>& spans() const { return spans_; }
  const std::vector<profile::HostSyncRecord>& host_syncs() const { return host_syncs_; }
  int64_t wall_ns() const { return wall_ns_; }  // from construction to stop()
  // Names of the host threads and device tracks that appear in the records: a CUDA device's compute
  // stream "cuda:0 stream", its copy stream "cuda:0 copy stream" (emulated: "(emulated on the host)").
  std::string track_name(int track) const;
  // How the kernel times of each device with a clock were taken, by device ("cuda:0"):
  // "CUPTI activity records", "cudaEvent pairs (CUPTI: <why not>)", "emulated on the host by simt".
  const std::map<std::string, std::string>& time_sources() const { return time_sources_; }

 private:
  bool running_ = false;
  int64_t wall_ns_ = 0;
  std::map<std::string, std::string> time_sources_;
  std::vector<profile::KernelRecord> kernels_;
  std::vector<profile::SpanRecord> spans_;
  std::vector<profile::HostSyncRecord> host_syncs_;
};

}  // namespace reel
