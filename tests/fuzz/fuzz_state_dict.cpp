// Fuzzes loading a model's weights from bytes: safetensors bytes -> Module::load_state_dict of a
// small MLP (names, shapes and dtypes must be checked, never trusted).
#include <memory>

#include "fuzz_target.h"
#include "nn/layers.h"
#include "nn/safetensors.h"
#include "nn/sequential.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static reel::nn::Sequential* model = [] {
    auto* m = new reel::nn::Sequential();
    m->push_back(std::make_shared<reel::nn::Linear>(4, 3));
    m->push_back(std::make_shared<reel::nn::Linear>(3, 2));
    return m;
  }();
  return fuzz_one(data, size, [](const std::string& bytes) {
    model->load_state_dict(reel::nn::from_safetensors_bytes(bytes));
  });
}
