// Kernel times from a device's own activity log (CUPTI activity records in the nvcc build), turned
// into the profiler's kernel runs. Pure: no device, no CUPTI; the glue that fills an ActivityLog is
// kernels/cuda/cupti_log.cu, compiled only in the nvcc flavour when the toolkit has libcupti.
//
// How records meet runs: while a kernel run (core/profile.h, KernelRun) is open, the glue has
// pushed the run's id as CUPTI's external correlation id on the launching thread; CUPTI then tags
// every CUDA API call made inside with a correlation record (run id -> API correlation id), and
// every kernel, memcpy and memset the call put on a device carries that API correlation id. So a
// run owns the device work its own calls launched: one cuBLAS call launching three kernels, or
// none at all (an empty tensor). A run opened inside another owns its own launches (CUPTI tags a
// call with the innermost id), where cudaEvent pairs would count them in both.
//
// A run's time is the union of its device work's intervals (the device busy for it; gaps between
// its kernels are not counted), placed at its first start; a run that launched nothing is 0 long.
// The log is used only when it is whole: records CUPTI dropped (full buffers), records without
// both timestamps, or work on the device of which no record meets a run (ids misread) make the
// profiler keep the cudaEvent times of every run of that device and say why, rather than mix the
// two clocks or report runs too short. What is not an error is still said in the source line:
// runs that launched no device work, device work launched outside every profiled run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace reel::profile {

// One unit of device work: a kernel, a memcpy or a memset.
struct ActivityRecord {
  int device = 0;            // the CUDA device ordinal it ran on
  uint32_t correlation = 0;  // the API call that launched it
  int64_t start_ns = 0;      // device timestamps on the log's clock; 0 = unknown (incomplete record)
  int64_t end_ns = 0;
};

// API call `correlation` was made inside kernel run `run` (CUPTI's external correlation record).
struct ActivityCorrelation {
  uint64_t run = 0;
  uint32_t correlation = 0;
};

// What the glue collected in one profiling session, for every device.
struct ActivityLog {
  std::string unavailable;  // why there are no records ("libcupti not found at build time"); empty if collected
  std::vector<ActivityRecord> records;            // in any order, as the buffers came back
  std::vector<ActivityCorrelation> correlations;  // in any order
  uint64_t dropped = 0;     // records CUPTI reported lost
  // The same instant on the log's clock and on the host's steady clock (ns since its epoch):
  // places device times on the profiler's host timeline.
  int64_t origin_device_ns = 0;
  int64_t origin_steady_ns = 0;
};

// One run's time from the log.
struct ActivityTime {
  int64_t start_ns = 0;  // the first start of its device work, on the caller's host timeline
  int64_t dur_ns = 0;    // the union of its device work's intervals
  int records = 0;       // device work units it launched; 0: it launched none (start_ns is then 0)
};

// The times of `runs` (the ids pushed for one device's kernel runs) from `log`.
struct ActivityTimes {
  bool used = false;   // the times below are the device's; else keep the cudaEvent times
  std::string source;  // for the profile table: "CUPTI activity records" or "cudaEvent pairs (CUPTI: why)"
  std::vector<ActivityTime> times;  // by position in `runs`; empty when !used
  int64_t runs_without_work = 0;    // runs that launched no device work: time 0
  int64_t foreign_records = 0;      // work of this device launched outside every profiled run
};

// host_ns = device_ns + device_to_host_ns for the log's timestamps. Runs of other devices and
// records of other devices are ignored.
ActivityTimes resolve_activity(const ActivityLog& log, int device, const std::vector<uint64_t>& runs,
                               int64_t device_to_host_ns);

}  // namespace reel::profile
