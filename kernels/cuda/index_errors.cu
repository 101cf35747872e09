// kernels/cuda/index_errors.cu: the host side of the deferred index checks of kernels/cuda/
// index_errors.h: each device's error slots (kMaxPendingIndexed u64 on the device, all ones until a
// kernel reports), the launches pending since the last check, and the check that turns the first
// reported bad index into the entry point's reel::Error (kernels/index_check.h).
#include "kernels/cuda/index_errors.h"

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/index_check.h"

namespace reel::kernels::cuda {

namespace {

struct Pending {
  std::optional<IndexRange> range;  // the entry point's, if any
  Shape shape;                      // the entry point's shape of the index tensor (the message's)
};

struct DeviceSlots {
  std::mutex mutex;
  unsigned long long* slots = nullptr;  // (kMaxPendingIndexed, 2) on the device
  std::vector<Pending> pending;         // pending[i] took slots[i]
};

DeviceSlots& slots_of(int device) {
  static std::mutex mutex;
  // Never destroyed: the slots live as long as the process's devices (a static destructor would
  // run after the device runtime may be gone), and a global pointer keeps them reachable, so
  // LeakSanitizer does not take the device memory behind them for a leak at exit.
  static auto* const all = new std::vector<std::unique_ptr<DeviceSlots>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (all->size() <= static_cast<size_t>(device)) all->resize(device + 1);
  if (!(*all)[device]) (*all)[device] = std::make_unique<DeviceSlots>();
  return *(*all)[device];
}

// Sets the first n slots to "no error" (kNoBadIndex, 0): raw copies, no recorded kernel.
void clear_slots(unsigned long long* slots, size_t n) {
  std::vector<unsigned long long> none(2 * n, 0);
  for (size_t i = 0; i < n; ++i) none[2 * i] = kNoBadIndex;
  REEL_CUDA_CHECK(cudaMemcpy(slots, none.data(), none.size() * sizeof(unsigned long long), cudaMemcpyHostToDevice));
}

bool dry() {
#if defined(SIMT_EMULATE)
  return simt::dry_run();  // the meta device: nothing ran, nothing to read
#else
  return false;
#endif
}

}  // namespace

unsigned long long* acquire_index_error_slot(int device) {
  DeviceSlots& d = slots_of(device);
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    full = static_cast<int64_t>(d.pending.size()) == kMaxPendingIndexed;
  }
  if (full) {  // a host that never reads: wait here, once every kMaxPendingIndexed launches
    set_device(device);
    REEL_CUDA_CHECK(cudaDeviceSynchronize());
    check_index_errors(device);
  }
  std::lock_guard<std::mutex> lock(d.mutex);
  if (d.slots == nullptr) {  // cleared once: raw memory, no recorded fill
    set_device(device);
    void* p = nullptr;
    REEL_CUDA_CHECK(cudaMalloc(&p, 2 * kMaxPendingIndexed * sizeof(unsigned long long)));
    d.slots = static_cast<unsigned long long*>(p);
    clear_slots(d.slots, kMaxPendingIndexed);
  }
  d.pending.emplace_back();
  return d.slots + 2 * (d.pending.size() - 1);
}

void note_index_tensor(int device, const Tensor& idx) {
  DeviceSlots& d = slots_of(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  REEL_CHECK(!d.pending.empty(), "index error slots: an index tensor named for no launch");
  Pending& p = d.pending.back();
  if (const IndexedCall* call = current_indexed_call()) {
    p.range = call->range;
    p.shape = call->shape;
  } else {
    p.shape = {idx.numel()};
  }
}

void check_index_errors(int device) {
  if (dry()) return;
  DeviceSlots& d = slots_of(device);
  std::vector<Pending> done;
  int64_t position = -1, value = 0;
  size_t bad = 0;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    if (d.pending.empty()) return;
    const size_t n = d.pending.size();
    std::vector<unsigned long long> host(2 * n);  // (n, 2)
    set_device(device);
    // The host has just waited for the compute stream: this small copy waits for nothing.
    REEL_CUDA_CHECK(cudaMemcpy(host.data(), d.slots, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n && position < 0; ++i)
      if (host[2 * i] != kNoBadIndex) {
        position = static_cast<int64_t>(host[2 * i]);
        value = static_cast<int64_t>(host[2 * i + 1]);
        bad = i;
      }
    // An error clears every slot read (the device is usable again); without one they are clear.
    if (position >= 0) clear_slots(d.slots, n);
    done.swap(d.pending);
  }
  if (position < 0) return;
  const Pending& p = done[bad];
  if (p.range) fail_out_of_range(*p.range, p.shape, position, value);
  throw IndexOutOfRange(position, value);
}

}  // namespace reel::kernels::cuda
