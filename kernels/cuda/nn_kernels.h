// CUDA implementations behind kernels/nn_ops.h (kernels/cuda/nn_*.cu), with the signatures and
// contracts of kernels/cpu/nn_kernels.h: inputs arrive validated by the entry points (one cuda
// device, one floating dtype, shapes consistent), CONTIGUOUS and viewed as the flat shapes written
// next to each argument there; outputs are contiguous, preallocated on the same device, and every
// element of them is written (no output needs zeroing first: the tests poison allocations).
//
// One difference: the CPU entry points range-check index tensors on the host before the kernel
// runs, which a device cannot do without copying the indices back. Here the kernels check every
// index they read, never use a bad one (no out-of-bounds access), and store the smallest flat
// position of a bad one in a device error buffer; the launcher checks that buffer after the
// launch and throws IndexOutOfRange, which kernels/nn_ops.cpp turns into the CPU's message.
// Plain C++: no CUDA header is needed to call these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel::kernels::cuda {

// An index read by a kernel was out of range: `value` at flat `position` of the index tensor.
// Derives from reel::Error so that a caller who does not translate it still gets a reel::Error.
struct IndexOutOfRange : Error {
  IndexOutOfRange(int64_t position_, int64_t value_)
      : Error("index " + std::to_string(value_) + " at flat position " + std::to_string(position_) +
              " is out of range"),
        position(position_),
        value(value_) {}
  int64_t position, value;
};

// ---- nn_layernorm.cu: LayerNorm and RMSNorm over rows ------------------------------------------
void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);  // x, y (R, C); w, b (C); mean, rstd (R)
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db);
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw);

// ---- nn_softmax.cu: softmax / log-softmax over rows ---------------------------------------------
void softmax_forward(const Tensor& x, bool log, const Tensor& y);                      // (R, C)
void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx);  // (R, C)

// ---- nn_cross_entropy.cu -------------------------------------------------------------------------
// idx (N) i32/i64: how many indices are not `ignore` (when has_ignore); every other one must be in
// [0, limit), else IndexOutOfRange for the first that is not. The device side of the CPU entry
// points' host check, for the callers that need the count before the kernel (the Mean divisor).
int64_t check_indices(const Tensor& idx, int64_t limit, bool has_ignore, int64_t ignore);
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& losses, const Tensor& lse, const Tensor& dlogits, double grad_scale);
void cross_entropy_backward(const Tensor& dloss, double scale, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, const Tensor& dlogits);

// ---- nn_embedding.cu -----------------------------------------------------------------------------
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);  // (N), (V, C) -> (N, C)
void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);  // (N, C), (N) -> (V, C)

// ---- nn_max.cu: max with argmax along an axis, and its scatter backward --------------------------
void max_with_indices(const Tensor& x, const Tensor& values, const Tensor& indices);  // (O, A, I) -> (O, I)
void max_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx);         // (O, I) -> (O, A, I)

// ---- nn_attention.cu: D and Dv at most 128 (reel::Error above) -----------------------------------
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                       const Tensor& out, const Tensor& lse);  // (BH, Tq, D), (BH, Tk, D), (BH, Tk, Dv)
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, double scale, bool causal,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv);

// ---- nn_optimizer.cu: in place over lists of same-shape contiguous tensors ------------------------
void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step);
void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay);
double sum_of_squares(const std::vector<Tensor>& tensors);  // accumulated in double, fixed order
void scale_(const std::vector<Tensor>& tensors, double factor);

}  // namespace reel::kernels::cuda
