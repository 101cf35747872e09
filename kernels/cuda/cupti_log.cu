// kernels/cuda/cupti_log.h: CUPTI's activity API, its buffers and records, turned into the
// profiler's ActivityLog. Compiled only in the nvcc flavour with libcupti (cmake/reel_cuda_sources.cmake).
#include "kernels/cuda/cupti_log.h"

#include <cupti.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace reel::kernels::cuda::cupti_log {

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;  // CUPTI's default size: fewer, larger hand-backs

// The kinds a session enables: the device work, the API calls (external correlation records are
// emitted with API records only) and the correlations themselves.
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

enum class State { Idle, Collecting, Taken, Failed };

struct Log {
  std::mutex mutex;
  State state = State::Idle;
  bool registered = false;
  profile::ActivityLog log;
};
Log& the_log() {
  static Log* log = new Log;  // never destroyed: CUPTI may hand back a buffer at exit
  return *log;
}

// Per thread: whether each open run pushed an id (a run begun while no session collects did not).
thread_local std::vector<bool> t_pushed;

std::string why(const char* call, CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || !text) text = "unknown CUPTI error";
  return std::string(call) + ": " + text;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // declined: CUPTI drops records and counts them
  *max_records = 0;
}

int64_t ns(uint64_t t) { return static_cast<int64_t>(t); }

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<profile::ActivityRecord> records;
  std::vector<profile::ActivityCorrelation> correlations;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        records.push_back({static_cast<int>(k->deviceId), k->correlationId, ns(k->start), ns(k->end)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        records.push_back({static_cast<int>(m->deviceId), m->correlationId, ns(m->start), ns(m->end)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        records.push_back({static_cast<int>(m->deviceId), m->correlationId, ns(m->start), ns(m->end)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (c->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
          correlations.push_back({c->externalId, c->correlationId});
        break;
      }
      default:  // the API records: needed for the correlations, not kept
        break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  Log& l = the_log();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.state != State::Collecting) return;  // a late buffer of a session already taken
  l.log.records.insert(l.log.records.end(), records.begin(), records.end());
  l.log.correlations.insert(l.log.correlations.end(), correlations.begin(), correlations.end());
  l.log.dropped += dropped;
}

void disable_all() {
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
}

// Under the log's mutex: starts collecting, or records why it cannot.
void open_session(Log& l) {
  l.log = profile::ActivityLog{};
  if (!l.registered) {
    const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      l.log.unavailable = why("cuptiActivityRegisterCallbacks", r);
      l.state = State::Failed;
      return;
    }
    l.registered = true;
  }
  for (CUpti_ActivityKind kind : kKinds) {
    const CUptiResult r = cuptiActivityEnable(kind);
    if (r != CUPTI_SUCCESS) {
      disable_all();
      l.log.unavailable = why("cuptiActivityEnable", r);
      l.state = State::Failed;
      return;
    }
  }
  uint64_t device_ns = 0;
  const CUptiResult r = cuptiGetTimestamp(&device_ns);
  const auto host = std::chrono::steady_clock::now().time_since_epoch();
  if (r != CUPTI_SUCCESS) {
    disable_all();
    l.log.unavailable = why("cuptiGetTimestamp", r);
    l.state = State::Failed;
    return;
  }
  l.log.origin_device_ns = ns(device_ns);
  l.log.origin_steady_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(host).count();
  l.state = State::Collecting;
}

}  // namespace

void begin_run(uint64_t run) {
  Log& l = the_log();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.state == State::Idle) open_session(l);
  bool pushed = false;
  if (l.state == State::Collecting) {
    const CUptiResult r = cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, run);
    pushed = r == CUPTI_SUCCESS;
    if (!pushed) {  // this run's work would go unmatched: the whole log is unfit
      disable_all();
      l.log.unavailable = why("cuptiActivityPushExternalCorrelationId", r);
      l.state = State::Failed;
    }
  }
  t_pushed.push_back(pushed);
}

void end_run() {
  if (t_pushed.empty()) return;
  const bool pushed = t_pushed.back();
  t_pushed.pop_back();
  if (!pushed) return;
  uint64_t id = 0;
  const CUptiResult r = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
  if (r == CUPTI_SUCCESS) return;
  Log& l = the_log();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.state != State::Collecting) return;
  disable_all();
  l.log.unavailable = why("cuptiActivityPopExternalCorrelationId", r);
  l.state = State::Failed;
}

profile::ActivityLog take() {
  Log& l = the_log();
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.state == State::Idle) {
      profile::ActivityLog none;
      none.unavailable = "no kernel run opened a CUPTI session";
      return none;
    }
    if (l.state != State::Collecting) return l.log;
  }
  // Outside the lock: the flush hands buffers to buffer_completed, which takes it.
  const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(l.mutex);
  disable_all();
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) l.log.dropped += dropped;
  if (r != CUPTI_SUCCESS) l.log.unavailable = why("cuptiActivityFlushAll", r);
  l.state = State::Taken;
  return l.log;
}

void reset() {
  Log& l = the_log();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (l.state == State::Collecting) disable_all();
  l.state = State::Idle;
  l.log = profile::ActivityLog{};
}

}  // namespace reel::kernels::cuda::cupti_log
