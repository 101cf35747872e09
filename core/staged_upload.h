// core/staged_upload.h: a few host bytes written into a device tensor without a host sync, for the
// per-step scalars that kernels read from device memory instead of by value (docs/design.md,
// "Replay-safe steps": the learning rate, dropout's Philox stream). The bytes go through pinned
// memory by an asynchronous copy on the tensor's compute stream, so kernels enqueued after the write
// read the new value and the host never waits. A blocking copy from pageable memory would be a host
// sync (core/profile.h: HostSyncKind::CopyFromHost).
//
// A pinned buffer that a copy may still read is never written again: each write takes its own
// staging buffer, kept until an event recorded after its copy is done (Event::query, never a wait).
#pragma once
#include <cstddef>
#include <deque>
#include <utility>

#include "core/stream.h"
#include "core/tensor.h"

namespace reel {

class StagedUpload {
 public:
  // dst (contiguous, dst.nbytes() == bytes, on any device; on cpu the copy is done at return) = the
  // `bytes` at src, enqueued on dst's compute stream.
  void write(const Tensor& dst, const void* src, size_t bytes);

 private:
  std::deque<std::pair<PinnedBuffer, Event>> staging_;  // in flight, oldest first
};

}  // namespace reel
