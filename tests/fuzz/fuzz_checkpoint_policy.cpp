// Fuzzes the checkpoint policy parser (--checkpoint none | every:K | sqrt | list:i,j), and plans
// the parsed policy over a chain of units.
#include <initializer_list>

#include "autograd/checkpoint.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_one(data, size, [](const std::string& text) {
    const reel::autograd::CheckpointPolicy policy = reel::autograd::CheckpointPolicy::parse(text);
    for (int64_t n : {0, 1, 7, 64}) policy.plan(n);  // the plan of what parsed must hold too
    reel::autograd::CheckpointPolicy::parse(policy.str());  // and print back to what parses
  });
}
