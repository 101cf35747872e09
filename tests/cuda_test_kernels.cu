// tests/cuda_test_kernels.cu: a kernel that does nothing, launched through kernels/cuda/launch.h,
// so that the tests can see a failed launch and a failed runtime call become reel::Error with
// the kernel's (or call's) name and CUDA's error. Built by nvcc or as C++ against kernels/simt.
#include "cuda_test_kernels.h"
#include "kernels/cuda/launch.h"

namespace reel::testing {

namespace {
__global__ void noop_kernel(int) {}
}  // namespace

void launch_noop_kernel(unsigned threads) {
  kernels::cuda::set_device(0);
  kernels::cuda::launch("noop_kernel", noop_kernel, dim3(1), dim3(threads), 0, 0);
  REEL_CUDA_CHECK(cudaDeviceSynchronize());
}

void checked_set_device(int index) { REEL_CUDA_CHECK(cudaSetDevice(index)); }

}  // namespace reel::testing
