// Generator's device streams (core/random.h): per device, an i64 (2) tensor (seed, base) that the
// replay-safe kernels read, rewritten through core/staged_upload.h when the window's base or the
// seed changed since it was written.
#include <map>
#include <utility>

#include "core/allocator.h"
#include "core/random.h"
#include "core/staged_upload.h"
#include "core/tensor.h"

namespace reel {

struct Generator::DeviceStreams {
  struct PerDevice {
    Tensor state;  // i64 (2): (seed, base) as written
    uint64_t seed = 0, base = 0;
    bool written = false;
    StagedUpload upload;
  };
  std::map<std::pair<int, int>, PerDevice> devices;  // by (device type, index)
};

void Generator::begin_window() {
  std::lock_guard<std::mutex> lock(mutex_);
  base_ = offset_;
}

uint64_t Generator::next_device_stream(Device device, Tensor* state, uint64_t* offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (base_ > offset_) base_ = offset_;  // manual_seed or set_offset went back before the window's base
  if (!device_streams_) device_streams_ = std::make_shared<DeviceStreams>();
  DeviceStreams::PerDevice& d = device_streams_->devices[{static_cast<int>(device.type), device.index}];
  if (!d.written || d.seed != seed_ || d.base != base_) {
    // Ops still holding the tensor (a graph not yet run backward) keep their values: a new one then.
    // Held only here (its one handle, whose storage nothing else shares), it is rewritten in place,
    // so a steady training loop's kernels read the same address every window.
    if (!d.state.defined() || d.state.storage().use_count() > 1) {
      MemoryCategory scope(Category::Temporary);
      d.state = empty({2}, DType::i64, device);
    }
    const int64_t values[2] = {static_cast<int64_t>(seed_), static_cast<int64_t>(base_)};
    d.upload.write(d.state, values, sizeof values);
    d.seed = seed_;
    d.base = base_;
    d.written = true;
  }
  // A handle of its own on the storage (not a copy of the Generator's handle): the storage's use
  // count then says whether a caller still holds it.
  *state = Tensor(std::make_shared<TensorImpl>(*d.state.impl_ptr()));
  if (offset != nullptr) *offset = offset_;
  return offset_++ - base_;
}

}  // namespace reel
