// The doctest main shared by every test executable. A binary exits 77, which CTest reports as
// skipped, when it cannot run here: in the nvcc flavour on a machine without a GPU (every suite:
// the build exists to run on a device), or when a suite that needs a CUDA device
// (REEL_TEST_REQUIRES_CUDA) finds none.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "core/device.h"
#include "testing.h"

int main(int argc, char** argv) {
#if defined(REEL_CUDA_NVCC)
  const bool need_cuda = true;
  const char* why = "this is the nvcc build";
#else
  const bool need_cuda = reel::testing::requires_cuda_flag();
  const char* why = "this suite runs ops on cuda:0";
#endif
  if (need_cuda && !reel::cuda_available()) {
    std::printf("SKIPPED: %s and no CUDA device answers on this machine\n", why);
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
