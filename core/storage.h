// Storage: one allocation on one device, shared by every tensor that views it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace reel {

class Storage {
 public:
  // Allocates `bytes` on `device` from its caching allocator, tagged with the current category.
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }  // null while released
  size_t bytes() const { return bytes_; }  // the size, released or not
  Device device() const { return device_; }
  Category category() const { return category_; }
  // Re-attributes these bytes in the statistics (e.g. to Activation when saved for backward).
  void set_category(Category category);

  // The version counter: every in-place write to these bytes (Tensor::fill_ and copy_, the
  // optimizer updates) bumps it, before writing. The tape records it when it saves a tensor for
  // backward (or a checkpoint segment holds one for its replay) and compares before using it, so a
  // write in between raises instead of silently giving wrong gradients. Views share the storage,
  // and so the counter. Kernels writing the fresh outputs they allocated need not bump (nothing can
  // have saved them yet), and writes through data<T>() pointers are not seen. Relaxed atomic: one
  // increment per in-place call; it orders nothing, the data's own synchronisation does that.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Dropping the bytes while the storage itself stays (distributed/fsdp.h shards parameters this way):
  // release() gives them back to the caching allocator (they leave the category's statistics) and
  // data() is null until materialize() allocates bytes() again, in the same category. Every tensor
  // viewing the storage, and every slot the tape saved of it, keeps the same Storage throughout, so
  // whoever refills it (Tensor::restore_) serves them all. A kernel reaching a released storage
  // (Tensor::data_ptr) raises a reel::Error instead of reading null. The version is untouched:
  // releasing writes nothing. Both are no-ops when already in that state.
  void release();
  void materialize();
  bool released() const { return released_; }

 private:
  void* data_ = nullptr;
  bool released_ = false;
  size_t bytes_ = 0;
  Device device_;
  Category category_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace reel
