// The softmax family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/softmax.cpp) and reel::kernels::cuda
// (kernels/cuda/softmax.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/softmax.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.

void softmax_forward(const Tensor& x, bool log, const Tensor& y);                       // (R, C)
void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx);   // (R, C)
