// Activation offload: a saved-tensor hook pair (autograd/saved_tensor.h) that moves what backward
// needs out of device memory into pinned host memory while forward goes on, and brings it back
// ahead of the backward rule (or checkpoint replay) that reads it.
//
//   {
//     autograd::Offload offload;               // or Offload(OffloadWhat::Boundaries) with checkpointing
//     Tensor loss = model(x);                   // each save: copied to the host on the copy stream
//     autograd::backward(loss);                 // ...and copied back a window ahead of its rule
//   }
//
// Forward: a save of a cuda tensor is copied, as soon as it is saved, to a PinnedBuffer (memory
// category Offloaded, in the pinned pool) on the device's copy stream, after an event on the
// compute stream (the kernels that wrote it come first). The device copy stays alive (counted as an
// activation) until that copy's event is done; it is dropped at the first later pack, unpack or
// backward rule where Event::query() says so. The bytes still waiting for their copy (the device
// side of every save of this thread whose copy has not been seen done) are bounded by
// max_inflight_bytes: when a pack leaves more than that waiting, the compute stream waits
// (Stream::wait, no host synchronisation) for the oldest copies until what is left is within the
// bound, and their device sides are dropped at once (the allocator may hand them to the next
// kernel: it runs after the wait). Each such wait is a stall: counted in Stats::stalls and recorded
// for a Profiler as an "offload_stall" run on the compute stream, which report/predict.h prices
// from the host link's bandwidth. So a copy stream that falls behind costs at most the bound in
// device memory, and past it time: the forward's activation peak is at most what stays on the
// device plus the bound (plus the save being made), whatever the timing. What is copied is the
// save's whole storage: saves that view one storage (at one version; attention's q, k, v and the
// projection's input, say) share one host copy, in whichever live Offload scope of the thread it was
// made, and come back as views of one device copy, so the bytes that return are those a kept save
// holds.
//
// Backward: when a rule unpacks an offloaded save, or a segment's replay begins
// (BackwardObserver::before_replay), the copies back to the device (H2D, on the copy stream) of
// what it needs now and of the saves packed before it are started. How far ahead is the Prefetch:
//   Window  (the default) the group needed now (one node's saves, or one segment's held inputs),
//           then earlier groups: with Boundaries the next segment's held inputs; with All, whole
//           groups until an eighth of the scope's offloaded bytes are on their way back. Fine
//           grained: one scope around a whole model keeps little on the device at any time.
//   Scope   every save of this scope comes back at once, and every save of the scope opened just
//           before it on this thread (if it prefetches by Scope too): one scope ahead. nn::Sequential
//           opens one scope per offloaded run, so this is the checkpoint planner's model of a run
//           (autograd/checkpoint_planner.h), and the copy back of run k-1 hides behind run k's
//           backward. So one Scope scope around a whole model lowers nothing in backward: its
//           first unpack brings every save back, at the plain peak; that is why nn::Sequential
//           under OffloadMode::All gives each plain child its own scope.
// The compute stream waits on the copy's event (Stream::wait): no host or device-wide
// synchronisation. Where a save is first read after a copy back, the wait is recorded for a
// Profiler as an "offload_fetch_wait" run on the compute stream (bytes_written the copy waited for,
// bytes_read what this thread enqueued on the copy stream after it), which report/predict.h prices.
// A host copy is returned to the pinned pool once its slot is done with it (unpacked, or the tape
// cleared at the end of the backward) and its copies have completed, so the pool's blocks are
// reused step after step.
//
// Alive elsewhere: a save whose storage is still alive when backward needs it, at the version it was
// saved at (the caller still holds the input batch, another slot kept it on the device, a view of it
// lives on), is not copied back: its unpack returns a view of that live storage, so offload never
// makes a second device copy of bytes that are on the device anyway. What is decided when: at pack
// time the copy out always starts (whether the caller will drop the tensor later is unknown then,
// and only an offloaded save frees its bytes when the caller does); when the copy back would start,
// the storage is looked up (a weak reference, taken at pack time) and reused if alive at that
// version. Its host copy is then simply returned to the pool.
//
// What is offloaded: All, every save; Boundaries, only the inputs a collapsed checkpoint segment
// holds for its replay (KeptBy::segment >= 0). Never: saves smaller than min_bytes, parameter,
// gradient or optimizer-state memory (leaves and their views: they stay on the device anyway), and
// the saves a replay re-makes in backward (needed at once). A save of a cpu tensor is refused with a
// reel::Error: host memory is where it already is. The version check is unchanged: a tensor written
// in place after it was offloaded raises the same error as one kept on the device.
//
// RAII, one thread: a SavedTensorHooks scope (it nests like one; the innermost pair applies) plus a
// backward observer while it lives. Saves packed while it lived come back correctly after it is gone
// (backward outside the scope), then prefetched at each unpack only.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "core/device.h"

namespace reel::autograd {

class SavedTensorHooks;
class BackwardObserver;

enum class OffloadWhat : uint8_t { All, Boundaries };  // every save; only checkpoint segments' held inputs
const char* offload_what_name(OffloadWhat what);        // "all", "boundaries"
enum class OffloadPrefetch : uint8_t { Window, Scope };  // how far ahead backward brings saves back (above)

// What nn::Sequential::set_offload (and the examples' --offload) asks: which runs of a chain go to
// host memory. None; every checkpointed run's boundary; every run; or as the checkpoint planner
// finds fastest (auto, autograd/checkpoint_planner.h). Outside a budget plan, auto offloads nothing.
enum class OffloadMode { None, Boundaries, All, Auto };
// "none" | "boundaries" | "all" | "auto"; reel::Error naming those for anything else.
OffloadMode parse_offload_mode(const std::string& text);
const char* offload_mode_name(OffloadMode mode);

// The default bound on the device bytes waiting for their copy to the host (Offload's
// max_inflight_bytes): enough for a few large saves to overlap their copies with compute, small
// beside a step's activations (char_gpt's six blocks save 72 MiB).
constexpr int64_t kDefaultOffloadInflightBytes = int64_t{8} << 20;
constexpr int64_t kNoOffloadInflightBound = std::numeric_limits<int64_t>::max();

class Offload {
 public:
  // Saves smaller than min_bytes stay on the device. max_inflight_bytes (> 0) bounds the device bytes
  // waiting for their copy to the host (above); kNoOffloadInflightBound: no bound.
  explicit Offload(OffloadWhat what = OffloadWhat::All, int64_t min_bytes = 0,
                   OffloadPrefetch prefetch = OffloadPrefetch::Window,
                   int64_t max_inflight_bytes = kDefaultOffloadInflightBytes);
  ~Offload();
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;

  struct Stats {
    int64_t tensors = 0;          // saves copied to the host
    int64_t bytes = 0;            // their bytes
    int64_t prefetched = 0;       // copies back started before the unpack that needed them
    int64_t waited_on_fetch = 0;  // unpacks that had to start their copy back themselves
    int64_t reused = 0;           // saves whose storage was alive on the device when needed: not copied back
    int64_t stalls = 0;           // packs past max_inflight_bytes: the compute stream waited for copies out
    int64_t stalled_bytes = 0;    // the bytes of the copies those stalls waited for
    int64_t peak_inflight_bytes = 0;  // the most device bytes left waiting for their copy when a pack returned
  };
  Stats stats() const;  // since construction, all steps together

  struct State;  // shared with the hooks and the host copies (autograd/offload.cpp)

 private:
  std::shared_ptr<State> state_;
  std::unique_ptr<SavedTensorHooks> hooks_;
};

// Drops the device side of every offloaded save on this thread whose copy to the host has landed
// (the scopes do it at each save, rule and at their end; nn::Sequential after each child, so that a
// run's copies free device memory during the next run's forward, as the planner's model has it).
void release_landed_offloads();

// The device<->host copy bandwidth of `device` in bytes/s (pinned, each way: the slower direction),
// measured once per process and device (16 MiB copies on the copy stream). reel::Error on cpu.
double host_link_bytes_per_s(Device device);

// The backward observer (autograd/hooks.h) over every offload state of the thread, alive or whose
// scope has closed: an Offload adds it to the thread's observers, until the thread's last state is gone.
std::shared_ptr<BackwardObserver> offload_observer();

// ---- for tests only ----------------------------------------------------------------------
// A planted bug: when on, an unpack does not make the compute stream wait for the copy back, so a
// rule may read a tensor whose copy has not landed (tests/test_offload.cpp shows the test catching it).
void offload_skip_fetch_wait_for_testing(bool on);

}  // namespace reel::autograd
