// FullyShardedDataParallel (fsdp.h): a unit gathered, released and prefetched (its all-gathers
// straight into the unit's flat storage), and the module hooks that gather around each unit's forward.
#include <algorithm>
#include <optional>

#include "autograd/inspect.h"
#include "autograd/tape.h"
#include "distributed/fsdp.h"
#include "distributed/fsdp_internal.h"

namespace reel::distributed {

using fsdp_detail::comm_span;
using fsdp_detail::open_span;

void FullyShardedDataParallel::gather(size_t u, Phase phase) {
  Unit& k = units_[u];
  if (k.gathered) return;
  if (in_flight_ && in_flight_->unit == u) {  // prefetched: already written into the storage
    std::optional<profile::Scope> s;
    open_span(s, [&] { return "wait for the prefetch of unit '" + k.name + "'"; });
    in_flight_->work.wait();
    in_flight_->span.end();
    in_flight_.reset();
  } else {
    std::optional<profile::Scope> s;
    open_span(s, [&] { return "all_gather unit '" + k.name + "' (" + phase_name(phase) + ")"; });
    k.flat.storage()->materialize();
    profile::AsyncSpan comm = comm_span([&] { return "all_gather unit '" + k.name + "' (" + phase_name(phase) + ")"; });
    // Straight into the unit's storage. In backward (a replay, a rule) the values are the ones
    // forward read and the tape saved: a Restore, no version bump, so the saved-tensor checks still
    // pass. In forward, after a step and in gather_all they are new values: an Update, bumped.
    const bool fresh = phase == Phase::Forward || phase == Phase::AfterStep || phase == Phase::Checkpoint;
    group_.all_gather(k.flat, gather_input(k), fresh ? Write::Update : Write::Restore);
    comm.end();
    ++gathers_[static_cast<int>(phase)];
  }
  k.gathered = true;
}

void FullyShardedDataParallel::release(size_t u) {
  units_[u].flat.storage()->release();
  units_[u].gathered = false;
}

void FullyShardedDataParallel::prefetch_before(size_t u, int64_t index) {
  const auto it = std::find(forward_order_.begin(), forward_order_.end(), u);
  if (it == forward_order_.end() || it == forward_order_.begin()) return;
  const size_t v = *(it - 1);
  if (!read_below(v, index)) return;  // no rule left reads its values: nothing to fetch
  // A replay to come reads it first: that replay gathers it when its turn comes (fetched now, it
  // would be held through the whole replay).
  const size_t end = std::min(static_cast<size_t>(std::max<int64_t>(index, 0)), reads_.size());
  for (size_t j = 0; j < end; ++j)
    if (std::find(reads_[j].begin(), reads_[j].end(), v) != reads_[j].end() && !autograd::recorded_saves_live(j)) return;
  prefetch(v);
}

void FullyShardedDataParallel::prefetch_after(size_t u) {
  const auto it = std::find(replay_order_.begin(), replay_order_.end(), u);
  if (it != replay_order_.end() && it + 1 != replay_order_.end()) prefetch(*(it + 1));
}

void FullyShardedDataParallel::prefetch(size_t v) {
  if (!options_.prefetch || options_.stage != 3 || in_flight_) return;
  Unit& k = units_[v];
  // Not a unit whose gradients this backward has finished: nothing reads it again (the forward order
  // need not be the tape's: `wte(ids) + wpe(pos)` may record wpe first).
  if (k.gathered || (in_backward_ && v < done_.size() && done_[v])) return;
  std::optional<profile::Scope> s;
  open_span(s, [&] { return "start the prefetch of unit '" + k.name + "'"; });
  in_flight_ = std::make_unique<InFlight>();
  in_flight_->unit = v;
  // Straight into the unit's storage (its bytes count as Parameter from here: one more gathered unit
  // in flight). Prefetches are issued in backward only, where the values are the ones forward read:
  // a Restore.
  k.flat.storage()->materialize();
  in_flight_->span = comm_span([&] { return "all_gather unit '" + k.name + "' (prefetch)"; });
  in_flight_->work = group_.all_gather_async(k.flat, gather_input(k), Write::Restore);
  ++gathers_[static_cast<int>(Phase::Prefetch)];
}

void FullyShardedDataParallel::drop_prefetch() {
  if (!in_flight_) return;
  in_flight_->work.wait();  // every rank issued it: it completes; its values may be stale by now
  in_flight_->span.end();
  const size_t u = in_flight_->unit;
  in_flight_.reset();
  if (!units_[u].gathered) release(u);  // its storage was filled for nothing: released again
}

// ---- forward ----------------------------------------------------------------------------

void FullyShardedDataParallel::pre_forward(size_t u) {
  autograd::NoGrad no_grad;  // the gather records nothing, inside a checkpoint segment too
  gather(u, Phase::Forward);
  if (std::find(forward_order_.begin(), forward_order_.end(), u) == forward_order_.end()) forward_order_.push_back(u);
}

void FullyShardedDataParallel::post_forward(size_t u) {
  if (u != last_unit_ && !units_[u].kept) release(u);
}

}  // namespace reel::distributed
