// The profiler's collection side (core/profile.h): the session's buffers, the thread's context
// (phase, op, scope), the scopes that set it, kernel runs timed on the host or on a device clock
// (its marks, or its activity log where it keeps a whole one: core/profile_activity.h), and each
// run's launches from the backend's counter (nested runs counted once).
#include "core/profile.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

#include "core/device_backend.h"
#include "core/error.h"
#include "core/memory_timeline.h"

#if defined(REEL_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace reel::profile {

namespace detail {
std::atomic<bool> g_enabled{false};
std::atomic<int> g_tracking{0};
}

namespace {

using SteadyClock = std::chrono::steady_clock;

// What the kernels of this thread belong to right now: the public part and the user scope's name.
struct ThreadContext : Context {
  const std::string* scope = nullptr;
};
thread_local ThreadContext t_context;

// A CUDA kernel's record waits for its device's marks until the profiler stops.
struct PendingKernel {
  size_t index;  // in Session::kernels
  DeviceClock* clock;
  int64_t start_mark, end_mark;
  uint64_t run;  // its id in the clock's activity log
};
// The first mark of a device in a session and the host time it was taken: device times are
// placed on the host timeline from it.
struct DeviceOrigin {
  int64_t mark;
  int64_t host_ns;
  Device device;
};

struct Session {
  std::mutex mutex;
  SteadyClock::time_point origin;
  std::vector<KernelRecord> kernels;
  std::vector<SpanRecord> spans;
  std::vector<HostSyncRecord> host_syncs;
  std::vector<PendingKernel> pending;
  std::map<DeviceClock*, DeviceOrigin> device_origins;
  std::atomic<int> next_track{0};
  uint64_t next_run = 0;  // kernel runs on a device clock so far: their ids for its activity log
  bool open = false;  // a Profiler exists
  uint64_t generation = 0;            // counts Profilers: an AsyncSpan ends on its own one's clock
  std::vector<int64_t> lane_end_ns;   // AsyncSpan lanes: when each one's last span ended
};
Session& session() {
  static Session s;
  return s;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - session().origin).count();
}

int this_thread_track() {
  thread_local const int track = session().next_track.fetch_add(1);
  return track;
}

void push_span(SpanRecord::Kind kind, std::string name, int64_t start_ns) {
  SpanRecord s;
  s.kind = kind;
  s.name = std::move(name);
  s.phase = t_context.phase;
  s.segment = t_context.segment;
  s.node = kind == SpanRecord::Kind::Op ? t_context.node : -1;
  s.start_ns = start_ns;
  s.dur_ns = now_ns() - start_ns;
  s.track = this_thread_track();
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  ses.spans.push_back(std::move(s));
}

std::string phase_span_name(Phase phase, int segment) {
  if (phase == Phase::Replay) return "replay segment " + std::to_string(segment);
  return phase_name(phase);
}

void nvtx_push([[maybe_unused]] const char* name) {
#if defined(REEL_NVTX)
  nvtxRangePushA(name);
#endif
}
void nvtx_pop() {
#if defined(REEL_NVTX)
  nvtxRangePop();
#endif
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::None: return "none";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Replay: return "replay";
    case Phase::Optimizer: return "optimizer";
    case Phase::User: return "user";
  }
  return "?";
}

Context current_context() { return t_context; }

const char* host_sync_name(HostSyncKind kind) {
  switch (kind) {
    case HostSyncKind::CopyToHost: return "copy to host";
    case HostSyncKind::CopyFromHost: return "blocking copy from host";
    case HostSyncKind::StreamSync: return "stream synchronize";
    case HostSyncKind::EventSync: return "event synchronize";
  }
  return "?";
}

void record_host_sync(HostSyncKind kind, Device device) {
  if (!enabled() || device.is_cpu()) return;
  const ThreadContext& c = t_context;
  HostSyncRecord r;
  r.kind = kind;
  r.device = device;
  r.op = c.op ? c.op : "";
  r.op_backward = c.op_backward;
  r.phase = c.effective_phase();
  r.at_ns = now_ns();
  r.track = this_thread_track();
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  if (ses.open) ses.host_syncs.push_back(std::move(r));
}

// ---- kernel runs --------------------------------------------------------------------------------

GraphCaptureScope::GraphCaptureScope() : previous_(detail::t_capture) { detail::t_capture = this; }
GraphCaptureScope::~GraphCaptureScope() { detail::t_capture = previous_; }
GraphCaptureScope* GraphCaptureScope::current() { return detail::t_capture; }

namespace {
std::atomic<int64_t (*)()> g_launch_counter{nullptr};
thread_local KernelRun* t_current_run = nullptr;  // the innermost KernelRun alive on this thread
}  // namespace

void set_launch_counter(int64_t (*issued)()) { g_launch_counter.store(issued, std::memory_order_relaxed); }

KernelRun::KernelRun(const char* kernel, Device device, DType dtype, std::string shapes, KernelCost cost,
                     StreamKind stream) {
  // A cpu run is one launch: the host's work, or a copy to the host recorded on its destination.
  if (int64_t (*issued)() = g_launch_counter.load(std::memory_order_relaxed); issued && !device.is_cpu())
    issued_before_ = issued();
  parent_ = t_current_run;
  t_current_run = this;
  if (GraphCaptureScope* capture = detail::t_capture) {  // captured into a graph, not run: priced at replay
    captured_ = true;
    capture->cost_.flops += cost.flops;
    capture->cost_.bytes_read += cost.bytes_read;
    capture->cost_.bytes_written += cost.bytes_written;
    captured_index_ = capture->runs_.size();
    capture->runs_.push_back({kernel, dtype, stream, cost});
    return;
  }
  const ThreadContext& c = t_context;
  record_.kernel = kernel;
  record_.op = c.op ? c.op : "";
  record_.op_backward = c.op_backward;
  record_.node = c.node;
  record_.phase = c.effective_phase();
  record_.segment = c.segment;
  if (c.scope) record_.scope = *c.scope;
  record_.shapes = std::move(shapes);
  record_.dtype = dtype;
  record_.device = device;
  record_.stream = stream;
  record_.cost = cost;
  const MemoryStats mem = memory_stats(device);
  for (int i = 0; i < kNumCategories; ++i) record_.memory[i] = mem.by_category[i].current_bytes;
  if (!device.is_cpu()) clock_ = backend_for(device).clock();
  if (clock_) {
    record_.emulated = clock_->emulated();
    record_.track = (stream == StreamKind::Copy ? kCopyTrack : kDeviceTrack) + device.index;
    Session& ses = session();
    {
      std::lock_guard<std::mutex> lock(ses.mutex);
      if (!ses.device_origins.count(clock_))
        ses.device_origins[clock_] = DeviceOrigin{clock_->mark(StreamKind::Compute), now_ns(), device};
      start_mark_ = clock_->mark(stream);
      run_ = ++ses.next_run;
    }
    clock_->begin_run(run_);
  } else {
    record_.track = this_thread_track();
    record_.start_ns = now_ns();
  }
}

KernelRun::~KernelRun() {
  t_current_run = parent_;
  int64_t launches = 1;  // without a counter: one a run
  if (issued_before_ >= 0) {
    const int64_t issued = g_launch_counter.load(std::memory_order_relaxed)() - issued_before_;
    launches = issued - inner_launches_;
    if (parent_) parent_->inner_launches_ += issued;
  }
  if (captured_) {
    if (GraphCaptureScope* capture = detail::t_capture; capture && captured_index_ < capture->runs_.size())
      capture->runs_[captured_index_].launches = launches;
    return;
  }
  record_.launches = launches;
  Session& ses = session();
  if (clock_) {
    clock_->end_run();
    const int64_t end_mark = clock_->mark(record_.stream);
    std::lock_guard<std::mutex> lock(ses.mutex);
    ses.pending.push_back({ses.kernels.size(), clock_, start_mark_, end_mark, run_});
    ses.kernels.push_back(std::move(record_));
    return;
  }
  record_.dur_ns = now_ns() - record_.start_ns;
  std::lock_guard<std::mutex> lock(ses.mutex);
  ses.kernels.push_back(std::move(record_));
}

// ---- scopes -------------------------------------------------------------------------------------

namespace {
// The part of the context a scope replaces, restored when it closes.
thread_local std::vector<ThreadContext> t_saved;
}  // namespace

namespace detail {

ContextScope::ContextScope(const char* nvtx_name) {
  nvtx_push(nvtx_name);
  if (!tracking()) return;
  active_ = true;
  t_saved.push_back(t_context);
  spanned_ = enabled();
  if (spanned_) start_ns_ = now_ns();
  if (memory_timeline_collecting()) timeline_start_ns_ = reel::detail::memory_timeline_now_ns();
}

ContextScope::~ContextScope() {
  nvtx_pop();
  if (!active_) return;
  t_context = t_saved.back();
  t_saved.pop_back();
}

void ContextScope::record_span(SpanRecord::Kind kind, std::string name) const {
  push_span(kind, std::move(name), start_ns_);
}

}  // namespace detail

AsyncSpan AsyncSpan::begin(std::string name) {
  AsyncSpan span;
  if (!enabled()) return span;
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  if (!ses.open) return span;
  span.name_ = std::move(name);
  span.start_ns_ = now_ns();
  span.session_ = ses.generation;
  span.open_ = true;
  return span;
}

void AsyncSpan::end() {
  if (!open_) return;
  open_ = false;
  if (!enabled()) return;
  const int64_t end_ns = now_ns();
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  if (!ses.open || ses.generation != session_) return;  // another Profiler's clock, or none
  size_t lane = 0;
  while (lane < ses.lane_end_ns.size() && ses.lane_end_ns[lane] > start_ns_) ++lane;
  if (lane == ses.lane_end_ns.size()) ses.lane_end_ns.push_back(0);
  ses.lane_end_ns[lane] = end_ns;
  SpanRecord s;
  s.kind = SpanRecord::Kind::Phase;
  s.name = std::move(name_);
  s.start_ns = start_ns_;
  s.dur_ns = end_ns - start_ns_;
  s.track = kInFlightTrack + static_cast<int>(lane);
  ses.spans.push_back(std::move(s));
}

PhaseScope::PhaseScope(Phase phase, int segment) : ContextScope(phase_name(phase)) {
  if (!active()) return;
  t_context.phase = phase;
  t_context.segment = segment;
}

PhaseScope::~PhaseScope() {
  if (spanned()) record_span(SpanRecord::Kind::Phase, phase_span_name(t_context.phase, t_context.segment));
  if (timeline_start_ns() >= 0) reel::detail::record_memory_phase(t_context.phase, t_context.segment, timeline_start_ns());
}

OpScope::OpScope(const char* op, int64_t node, bool backward) : ContextScope(op) {
  if (!active()) return;
  t_context.op = op;
  t_context.node = node;
  t_context.op_backward = backward;
}

OpScope::~OpScope() {
  if (spanned())
    record_span(SpanRecord::Kind::Op, std::string(t_context.op) + (t_context.op_backward ? ".backward" : ""));
}

// name_ is set before the context points at it: the base is built first, so it is named by the
// argument.
Scope::Scope(const std::string& name) : ContextScope(name.c_str()), name_(name) {
  if (!active()) return;
  t_context.phase = Phase::User;
  t_context.segment = -1;
  t_context.scope = &name_;
}

Scope::~Scope() {
  if (spanned()) record_span(SpanRecord::Kind::Phase, name_);
}

}  // namespace reel::profile

namespace reel {

using profile::session;

Profiler::Profiler() {
  auto& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  REEL_CHECK(!ses.open, "Profiler: another Profiler is collecting; stop it first (one at a time)");
  ses.open = true;
  ses.kernels.clear();
  ses.spans.clear();
  ses.host_syncs.clear();
  ses.pending.clear();
  ses.device_origins.clear();
  ses.lane_end_ns.clear();
  ses.next_run = 0;
  ++ses.generation;
  ses.origin = profile::SteadyClock::now();
  running_ = true;
  profile::detail::g_tracking.fetch_add(1, std::memory_order_relaxed);
  profile::detail::g_enabled.store(true, std::memory_order_relaxed);
}

Profiler::~Profiler() {
  try {
    stop();
  } catch (...) {  // a device error while resolving times must not escape a destructor
  }
}

void Profiler::stop() {
  if (!running_) return;
  running_ = false;
  profile::detail::g_enabled.store(false, std::memory_order_relaxed);
  profile::detail::g_tracking.fetch_sub(1, std::memory_order_relaxed);
  auto& ses = session();
  wall_ns_ = profile::now_ns();
  std::lock_guard<std::mutex> lock(ses.mutex);
  ses.open = false;
  // Device marks: elapsed_ns waits for the device to pass them.
  for (const profile::PendingKernel& p : ses.pending) {
    const profile::DeviceOrigin& origin = ses.device_origins.at(p.clock);
    profile::KernelRecord& r = ses.kernels[p.index];
    r.start_ns = origin.host_ns + static_cast<int64_t>(p.clock->elapsed_ns(origin.mark, p.start_mark));
    r.dur_ns = static_cast<int64_t>(p.clock->elapsed_ns(p.start_mark, p.end_mark));
  }
  // Then each device's activity log, where it keeps a whole one, replaces the marks' times.
  time_sources_.clear();
  const int64_t session_steady_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(ses.origin.time_since_epoch()).count();
  for (auto& [clock, origin] : ses.device_origins) {
    const profile::ActivityLog log = clock->take_activity();
    if (clock->emulated()) {
      time_sources_[origin.device.str()] = origin.device.is_meta()
                                               ? "not run (the meta device's dry run): host times of nothing"
                                               : "emulated on the host by simt";
      continue;
    }
    std::vector<const profile::PendingKernel*> mine;
    std::vector<uint64_t> runs;
    for (const profile::PendingKernel& p : ses.pending)
      if (p.clock == clock) mine.push_back(&p), runs.push_back(p.run);
    const profile::ActivityTimes times = profile::resolve_activity(
        log, origin.device.index, runs, log.origin_steady_ns - session_steady_ns - log.origin_device_ns);
    time_sources_[origin.device.str()] = times.source;
    if (!times.used) continue;
    for (size_t i = 0; i < mine.size(); ++i) {
      profile::KernelRecord& r = ses.kernels[mine[i]->index];
      r.dur_ns = times.times[i].dur_ns;
      if (times.times[i].records > 0) r.start_ns = times.times[i].start_ns;  // else the marks' place
    }
  }
  for (auto& [clock, origin] : ses.device_origins) clock->reset();
  kernels_ = std::move(ses.kernels);
  spans_ = std::move(ses.spans);
  host_syncs_ = std::move(ses.host_syncs);
  ses.kernels.clear();
  ses.spans.clear();
  ses.host_syncs.clear();
  ses.pending.clear();
  ses.device_origins.clear();
}

std::string Profiler::track_name(int track) const {
  if (track < profile::kDeviceTrack) return track == 0 ? "host thread 0 (main)" : "host thread " + std::to_string(track);
  if (track >= profile::kInFlightTrack) return "in flight, lane " + std::to_string(track - profile::kInFlightTrack);
  const bool copy = track >= profile::kCopyTrack;
  const std::string name =
      "cuda:" + std::to_string(track - (copy ? profile::kCopyTrack : profile::kDeviceTrack)) + (copy ? " copy" : "");
  for (const profile::KernelRecord& r : kernels_)
    if (r.track == track && r.emulated) return name + " (emulated on the host)";
  return name + " stream";
}

}  // namespace reel
