// The dropout family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/dropout.cpp) and reel::kernels::cuda
// (kernels/cuda/dropout.cu). No include guard: included only there, inside a namespace.
//
// out: contiguous, floating, on the backend's device; p in [0, 1]. The formula is in
// kernels/dropout.h: CPU and CUDA masks are bit-identical.
void dropout_mask(const Tensor& out, double p, uint64_t seed, uint64_t offset);
