// tools/kernel_resources/samples/probe.cu: made-up kernels whose nvcc 13.0 output (sm_90) is the
// committed sample tests/test_kernel_resources.cpp reads:
//   nvcc -arch=sm_90 -cubin --resource-usage probe.cu -o probe.cubin 2> probe.ptxas
// add<T>: two instantiations, bound 256; plain: no __launch_bounds__, static shared memory;
// spill: 64 live floats per thread under a bound of 1024 threads (64 registers at most), so it spills.
template <typename T>
__global__ void __launch_bounds__(256) add(T* a, const T* b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
template __global__ void add<float>(float*, const float*, int);
template __global__ void add<double>(double*, const double*, int);

__global__ void plain(float* a) {
  __shared__ float s[128];
  s[threadIdx.x] = a[threadIdx.x];
  __syncthreads();
  a[threadIdx.x] = s[127 - threadIdx.x];
}

__global__ void __launch_bounds__(1024) spill(float* a, int n) {
  float r[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) r[i] = a[i * n + threadIdx.x];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 64; ++i) r[i] = r[i] * r[(i + k) % 64 == i ? i : (i + 1) % 64] + 1.f;
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) a[i * n + threadIdx.x] = r[i];
}
