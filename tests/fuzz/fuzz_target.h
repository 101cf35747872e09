// What every fuzz harness in tests/fuzz shares: the libFuzzer entry point's signature, and the
// rule they check. Any input must either parse or raise reel::Error; any other exception escapes
// the harness (libFuzzer reports it as a crash), and so do the sanitizers' findings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

// Runs `parse` on the input as a string; a reel::Error is an accepted outcome.
template <typename Parse>
int fuzz_one(const uint8_t* data, size_t size, Parse&& parse) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    parse(bytes);
  } catch (const reel::Error&) {
  }
  return 0;
}
