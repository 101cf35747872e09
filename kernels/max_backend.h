// The max family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/max.cpp) and reel::kernels::cuda
// (kernels/cuda/max.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/max.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.

void max_with_indices(const Tensor& x,        // (O, A, I): reduce A
                      const Tensor& values,   // (O, I) out
                      const Tensor& indices); // (O, I) i64 out
void max_backward(const Tensor& dy,       // (O, I)
                  const Tensor& indices,  // (O, I) i64 in [0, A)
                  const Tensor& dx);      // (O, A, I) out
