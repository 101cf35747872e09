# The CUDA kernels of the neural-network op families (kernels/cuda/nn_*.cu) against the CPU ones,
# every entry point of kernels/ops.h, determinism and bad indices (tests/test_cuda_nn_ops.cpp).
# Included by tests/CMakeLists.txt. It skips (exit 77) where no CUDA device answers.
reel_test(test_cuda_nn_ops test_cuda_nn_ops.cpp)
