# The CUDA backend against the CPU: one table-driven harness over every op (tests/test_cuda_ops.cpp),
# plus a kernel launched through kernels/cuda/launch.h (tests/cuda_test_kernels.cu) to check that
# failures are reported. Included by tests/CMakeLists.txt. It skips (exit 77) where no CUDA device
# answers.
reel_test(test_cuda_ops test_cuda_ops.cpp)
if(REEL_HAS_CUDA_BACKEND)
  reel_cuda_sources(test_cuda_ops cuda_test_kernels.cu)
endif()
