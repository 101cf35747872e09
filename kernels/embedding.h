// The embedding family: gather rows of a table by integer ids (i32 or i64), and the
// deterministic scatter-add backward; embedding_pos adds the position table's row (n mod T) in
// the same gather, and its backward writes both tables' gradients in one launch. Plain kernels, no autograd. Tables of f32, f64, bf16 or f16:
// the gather copies bits; a 16-bit backward sums in f32 and rounds each row element once.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_EMBEDDING_H
#define REEL_KERNELS_EMBEDDING_H
#include "core/tensor.h"

namespace reel::kernels {

// ids (N...) i32 or i64 in [0, V), table (V, C) floating -> out (N..., C) = table[ids].
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
// dout (N..., C), ids (N...) -> dtable (V, C): row v = sum of dout rows at the positions where
// ids == v, added in position order. Deterministic: no float atomics, the result is
// bit-identical for any number of threads (see kernels/cpu/embedding.cpp for the strategy).
// ids_checked: the caller vouches that every id is in [0, num_embeddings) (the tape's backward,
// whose forward checked these very ids, unchanged since: saved tensors are version-checked), so
// the ids are not range-checked again; a direct call leaves it false and gets the check.
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings, bool ids_checked = false);

// Token plus position embedding in one launch (GPT's input): ids (B, T) i32/i64 in [0, V),
// table (V, C), pos (P, C) with T <= P and pos of table's dtype and device ->
// out (B, T, C) = table[ids[b, t]] + pos[t], the sum in acc_t and rounded once (as
// embedding_forward(ids, table) + embedding_forward(arange(T), pos) would add them). The
// positions are t itself: no position ids exist.
Tensor embedding_pos_forward(const Tensor& ids, const Tensor& table, const Tensor& pos);
// embedding_pos_forward's input checks (devices, dtypes, shapes: reel::Error naming `op`), for it
// and for the LayerNorm with the embeddings fused in (kernels/layernorm.h).
void check_embedding_pos_inputs(const char* op, const Tensor& ids, const Tensor& table, const Tensor& pos);
// Its backward, one launch for both gradients, each written into a given buffer:
//   dtable (V, C): row v = the sum of dout's rows where ids == v, in position order (as
//     embedding_backward), then added to dtable's values when accumulate_table (init + sum: the
//     rounding of a separate backward and an add);
//   dpos (P, C): row t < T = the sum over b of dout[b, t] in b order, rows t >= T zero, likewise
//     added to dpos's values when accumulate_pos.
// An undefined dtable or dpos is not computed. ids_checked as embedding_backward's.
void embedding_pos_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate_table,
                            const Tensor& dpos, bool accumulate_pos, bool ids_checked = false);
// embedding_pos_backward's input checks (reel::Error naming `op`), for it and for the LayerNorm
// backward with the embeddings' fused in (kernels/layernorm.h).
void check_embedding_pos_backward_inputs(const char* op, const Tensor& dout, const Tensor& ids, const Tensor& dtable,
                                         const Tensor& dpos);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_EMBEDDING_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/embedding.cpp) and reel::kernels::cuda (kernels/cuda/embedding.cu).
// Inputs arrive validated by the entry points (kernels/embedding.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
#ifdef REEL_BACKEND_KERNELS
void embedding_forward(const Tensor& ids,    // (N) i32/i64 in [0, V)
                       const Tensor& table,  // (V, C)
                       const Tensor& out);   // (N, C) out
// check_ids false: the entry point vouches for the ids (kernels/embedding.h's ids_checked), so
// cuda reports nothing (a bad id is still never used as an index).
void embedding_backward(const Tensor& dout,   // (N, C)
                        const Tensor& ids,    // (N)
                        const Tensor& dtable, // (V, C) out
                        bool check_ids);
// ids (N = B * T), table (V, C), pos (P, C), out (N, C): out[n] = table[ids[n]] + pos[n % T].
void embedding_pos_forward(const Tensor& ids, const Tensor& table, const Tensor& pos, const Tensor& out, int64_t T);
// dout (N, C), ids (N); dtable (V, C) and dpos (P, C), either undefined (not computed): see
// kernels/embedding.h's embedding_pos_backward (position t of row n is n % T).
void embedding_pos_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate_table,
                            const Tensor& dpos, bool accumulate_pos, int64_t T, bool check_ids);
#endif  // REEL_BACKEND_KERNELS
