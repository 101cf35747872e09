// Generator: a seed plus a counter of Philox streams handed out. Each random op takes one
// stream id (`offset`) and records (seed, offset), so it can be replayed bit for bit.
//
// Replay-safe streams (docs/design.md, "Replay-safe steps"), as PyTorch's graph-safe Philox
// (seed_extragraph / offset_intragraph): a kernel that must not take a per-step stream id by value
// reads the seed and a window's base offset from a small device tensor and adds a delta that it
// takes by value: the stream's offset minus the base, the same in every window that draws the same
// streams. begin_window() moves the base to the next offset (optim::Accumulator calls it at each
// window's start); the device tensor is rewritten (one asynchronous copy, no host sync) at the
// window's first draw on that device. The streams are the same (seed, offset) as next_offset()'s.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>

namespace reel {

class Tensor;
struct Device;

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  // A fresh stream id; successive calls never repeat.
  uint64_t next_offset();
  void manual_seed(uint64_t seed);  // restarts the stream ids too
  // The next stream id, and putting it back: a measuring pass that draws streams (dropout) leaves
  // the generator where it found it.
  uint64_t offset();
  void set_offset(uint64_t offset);

  // A fresh stream as next_offset(), for a kernel on `device` that reads it from device memory:
  // *state is set to an i64 (2) tensor on `device` holding (seed, base) and the delta is returned;
  // the stream is (seed, base + delta), base + delta also in *offset when given. The tensor keeps its values while a caller holds it (a
  // later window whose base differs gets another tensor then), so a recorded op's backward and a
  // checkpoint replay read the stream their forward drew.
  uint64_t next_device_stream(Device device, Tensor* state, uint64_t* offset = nullptr);
  // Later device streams count their delta from the next offset (the start of a window).
  void begin_window();

 private:
  struct DeviceStreams;  // core/random_device.cpp
  std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
  uint64_t base_ = 0;  // begin_window()'s offset
  std::shared_ptr<DeviceStreams> device_streams_;  // created at the first device stream
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace reel
