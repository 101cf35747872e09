// The layernorm family: LayerNorm and RMSNorm over the last dim, GroupNorm over channel groups of
// (N, C, spatial...) tensors, forward and backward, in f32, f64, bf16 and f16, and LayerNorm with
// what makes its input fused in: the residual add (add_layernorm_forward) or the token + position
// embeddings (embedding_pos_layernorm_forward); their backward is layernorm_backward with the
// sum's other gradient added to dx (for the embeddings' with their backward after it in one call:
// embedding_pos_layernorm_backward). Plain kernels, no autograd: the tape
// (autograd/ops/layernorm.h) decides what to save and where dw/db go (a parameter's .grad).
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_LAYERNORM_H
#define REEL_KERNELS_LAYERNORM_H
#include "core/tensor.h"

namespace reel::kernels {

// x (N..., C), w (C), b (C). mean and rstd have the rows' shape (N...) and x's dtype (f32 for a
// bf16 or f16 x: the statistics stay f32); they are what backward needs, so the tape saves them
// instead of recomputing the row statistics.
// Dtypes: x, w, b (and dy) one floating dtype, f32, f64, bf16 or f16; the outputs y, dx, dw, db
// are in it. 16-bit values are widened to f32 on load, the statistics and sums are f32 (dw/db
// partials f64, as for f32), and each output element is rounded once. A 16-bit x with f32 weights
// is rejected (dtypes differ): autocast casts x, w and b down together (the norms are Lower in
// autograd/autocast.cpp, statistics f32 inside the kernel), so the mixed case has no caller.
//   LayerNorm: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased (/ C)
//   RMSNorm:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
struct LayerNormForward { Tensor y, mean, rstd; };   // (N..., C), (N...), (N...)
struct LayerNormBackward { Tensor dx, dw, db, drb; };  // (N..., C), (C), (C), (C) (drb: when asked)
struct RMSNormForward { Tensor y, rstd; };           // (N..., C), (N...)
struct RMSNormBackward { Tensor dx, dw; };           // (N..., C), (C)

LayerNormForward layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);

// The residual add fused into the LayerNorm after it: s = x + r (x, r (N..., C), one dtype, s
// rounded to it as the add would), then y = layer_norm(s), in one kernel launch: s is written in
// the sweep that reads x and r, and the statistics and y are the layernorm_forward's of s, bit for
// bit. mean and rstd are s's rows' (what layernorm_backward wants, with s as its x).
// rb (C) or undefined: the residual branch's bias (the bias of the linear that made r, left out of
// it), s = x + (r + rb), each add rounded to the dtype as the two adds would: the bits of
// add_layernorm_forward(x, r + rb). Same dtype and device as x.
struct AddLayerNormForward { Tensor s, y, mean, rstd; };  // (N..., C) twice, (N...) twice
AddLayerNormForward add_layernorm_forward(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b,
                                          double eps = 1e-5, const Tensor& rb = Tensor());

// The token + position embeddings fused into the LayerNorm after them (GPT's input and block 0's
// ln_1): s = embedding_pos_forward(ids, table, pos) (kernels/embedding.h: ids (B, T) i32/i64 in
// [0, V), table (V, C), pos (P, C) with T <= P), then y = layer_norm(s, w, b), in one kernel
// launch: s is written in the sweep that gathers the rows, and s, the statistics and y are the
// bits of embedding_pos_forward then layernorm_forward. Returns s (B, T, C), y, mean and rstd (B, T)
// (what layernorm_backward wants, with s as its x). A bad id: reel::Error naming this op and it,
// as embedding_pos_forward's (on cuda at the host's next wait: kernels/index_check.h).
AddLayerNormForward embedding_pos_layernorm_forward(const Tensor& ids, const Tensor& table, const Tensor& pos,
                                                    const Tensor& w, const Tensor& b, double eps = 1e-5);

// Where layernorm_backward puts dw or db (C): a fresh tensor (`into` undefined), or a buffer of the
// caller's (`into`: contiguous (C), x's dtype and device; a parameter's .grad, its gradient sink),
// written, or added to when `add` (the sum rounded to the dtype first, then added: the bits of
// into + a fresh gradient). Either way the kernel writes every element: no zero-fill first.
struct NormGradOut {
  Tensor into;
  bool add = false;
};

// dy (N..., C); x, w, mean, rstd as saved by the forward. dw and db are summed over all rows in
// a fixed order (fixed row chunks, partials added in chunk order): bit-identical run to run and
// for any number of threads. dx_add (x's shape, or undefined): a gradient that reaches x from
// elsewhere, added in the same launch: dx = dx_add + the LayerNorm's dx (that one rounded to the
// dtype first): add_layer_norm's ds = ds_ext + layernorm_backward(dy), no separate add pass.
// drb (null: none): the column sums of that dx (rows summed: the gradient of add_layernorm_forward's
// rb), in the same launch on cuda for C <= 256 (a third slab of the dw/db partials, the same
// fixed-order sums: double per row chunk, chunks in order; wider rows: in norm_params_kernel); on
// the cpu in acc_t, rows in order (linear's column sums, kernels::linear_grad_into_'s on the cpu).
LayerNormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd, const NormGradOut& dw = {}, const NormGradOut& db = {},
                                     const Tensor& dx_add = Tensor(), const NormGradOut* drb = nullptr);
// embedding_pos_layernorm_forward's backward: layernorm_backward(dy, s, w, mean, rstd, dw, db, ds)
// then embedding_pos_backward(its dx, ids, dtable, accumulate_table, dpos, accumulate_pos,
// ids_checked) (kernels/embedding.h), the same bits as those two calls; on cuda two launches
// instead of three: the LayerNorm's dw and db are finished in the embeddings' launch, by blocks
// beside the tables' (neither needs the other). Returns dx (s's gradient, ds included), dw, db.
LayerNormBackward embedding_pos_layernorm_backward(const Tensor& dy, const Tensor& s, const Tensor& w,
                                                   const Tensor& mean, const Tensor& rstd, const NormGradOut& dw,
                                                   const NormGradOut& db, const Tensor& ds, const Tensor& ids,
                                                   const Tensor& dtable, bool accumulate_table, const Tensor& dpos,
                                                   bool accumulate_pos, bool ids_checked = false);
RMSNormForward rmsnorm_forward(const Tensor& x, const Tensor& w, double eps = 1e-6);
RMSNormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);

// GroupNorm (Wu & He 2018), as torch.nn.functional.group_norm: x (N, C, *) with C channels in
// `groups` groups of C / groups consecutive channels; each (sample, group) is normalised over its
// channels and all spatial positions, then scaled and shifted per channel:
//   y[n, c, s] = (x[n, c, s] - mean[n, g]) * rstd[n, g] * w[c] + b[c],  g = c / (C / groups),
//   rstd = 1 / sqrt(var + eps), var biased. No running statistics: the same in training and eval,
// and independent of the other samples of the batch (so gradient accumulation stays exact).
struct GroupNormForward { Tensor y, mean, rstd; };   // (N, C, *), (N, groups), (N, groups)
struct GroupNormBackward { Tensor dx, dw, db; };     // (N, C, *), (C), (C)

GroupNormForward group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups,
                                    double eps = 1e-5);
// dw and db are summed over samples and positions in a fixed order: bit-identical run to run.
GroupNormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, int64_t groups);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_LAYERNORM_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/layernorm.cpp) and reel::kernels::cuda (kernels/cuda/layernorm.cu).
// Inputs arrive validated by the entry points (kernels/layernorm.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
#ifdef REEL_BACKEND_KERNELS
void layernorm_forward(const Tensor& x,    // (R, C)
                       const Tensor& w,    // (C)
                       const Tensor& b,    // (C)
                       double eps,
                       const Tensor& y,    // (R, C) out
                       const Tensor& mean, // (R) out
                       const Tensor& rstd);// (R) out
// s = x + (r + rb), then s's LayerNorm (kernels/layernorm.h add_layernorm_forward), in one launch.
void add_layernorm_forward(const Tensor& x, const Tensor& r,  // (R, C)
                           const Tensor& rb,                  // (C) or undefined (none)
                           const Tensor& w, const Tensor& b,  // (C)
                           double eps,
                           const Tensor& s, const Tensor& y,      // (R, C) out
                           const Tensor& mean, const Tensor& rstd);// (R) out
// s = table[ids[n]] + pos[n % T], then s's LayerNorm (kernels/layernorm.h
// embedding_pos_layernorm_forward), in one launch; ids (N = B * T), table (V, C), pos (P, C).
void embedding_pos_layernorm_forward(const Tensor& ids, const Tensor& table, const Tensor& pos, int64_t T,
                                     const Tensor& w, const Tensor& b,       // (C)
                                     double eps,
                                     const Tensor& s, const Tensor& y,       // (N, C) out
                                     const Tensor& mean, const Tensor& rstd);// (N) out
// dx_add: (R, C) or undefined (none): dx = dx_add + the LayerNorm's dx. dw, db: written, or added
// to where add_dw / add_db (the sums rounded to T first); never read otherwise (need no zeroing).
// drb: undefined (none) or (C) out, the column sums of dx, written or added to as dw and db are.
void layernorm_backward(const Tensor& dy, const Tensor& x,  // (R, C)
                        const Tensor& w,                     // (C)
                        const Tensor& mean, const Tensor& rstd,  // (R)
                        const Tensor& dx_add,                // (R, C) or undefined
                        const Tensor& dx,                    // (R, C) out
                        const Tensor& dw, const Tensor& db,  // (C) out
                        bool add_dw, bool add_db,
                        const Tensor& drb, bool add_drb);    // (C) out or undefined
// layernorm_backward on s (N = B * T rows), then embedding_pos_backward of its dx (kernels/embedding.h's
// backend contract for ids, dtable, dpos; T), in one call.
void embedding_pos_layernorm_backward(const Tensor& dy, const Tensor& s, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& ds, const Tensor& dx, const Tensor& dw,
                                      const Tensor& db, bool add_dw, bool add_db, const Tensor& ids,
                                      const Tensor& dtable, bool accumulate_table, const Tensor& dpos,
                                      bool accumulate_pos, int64_t T, bool check_ids);
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw);
// GroupNorm: S is the product of the spatial dims (1 for an (N, C) x); group g of sample n is the
// contiguous run x[n, g*C/G : (g+1)*C/G, :] of M = C/G * S values.
void group_norm_forward(const Tensor& x,                        // (N, C, S)
                        const Tensor& w, const Tensor& b,       // (C)
                        int64_t groups, double eps,
                        const Tensor& y,                        // (N, C, S) out
                        const Tensor& mean, const Tensor& rstd);// (N, G) out
void group_norm_backward(const Tensor& dy, const Tensor& x,     // (N, C, S)
                         const Tensor& w,                       // (C)
                         const Tensor& mean, const Tensor& rstd,// (N, G)
                         int64_t groups,
                         const Tensor& dx,                      // (N, C, S) out
                         const Tensor& dw, const Tensor& db);   // (C) out
#endif  // REEL_BACKEND_KERNELS
