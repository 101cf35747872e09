// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011):
// a counter-based generator. The output is a pure function of (key, counter), so any element of
// a random tensor can be computed independently, on any device, in any order. That is what makes
// a replayed dropout mask bit-identical and CPU/CUDA masks equal.
//
// reel's mapping: key = seed; counter = (block_lo, block_hi, offset_lo, offset_hi), where
// `offset` is a per-call stream id the Generator hands out and `block` = element index / 4.
// Element i takes 32-bit word i % 4 of its block.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"  // REEL_HOST_DEVICE

namespace reel {

struct PhiloxBlock { uint32_t v[4]; };

REEL_HOST_DEVICE inline PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                                  uint32_t k0, uint32_t k1) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(M0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(M1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += W0; k1 += W1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// The 32-bit word for element `index` of the stream (seed, offset).
REEL_HOST_DEVICE inline uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t block = index >> 2;
  const PhiloxBlock b = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                      static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return b.v[index & 3];
}

// Uniform in [0, 1) with 24 random bits: exactly representable in f32 and f64 alike, so every
// device and dtype sees the same number.
REEL_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  return static_cast<float>(philox_word(seed, offset, index) >> 8) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller over the pair of elements (2k, 2k+1): the even one takes the
// cosine branch, the odd one the sine branch. Computed in double so devices agree to rounding.
REEL_HOST_DEVICE inline double philox_normal(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t even = index & ~uint64_t{1};
  const double u1 = (static_cast<double>(philox_word(seed, offset, even) >> 8) + 1.0) / 16777216.0;  // (0, 1]
  const double u2 = static_cast<double>(philox_word(seed, offset, even + 1) >> 8) / 16777216.0;      // [0, 1)
  const double radius = sqrt(-2.0 * log(u1));
  const double angle = 6.283185307179586 * u2;
  return (index & 1) ? radius * sin(angle) : radius * cos(angle);
}

}  // namespace reel
