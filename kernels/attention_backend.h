// The attention family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/attention.cpp) and reel::kernels::cuda
// (kernels/cuda/attention.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/attention.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
// The CUDA kernels take D and Dv at most 128.

void attention_forward(const Tensor& q,   // (BH, Tq, D)
                       const Tensor& k,   // (BH, Tk, D)
                       const Tensor& v,   // (BH, Tk, Dv)
                       double scale, bool causal,
                       const Tensor& out, // (BH, Tq, Dv) out
                       const Tensor& lse);// (BH, Tq) out
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, double scale, bool causal,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv);  // outs like q, k, v
