// The embedding family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/embedding.cpp) and reel::kernels::cuda
// (kernels/cuda/embedding.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/embedding.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.

void embedding_forward(const Tensor& ids,    // (N) i32/i64 in [0, V)
                       const Tensor& table,  // (V, C)
                       const Tensor& out);   // (N, C) out
void embedding_backward(const Tensor& dout,   // (N, C)
                        const Tensor& ids,    // (N)
                        const Tensor& dtable);// (V, C) out
