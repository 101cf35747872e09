// tests/cuda_test_kernels.h: host entry points into tests/cuda_test_kernels.cu, which exercises
// kernels/cuda/launch.h's checking in either flavour (nvcc or the simt emulator). Plain C++.
#pragma once

namespace reel::testing {
// Launches a kernel that does nothing with `threads` threads in one block, through
// kernels::cuda::launch on cuda:0. More than 1024 threads fails the launch.
void launch_noop_kernel(unsigned threads);
// REEL_CUDA_CHECK(cudaSetDevice(index)).
void checked_set_device(int index);
}  // namespace reel::testing
