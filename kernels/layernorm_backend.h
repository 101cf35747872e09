// The layernorm family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/layernorm.cpp) and reel::kernels::cuda
// (kernels/cuda/layernorm.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/layernorm.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.

void layernorm_forward(const Tensor& x,    // (R, C)
                       const Tensor& w,    // (C)
                       const Tensor& b,    // (C)
                       double eps,
                       const Tensor& y,    // (R, C) out
                       const Tensor& mean, // (R) out
                       const Tensor& rstd);// (R) out
void layernorm_backward(const Tensor& dy, const Tensor& x,  // (R, C)
                        const Tensor& w,                     // (C)
                        const Tensor& mean, const Tensor& rstd,  // (R)
                        const Tensor& dx,                    // (R, C) out
                        const Tensor& dw, const Tensor& db); // (C) out
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw);
