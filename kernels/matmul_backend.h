// The matmul family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/matmul.cpp) and reel::kernels::cuda
// (kernels/cuda/matmul.cu). No include guard: included only there, inside a namespace.
//
// a (B..., M, K), b (B..., K, N) already broadcast to out's batch dims (B..., M, N); any strides
// (kernels/matmul_layout.h). Eigen on the cpu, cuBLAS on cuda.
void matmul(const Tensor& a, const Tensor& b, const Tensor& out);
