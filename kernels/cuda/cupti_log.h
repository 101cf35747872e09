// The CUPTI activity log of the profiler (core/profile_activity.h says what it is for and how its
// records are matched to kernel runs): the nvcc flavour's glue, compiled (kernels/cuda/cupti_log.cu)
// and used by the CUDA backend's DeviceClock only where CMake found libcupti (REEL_CUPTI). One log
// for the process, shared by every device's clock: CUPTI's activity API is process-wide.
//
// A session opens on the first begin_run() after reset(): the buffer callbacks are registered
// (once per process) and kernels, memcpys, memsets, runtime and driver API calls and external
// correlations are enabled. When that fails (no permission to profile, another profiler such as
// Nsight holds CUPTI) the session records nothing and take() says why, so the profiler keeps its
// cudaEvent times with that reason in its table.
#pragma once
#include <cstdint>

#include "core/profile_activity.h"

namespace reel::kernels::cuda::cupti_log {

// Brackets one kernel run on the calling thread: its id becomes CUPTI's external correlation id
// (CUSTOM0) of every CUDA call made until end_run(). Nestable, like the runs.
void begin_run(uint64_t run);
void end_run();
// Flushes CUPTI's buffers (call once the device finished the runs' work), stops collecting and
// returns the session's log; later calls in the same session return the same log.
profile::ActivityLog take();
// Ends the session: the next begin_run() opens a new one.
void reset();

}  // namespace reel::kernels::cuda::cupti_log
