// Generator: a seed plus a counter of Philox streams handed out. Each random op takes one
// stream id (`offset`) and records (seed, offset), so it can be replayed bit for bit.
#pragma once
#include <cstdint>
#include <mutex>

namespace reel {

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

 private:
  std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace reel
