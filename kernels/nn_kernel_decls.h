// The kernel entry points of the neural-network op families, as every backend declares them:
// kernels/cpu/nn_kernels.h includes this list inside namespace reel::kernels::cpu and
// kernels/cuda/nn_kernels.h inside reel::kernels::cuda, so the two backends keep one set of
// signatures. The shapes written next to the arguments are the flat, contiguous views the entry
// points (kernels/nn_ops.cpp) pass; the contracts are in those two headers.
// Included only by them, inside a namespace, after core/tensor.h and <vector>: no include guard.

// ---- LayerNorm and RMSNorm over rows (cpu/layernorm.cpp, cuda/nn_layernorm.cu) ---------------
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

// ---- softmax / log-softmax over rows (cpu/softmax.cpp, cuda/nn_softmax.cu) --------------------
void softmax_forward(const Tensor& x, bool log, const Tensor& y);                       // (R, C)
void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx);   // (R, C)

// ---- cross-entropy (cpu/cross_entropy.cpp, cuda/nn_cross_entropy.cu) --------------------------
// logits (N, V), targets (N) i32/i64 (in [0, V) or ignore_index) -> losses (N), lse (N); when
// dlogits (N, V) is defined also dlogits = (softmax - onehot) * grad_scale per non-ignored row.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& losses, const Tensor& lse, const Tensor& dlogits, double grad_scale);
// dloss (N) or one element (the same for every row), times `scale` -> dlogits (N, V).
void cross_entropy_backward(const Tensor& dloss, double scale, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, const Tensor& dlogits);

// ---- embedding (cpu/embedding.cpp, cuda/nn_embedding.cu) --------------------------------------
void embedding_forward(const Tensor& ids,    // (N) i32/i64 in [0, V)
                       const Tensor& table,  // (V, C)
                       const Tensor& out);   // (N, C) out
void embedding_backward(const Tensor& dout,   // (N, C)
                        const Tensor& ids,    // (N)
                        const Tensor& dtable);// (V, C) out

// ---- max with argmax along an axis, and its scatter backward (cpu/max_indices.cpp, cuda/nn_max.cu)
void max_with_indices(const Tensor& x,        // (O, A, I): reduce A
                      const Tensor& values,   // (O, I) out
                      const Tensor& indices); // (O, I) i64 out
void max_backward(const Tensor& dy,       // (O, I)
                  const Tensor& indices,  // (O, I) i64 in [0, A)
                  const Tensor& dx);      // (O, A, I) out

// ---- attention (cpu/attention.cpp, cuda/nn_attention.cu: D and Dv at most 128 there) ----------
void attention_forward(const Tensor& q,   // (BH, Tq, D)
                       const Tensor& k,   // (BH, Tk, D)
                       const Tensor& v,   // (BH, Tk, Dv)
                       double scale, bool causal,
                       const Tensor& out, // (BH, Tq, Dv) out
                       const Tensor& lse);// (BH, Tq) out
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, double scale, bool causal,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv);  // outs like q, k, v

// ---- optimizers, in place over lists of same-shape contiguous tensors (cpu/optimizer.cpp,
//      cuda/nn_optimizer.cu)
void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step);
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay);
double sum_of_squares(const std::vector<Tensor>& tensors);  // accumulated in double, fixed order
void scale_(const std::vector<Tensor>& tensors, double factor);
