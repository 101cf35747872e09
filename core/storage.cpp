// Storage: allocation and release through the device's caching allocator.
#include "core/storage.h"

namespace reel {

Storage::Storage(size_t bytes, Device device)
    : bytes_(bytes), device_(device), category_(MemoryCategory::current()) {
  data_ = allocator_for(device).allocate(bytes, category_);
}

Storage::~Storage() {
  if (data_) allocator_for(device_).deallocate(data_, bytes_, category_);
}

void Storage::set_category(Category category) {
  if (category == category_) return;
  if (!released_) allocator_for(device_).recategorize(data_, bytes_, category_, category);
  category_ = category;
}

void Storage::release() {
  if (released_) return;
  if (data_) allocator_for(device_).deallocate(data_, bytes_, category_);
  data_ = nullptr;
  released_ = true;
}

void Storage::materialize() {
  if (!released_) return;
  data_ = allocator_for(device_).allocate(bytes_, category_);
  released_ = false;
}

}  // namespace reel
