// Storage: one allocation on one device, shared by every tensor that views it.
#pragma once
#include <cstddef>
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

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Category category_;
};

}  // namespace reel
