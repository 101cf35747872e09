// What the files of FullyShardedDataParallel (distributed/fsdp*.cpp) share and nothing else uses: a
// parameter's piece of a flat buffer, and the profiler's spans around the collectives.
#pragma once
#include <optional>
#include <string>
#include <utility>

#include "core/profile.h"
#include "core/tensor.h"

namespace reel::distributed::fsdp_detail {

// (like's shape): the elements [offset, offset + like.numel()) of the 1-D `flat`, viewed in place.
inline Tensor piece(const Tensor& flat, int64_t offset, const Tensor& like) {
  return untracked::reshape(untracked::slice(flat, 0, offset, offset + like.numel()), like.shape());
}

// A span in the profiler's trace around what the host does for one collective, when profiling (the
// name is made only then).
template <typename Name>
void open_span(std::optional<profile::Scope>& span, Name&& name) {
  if (profile::enabled()) span.emplace("fsdp: " + name());
}

// The collective itself, from its start to the moment it is seen done: a span on the trace's lanes
// of work in flight (the communication track, profile::AsyncSpan), beside DataParallel's buckets.
template <typename Name>
profile::AsyncSpan comm_span(Name&& name) {
  return profile::enabled() ? profile::AsyncSpan::begin("fsdp: " + name()) : profile::AsyncSpan();
}

}  // namespace reel::distributed::fsdp_detail
