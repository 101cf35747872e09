// Fuzzes the IDX reader (Fashion-MNIST's format): the input is written to a file, which
// nn::read_idx reads (plain or gzip, as it detects).
#include <unistd.h>

#include <cstdio>

#include "fuzz_target.h"
#include "nn/datasets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/reel_fuzz_idx_" + std::to_string(getpid());
  return fuzz_one(data, size, [](const std::string& bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return;
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    reel::nn::read_idx(path);
  });
}
