// The elementwise family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/elementwise.cpp) and reel::kernels::cuda
// (kernels/cuda/elementwise.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/elementwise.cpp), of the dtype they checked
// and already expanded to the output shape (broadcast dims have stride 0), with any strides; out
// is contiguous and preallocated.

void unary(UnaryOp op, const Tensor& x, const Tensor& out);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = s op a when scalar_left, else a op s.
void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_left, const Tensor& out);
