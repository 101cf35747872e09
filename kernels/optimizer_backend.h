// The optimizer family's backend kernels, declared once for both backends: kernels/backends.h includes
// this list inside namespace reel::kernels::cpu (kernels/cpu/optimizer.cpp) and reel::kernels::cuda
// (kernels/cuda/optimizer.cu). No include guard: included only there, inside a namespace.
//
// Inputs arrive validated by the entry points (kernels/optimizer.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
// In place over lists of same-shape contiguous tensors.

void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step);
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay);
double sum_of_squares(const std::vector<Tensor>& tensors);  // accumulated in double, fixed order
void scale_(const std::vector<Tensor>& tensors, double factor);
