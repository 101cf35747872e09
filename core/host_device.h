// REEL_HOST_DEVICE marks functions that kernels call too (core/philox.h's generator, core/half.h's
// 16-bit conversions). Under nvcc (both of its passes over a .cu file: __CUDACC__) it is
// __host__ __device__. The emulated build compiles kernels/cuda/*.cu as host C++ (SIMT_EMULATE),
// where kernels/simt/simt.h defines __host__ and __device__ empty: there, as in every .cpp file,
// the annotation is nothing, whatever the include order.
#pragma once

#if defined(__CUDACC__)
#define REEL_HOST_DEVICE __host__ __device__
#else
#define REEL_HOST_DEVICE
#endif
