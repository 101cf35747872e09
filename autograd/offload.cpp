// Activation offload (autograd/offload.h): the pack and unpack hooks, the host copies with their
// events, the bound on the bytes waiting for their copy out, the reuse of storages still alive, the
// prefetch window, and the host link's measured bandwidth.
#include "autograd/offload.h"

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/hooks.h"
#include "autograd/saved_tensor.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/autograd_meta.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/stream.h"
#include "core/tensor.h"

namespace reel::autograd {

namespace {

std::atomic<bool> g_skip_fetch_wait{false};
thread_local int g_replaying = 0;  // inside a segment's replay (backward): its saves stay on the device

// One offloaded storage: its host copy and the device tensor on either side of it.
struct Entry;

// What the pack hook returns for an offloaded save: its storage's entry, and the save's view of it.
struct Packed {
  std::shared_ptr<Entry> entry;
  Shape shape, strides;
  int64_t offset = 0;
};

// Memory an async copy may still touch when its entry goes: kept until the copy's event is done.
struct Retired {
  PinnedBuffer host;
  Tensor device;
  Event done;
};

// Saves of one group are brought back together: one node's saves, or one segment's held inputs.
struct Group {
  bool held = false;
  int64_t id = -1;  // the segment (held) or the node
  bool operator==(const Group& o) const { return held == o.held && id == o.id; }
};

// Offload's observer watches this thread's backwards while an offload state lives: added with the
// first, removed with the last (a scope's state outlives it while the tape holds its saves).
thread_local int g_states = 0;
struct Observing {
  const BackwardObserver* observer = nullptr;
  Observing();
  ~Observing() {
    if (--g_states == 0) remove_backward_observer(observer);
  }
};

}  // namespace

struct Offload::State {
  OffloadWhat what = OffloadWhat::All;
  int64_t min_bytes = 0;
  OffloadPrefetch prefetch = OffloadPrefetch::Window;
  int64_t max_inflight_bytes = kDefaultOffloadInflightBytes;
  Stats stats;

  // This step's offloaded saves in pack order (the prefetch walks it downward), and by storage for
  // sharing a host copy. Reset at the first pack after every entry is gone.
  std::vector<std::weak_ptr<Entry>> order;
  std::unordered_map<const Storage*, std::vector<std::weak_ptr<Entry>>> by_storage;
  int64_t step_bytes = 0;
  int64_t live = 0;  // entries alive

  std::vector<std::weak_ptr<Entry>> in_flight;  // D2H copies whose device side is still held
  std::vector<Retired> retiring;                // copies of entries already gone, not yet done
  Observing observing;                          // offload_observer() registered while this lives

  ~State() {
    for (Retired& r : retiring) r.done.synchronize();  // their memory goes back to the pools now
  }
};

namespace {

using State = Offload::State;

// One offloaded storage: every save that views it (at one version) shares it, as on the device.
struct Entry {
  std::shared_ptr<State> state;
  size_t index = 0;  // in state->order
  Group group;       // of the first save that offloaded it
  KeptBy by;
  Device device;
  int64_t numel = 0;  // the whole storage, as a 1-D tensor of `dtype`
  DType dtype = DType::f32;
  std::weak_ptr<Storage> origin;
  uint64_t version = 0;

  Tensor out;       // the whole storage on the device, until the copy from it is known done (or waited for)
  PinnedBuffer host;
  Event offloaded;  // the D2H copy is done
  bool landed = false;  // ...and the host has seen it done (a stall only made the compute stream wait)
  Tensor back;      // the device tensor copied back into (or `out` itself, still alive)
  Event fetched;    // the H2D copy is done
  bool fetch_started = false;
  bool unpacked = false;
  int64_t fetch_mark = 0;  // copy_enqueued(device) once its copy back was enqueued

  ~Entry() {
    --state->live;
    // A copy still running must not find its memory reused. A copy back that no unpack waited for
    // is waited for by the compute stream now (the allocator may hand `back` to the next kernel);
    // what a pending copy touches is kept until a poll sees its event done (or the state ends).
    // No event is queried here for an unpacked entry: in the emulated build a query runs queued
    // copies, which would hide a missing wait in the unpack that just returned.
    if (fetch_started && !unpacked) {
      Stream::compute(device).wait(fetched);
      if (fetched.recorded() && fetched.query()) return;
    }
    // The copy stream runs in order: a copy back recorded after the copy out covers both.
    if (fetched.recorded()) state->retiring.push_back({std::move(host), Tensor(), std::move(fetched)});
    else if (!landed) state->retiring.push_back({std::move(host), std::move(out), std::move(offloaded)});
  }
};

// The bytes this thread's offload has enqueued on `device`'s copy stream (copies out and back), so
// that a wait for one copy back can say how many were enqueued after it (report/predict.h).
int64_t& copy_enqueued(Device device) {
  thread_local std::map<int, int64_t> bytes;
  return bytes[device.index];
}

// Drops the device side of each save whose copy to the host has landed, and the memory of gone
// entries whose copies are done. Every pending event is asked (in the emulated build a query is
// what moves the copy stream along, one item per ask).
void poll(State& s) {
  size_t kept = 0;
  for (size_t i = 0; i < s.in_flight.size(); ++i) {
    const std::shared_ptr<Entry> e = s.in_flight[i].lock();
    if (!e) continue;
    if (e->offloaded.query()) {
      e->out = Tensor();
      e->landed = true;
      continue;
    }
    s.in_flight[kept++] = s.in_flight[i];
  }
  s.in_flight.resize(kept);
  s.retiring.erase(std::remove_if(s.retiring.begin(), s.retiring.end(), [](const Retired& r) { return r.done.query(); }),
                   s.retiring.end());
}

// This thread's states that may still hold entries or copies in flight: an Offload scope's state
// outlives the scope while its entries live (backward usually runs after the scope has closed), and
// every one of them is polled, whichever scope (or none) is open now.
std::vector<std::weak_ptr<State>>& live_states() {
  thread_local std::vector<std::weak_ptr<State>> states;
  return states;
}

void poll_all() {
  std::vector<std::weak_ptr<State>>& states = live_states();
  size_t kept = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    const std::shared_ptr<State> state = states[i].lock();
    if (!state) continue;
    poll(*state);
    states[kept++] = states[i];
  }
  states.resize(kept);
}

int64_t entry_bytes(const Entry& e) { return e.numel * static_cast<int64_t>(dtype_size(e.dtype)); }

// Past `s`'s bound on the device bytes waiting for their copy out (every live state of the thread
// together, oldest first): the compute stream waits for the oldest copies until what is left is
// within it, and their device sides go now (kernels that reuse the memory run after the wait). One
// stall, recorded for a Profiler as "offload_stall" on the compute stream: bytes_written the copies
// it waits for, bytes_read those queued behind them (report/predict.h simulates the copy stream from
// these). The host still has to see each waited copy done before its pinned block is reused (~Entry).
void bound_inflight(State& s, Device device) {
  std::vector<std::pair<State*, std::shared_ptr<Entry>>> waiting;
  int64_t total = 0;
  for (const std::weak_ptr<State>& weak : live_states()) {
    const std::shared_ptr<State> state = weak.lock();
    if (!state) continue;
    for (const std::weak_ptr<Entry>& we : state->in_flight)
      if (std::shared_ptr<Entry> e = we.lock(); e && e->out.defined()) {
        total += entry_bytes(*e);
        waiting.emplace_back(state.get(), std::move(e));
      }
  }
  if (total > s.max_inflight_bytes) {
    size_t k = 0;
    int64_t waited = 0;
    while (total > s.max_inflight_bytes && k < waiting.size()) {
      total -= entry_bytes(*waiting[k].second);
      waited += entry_bytes(*waiting[k].second);
      ++k;
    }
    {
      std::optional<profile::KernelRun> run;
      if (profile::enabled()) {
        profile::KernelCost cost;
        cost.bytes_written = waited;
        cost.bytes_read = total;
        run.emplace("offload_stall", device, DType::f32, std::string(), cost);
      }
      const Stream compute = Stream::compute(device);
      for (size_t i = 0; i < k; ++i) compute.wait(waiting[i].second->offloaded);
    }
    for (size_t i = 0; i < k; ++i) {
      Entry& e = *waiting[i].second;
      e.out = Tensor();
      std::vector<std::weak_ptr<Entry>>& in_flight = waiting[i].first->in_flight;
      in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(),
                                     [&e](const std::weak_ptr<Entry>& w) { return w.lock().get() == &e; }),
                      in_flight.end());
    }
    ++s.stats.stalls;
    s.stats.stalled_bytes += waited;
  }
  s.stats.peak_inflight_bytes = std::max(s.stats.peak_inflight_bytes, total);
}

// Memory the tape may offload: not a parameter's, gradient's or optimizer state's (they stay on the
// device anyway), nor a leaf that requires grad or a view of one.
bool activation_memory(const Tensor& t) {
  if (!t.storage() || t.numel() == 0) return false;
  const Category c = t.storage()->category();
  if (c != Category::Temporary && c != Category::Activation) return false;
  const auto& meta = t.autograd_meta();
  return !(meta && ((meta->is_leaf && meta->requires_grad) || meta->views_leaf));
}

// The entry already offloading t's storage at t's version, or null: in any live scope of the
// thread, not only `s` (nn::Sequential gives each child its own scope, and a ReLU's saved output is
// the next Linear's saved input: two copies of it would come back, where keeping it holds one).
std::shared_ptr<Entry> shared_copy(State& s, const Tensor& t) {
  const auto find = [&t](const State& state) -> std::shared_ptr<Entry> {
    const auto it = state.by_storage.find(t.storage().get());
    if (it == state.by_storage.end()) return nullptr;
    for (const std::weak_ptr<Entry>& weak : it->second) {
      const std::shared_ptr<Entry> e = weak.lock();
      if (e && !e->unpacked && e->origin.lock() == t.storage() && e->dtype == t.dtype() && e->version == t.version())
        return e;
    }
    return nullptr;
  };
  if (std::shared_ptr<Entry> e = find(s)) return e;
  for (const std::weak_ptr<State>& weak : live_states())
    if (const std::shared_ptr<State> state = weak.lock(); state && state.get() != &s)
      if (std::shared_ptr<Entry> e = find(*state)) return e;
  return nullptr;
}

// t's view of the storage that `whole` (a 1-D tensor over all of it) covers.
Tensor view_of(const Tensor& whole, const Packed& p) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = whole.storage();
  impl->shape = p.shape;
  impl->strides = p.strides;
  impl->offset = p.offset;
  impl->dtype = whole.dtype();
  impl->device = whole.device();
  return Tensor(std::move(impl));
}

std::string describe(const Tensor& t, const KeptBy& by) {
  std::string what = std::string("the tensor ") + dtype_name(t.dtype()) + " " + shape_str(t.shape());
  if (by.segment >= 0) return what + " that checkpoint segment " + std::to_string(by.segment) + " holds";
  return what + " that " + (by.op ? by.op : "an op") + " saves";
}

std::any pack(const std::shared_ptr<State>& state, const Tensor& t, const KeptBy& by) {
  State& s = *state;
  if (g_replaying > 0) return t;  // re-made in backward, read at once
  if (s.what == OffloadWhat::Boundaries && by.segment < 0) return t;
  if (!activation_memory(t)) return t;
  REEL_CHECK(!t.device().is_cpu(), "Offload: cannot offload ", describe(t, by),
             ": it is on cpu, and offload moves saved tensors from device memory to host memory, which is where "
             "cpu tensors already are (nothing would be freed). Offload on a cuda device; on cpu, checkpointing "
             "(recomputation) is what lowers the activation memory");
  if (static_cast<int64_t>(t.nbytes()) < s.min_bytes) return t;
  poll_all();
  if (s.live == 0) {  // a new step: the last one's entries are all gone
    s.order.clear();
    s.by_storage.clear();
    s.step_bytes = 0;
  }
  Packed packed{shared_copy(s, t), t.shape(), t.strides(), t.offset()};
  if (packed.entry) return packed;
  const size_t storage_bytes = t.storage()->bytes();
  if (storage_bytes % dtype_size(t.dtype()) != 0) return t;  // not a whole number of its elements: kept

  // The whole storage goes, as the whole of it stays on the device when kept: views of it share one
  // host copy, so the bytes that come back are the bytes a kept save holds (the planner's model).
  NoGrad no_grad;  // a held input may require grad: the copy below records nothing
  const Device dev = t.device();
  auto e = std::make_shared<Entry>();
  packed.entry = e;
  e->state = state;
  ++s.live;
  e->index = s.order.size();
  e->group = by.segment >= 0 ? Group{true, by.segment} : Group{false, by.node};
  e->by = by;
  e->device = dev;
  e->numel = static_cast<int64_t>(storage_bytes / dtype_size(t.dtype()));
  e->dtype = t.dtype();
  e->origin = t.storage();
  e->version = t.version();
  e->out = view_of(t, Packed{nullptr, {e->numel}, {1}, 0});
  {
    MemoryCategory offloaded(Category::Offloaded);
    e->host = PinnedBuffer(storage_bytes, dev);  // meta: meta's pool, never backed
  }
  const Stream copy = Stream::copy(dev);
  copy.wait(Stream::compute(dev).record());  // after the kernels that wrote it
  copy_async(e->out, e->host, copy);
  e->offloaded.record(copy);
  copy_enqueued(dev) += static_cast<int64_t>(storage_bytes);
  mark_activation(e->out, by);  // kept for backward until the copy has landed

  s.order.push_back(e);
  s.by_storage[t.storage().get()].push_back(e);
  s.in_flight.push_back(e);
  s.step_bytes += static_cast<int64_t>(storage_bytes);
  ++s.stats.tensors;
  s.stats.bytes += static_cast<int64_t>(storage_bytes);
  bound_inflight(s, dev);
  return packed;
}

// Starts the copy back of `e` (nothing to copy while its device side is still alive).
void fetch(Entry& e, bool ahead) {
  if (e.fetch_started) return;
  e.fetch_started = true;
  if (ahead) ++e.state->stats.prefetched;
  if (e.out.defined()) {
    e.back = e.out;  // the D2H copy only reads it: no need to wait for that
    return;
  }
  // Alive elsewhere at the version saved (the caller's batch, a slot that kept it, a live view):
  // those bytes are on the device anyway, so they are read where they are, not copied back.
  const std::shared_ptr<Storage> live = e.origin.lock();
  if (live && live->version() == e.version && !live->released()) {
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = live;
    impl->shape = {e.numel};
    impl->strides = {1};
    impl->dtype = e.dtype;
    impl->device = e.device;
    e.back = Tensor(std::move(impl));
    ++e.state->stats.reused;
    return;
  }
  NoGrad no_grad;
  e.back = empty({e.numel}, e.dtype, e.device);
  const Stream copy = Stream::copy(e.device);
  // The block may have been freed by kernels still queued on the compute stream: after them.
  copy.wait(Stream::compute(e.device).record());
  copy_async(e.host, e.back, copy);
  e.fetched.record(copy);
  e.fetch_mark = copy_enqueued(e.device) += entry_bytes(e);
  mark_activation(e.back, e.by);
}

// Entry order[i], or null when it is gone or already unpacked.
std::shared_ptr<Entry> waiting(const State& s, size_t i) {
  std::shared_ptr<Entry> e = s.order[i].lock();
  return e && !e->unpacked ? e : nullptr;
}

// Starts every waiting save of `s` coming back (`now`, if among them, is needed now).
void bring_back_all(State& s, const Entry* now) {
  for (size_t i = s.order.size(); i-- > 0;)
    if (const std::shared_ptr<Entry> e = waiting(s, i)) fetch(*e, e.get() != now);
}

// The scope opened on this thread just before `s` that still has saves to bring back, or null.
std::shared_ptr<State> previous_scope(const State& s) {
  std::shared_ptr<State> previous;
  for (const std::weak_ptr<State>& weak : live_states()) {
    std::shared_ptr<State> state = weak.lock();
    if (state.get() == &s) return previous;
    if (state && state->live > 0) previous = std::move(state);
  }
  return nullptr;
}

// `now` is needed now. Prefetch::Scope: all of its scope comes back, and the scope before it.
// Window: its whole group starts coming back, then the groups packed just before it (reverse
// forward order, the order backward reads them): with Boundaries the next segment's held inputs;
// with All, whole groups until an eighth of the step's offloaded bytes is on its way.
void bring_back(State& s, const Entry& now) {
  if (s.prefetch == OffloadPrefetch::Scope) {
    bring_back_all(s, &now);
    const std::shared_ptr<State> previous = previous_scope(s);
    if (previous && previous->prefetch == OffloadPrefetch::Scope) bring_back_all(*previous, nullptr);
    return;
  }
  size_t low = now.index;
  for (size_t i = now.index + 1; i-- > 0;) {  // the group, downward (it is packed together)
    const std::shared_ptr<Entry> e = waiting(s, i);
    if (!e) continue;
    if (!(e->group == now.group)) break;
    fetch(*e, e.get() != &now);
    low = i;
  }
  for (size_t i = now.index + 1; i < s.order.size(); ++i) {  // ...and upward
    const std::shared_ptr<Entry> e = waiting(s, i);
    if (!e) continue;
    if (!(e->group == now.group)) break;
    fetch(*e, true);
  }
  const int64_t window = s.what == OffloadWhat::Boundaries ? 0 : s.step_bytes / 8;
  int64_t ahead = 0;
  int groups = 0;
  Group current;
  for (size_t i = low; i-- > 0;) {
    const std::shared_ptr<Entry> e = waiting(s, i);
    if (!e) continue;
    if (groups == 0 || !(e->group == current)) {  // a new group: take it while the window allows
      if (groups > 0 && ahead >= window) break;
      current = e->group;
      ++groups;
    }
    ahead += static_cast<int64_t>(e->host.bytes());
    fetch(*e, true);
  }
}

Tensor unpack(const std::any& value) {
  if (const Tensor* t = std::any_cast<Tensor>(&value)) return *t;  // not offloaded
  const Packed& packed = std::any_cast<const Packed&>(value);
  const std::shared_ptr<Entry>& e = packed.entry;
  State& s = *e->state;
  poll_all();
  if (!e->fetch_started) ++s.stats.waited_on_fetch;
  const bool first = !e->unpacked;
  if (first) bring_back(s, *e);
  fetch(*e, false);
  e->unpacked = true;
  // Recorded for a Profiler (report/predict.h prices the wait): where compute first waits for a
  // copy back, with the bytes this thread enqueued on the copy stream after it.
  std::optional<profile::KernelRun> run;
  if (first && e->fetched.recorded() && profile::enabled()) {
    profile::KernelCost cost;
    cost.bytes_written = entry_bytes(*e);
    cost.bytes_read = copy_enqueued(e->device) - e->fetch_mark;
    run.emplace("offload_fetch_wait", e->device, DType::f32, std::string(), cost);
  }
  if (!g_skip_fetch_wait) Stream::compute(e->device).wait(e->fetched);  // compute reads it after it landed
  run.reset();
  return view_of(e->back, packed);
}

// The thread's built-in observer over every live state: tracks replays (their saves stay on the
// device), starts a segment's held inputs coming back as its replay begins, and lets finished
// copies go between rules. With no state alive each call is an empty loop.
struct Observer : BackwardObserver {
  void before_node(const NodeEvent&) override { poll_all(); }
  void after_node(const NodeEvent&, const Tensors* produced) override {  // the last rule's copies too
    if (produced) poll_all();  // (not while a rule's error unwinds: this must not throw then)
  }
  void before_replay(const ReplayEvent& event) override {
    ++g_replaying;
    for (const std::weak_ptr<State>& weak : live_states()) {
      const std::shared_ptr<State> state = weak.lock();
      if (!state) continue;
      State& s = *state;
      for (size_t i = s.order.size(); i-- > 0;) {  // its last held input: backward starts there
        const std::shared_ptr<Entry> e = waiting(s, i);
        if (e && e->group == Group{true, event.segment}) {
          bring_back(s, *e);
          break;
        }
      }
    }
  }
  void after_replay(const ReplayEvent&, bool) override { --g_replaying; }
};

}  // namespace

OffloadMode parse_offload_mode(const std::string& text) {
  for (OffloadMode m : {OffloadMode::None, OffloadMode::Boundaries, OffloadMode::All, OffloadMode::Auto})
    if (text == offload_mode_name(m)) return m;
  REEL_FAIL("offload mode '", text, "': expected none, boundaries, all or auto");
}

const char* offload_mode_name(OffloadMode mode) {
  switch (mode) {
    case OffloadMode::None: return "none";
    case OffloadMode::Boundaries: return "boundaries";
    case OffloadMode::All: return "all";
    case OffloadMode::Auto: return "auto";
  }
  return "?";
}

const char* offload_what_name(OffloadWhat what) {
  switch (what) {
    case OffloadWhat::All: return "all";
    case OffloadWhat::Boundaries: return "boundaries";
  }
  return "?";
}

Offload::Offload(OffloadWhat what, int64_t min_bytes, OffloadPrefetch prefetch, int64_t max_inflight_bytes)
    : state_(std::make_shared<State>()) {
  REEL_CHECK(min_bytes >= 0, "Offload: min_bytes must be >= 0, got ", min_bytes);
  REEL_CHECK(max_inflight_bytes > 0,
             "Offload: max_inflight_bytes must be > 0 (kNoOffloadInflightBound for no bound), got ", max_inflight_bytes);
  state_->max_inflight_bytes = max_inflight_bytes;
  state_->what = what;
  state_->min_bytes = min_bytes;
  state_->prefetch = prefetch;
  const std::shared_ptr<State> state = state_;
  hooks_ = std::make_unique<SavedTensorHooks>(
      PackHookBy([state](const Tensor& t, const KeptBy& by) { return pack(state, t, by); }), UnpackHook(unpack));
  live_states().push_back(state_);
}

Offload::~Offload() {
  hooks_.reset();
  poll_all();  // what this scope's last saves copied may have landed: their device side goes now
}

void release_landed_offloads() { poll_all(); }

std::shared_ptr<BackwardObserver> offload_observer() {
  thread_local std::shared_ptr<BackwardObserver> observer = std::make_shared<Observer>();
  return observer;
}

namespace {
Observing::Observing() : observer(offload_observer().get()) {
  if (g_states++ == 0) add_backward_observer(offload_observer());
}
}  // namespace

Offload::Stats Offload::stats() const { return state_->stats; }

void offload_skip_fetch_wait_for_testing(bool on) { g_skip_fetch_wait = on; }

double host_link_bytes_per_s(Device device) {
  // meta computes nothing, its copies take no time: it answers what cuda:0 would (so a dry run's
  // plan is the plan of the run it stands for)
  if (device.is_meta()) return host_link_bytes_per_s(Device::cuda(0));
  REEL_CHECK(!device.is_cpu(), "host_link_bytes_per_s: ", device,
             " is host memory itself; there is no device<->host link to measure (offload needs a cuda device)");
  static std::mutex mutex;
  static std::map<std::string, double> measured;
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = measured.find(device.str()); it != measured.end()) return it->second;

  NoGrad no_grad;
  constexpr int64_t kBytes = int64_t{16} << 20;
  const Tensor t = empty({kBytes / 4}, DType::f32, device);
  PinnedBuffer host(kBytes);
  const Stream copy = Stream::copy(device);
  copy.wait(Stream::compute(device).record());
  const auto seconds = [&](bool to_host) {
    const auto start = std::chrono::steady_clock::now();
    if (to_host) copy_async(t, host, copy);
    else copy_async(host, t, copy);
    copy.record().synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  seconds(true);  // warm: first-touch of the pages, the stream's creation
  seconds(false);
  double d2h = 1e30, h2d = 1e30;
  for (int k = 0; k < 3; ++k) {
    d2h = std::min(d2h, seconds(true));
    h2d = std::min(h2d, seconds(false));
  }
  const double bytes_per_s = static_cast<double>(kBytes) / std::max({d2h, h2d, 1e-9});
  measured[device.str()] = bytes_per_s;
  return bytes_per_s;
}

}  // namespace reel::autograd
