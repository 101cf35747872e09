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

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
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

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Category category_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace reel
