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
// out = dy * f'(saved); dy, saved and out of one shape.
void unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved, const Tensor& out);
// out = 1 where a op b (a op s), else 0.
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void compare_scalar(CompareOp op, const Tensor& a, double s, const Tensor& out);
// out = cond != 0 ? a : b.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);
