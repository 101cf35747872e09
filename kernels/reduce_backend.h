// The reduce family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/reduce.cpp) and reel::kernels::cuda
// (kernels/cuda/reduce.cu). No include guard: included only there, inside a namespace.
//
// x permuted so that kept dims come first and `reduced_dims` trailing dims are reduced; out
// contiguous with the kept dims' shape. Deterministic on both backends: a fixed reduction order,
// no atomics.
void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out);
