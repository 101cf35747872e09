# The simt emulator's own tests (kernels/simt): only in the emulated flavour, where the test
# kernels in tests/simt_test_kernels.cu are compiled as C++ against kernels/simt/simt.h.
if(NOT REEL_CUDA AND REEL_EMULATE_CUDA)
  reel_test(test_simt test_simt.cpp)
  reel_cuda_sources(test_simt simt_test_kernels.cu)
endif()
