// The cross_entropy family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/cross_entropy.cpp) and reel::kernels::cuda
// (kernels/cuda/cross_entropy.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/cross_entropy.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.

// logits (N, V), targets (N) i32/i64 (in [0, V) or ignore_index) -> losses (N), lse (N); when
// dlogits (N, V) is defined also dlogits = (softmax - onehot) * grad_scale per non-ignored row.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& losses, const Tensor& lse, const Tensor& dlogits, double grad_scale);
// dloss (N) or one element (the same for every row), times `scale` -> dlogits (N, V).
void cross_entropy_backward(const Tensor& dloss, double scale, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, const Tensor& dlogits);
