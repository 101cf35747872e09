// Fuzzes the checkpoint policy parser (--checkpoint none | every:K | sqrt | list:i,j | selective |
// budget:SIZE): what parses prints back as text that parses to the same policy (a crash if not),
// and plans over a chain of units.
#include <initializer_list>

#include "autograd/checkpoint.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_one(data, size, [](const std::string& text) {
    using reel::autograd::CheckpointPolicy;
    const CheckpointPolicy policy = CheckpointPolicy::parse(text);
    bool prints_back = false;  // to text that parses, as this same policy
    try {
      prints_back = CheckpointPolicy::parse(policy.str()) == policy;
    } catch (const reel::Error&) {
    }
    if (!prints_back) __builtin_trap();
    for (int64_t n : {0, 1, 7, 64}) policy.plan(n);  // the plan of what parsed must hold too
  });
}
