// Autocast: mixed precision as a per-op policy, with the casts recorded on the tape.
//
//   { autograd::Autocast amp(DType::bf16);         // this thread, until the scope closes
//     Tensor loss = model(x, targets); }           // GEMMs, norms in bf16; softmax, loss in f32
//   autograd::backward(loss);                      // f32 parameters get f32 gradients
//   { autograd::Autocast off(std::nullopt); ... }  // plain dtypes again inside (scopes nest)
//
// Inside a scope each op listed in the ONE table of autocast.cpp casts its floating inputs before it
// runs (autograd::autocast, called by the op's user function first thing):
//   Lower    linear, matmul, conv2d, attention, layer_norm, rms_norm, group_norm, batch_norm: f32
//            and 16-bit inputs to the scope's dtype (the GEMMs run in 16 bits with f32 accumulation,
//            the norms compute and save their statistics in f32; outputs in 16 bits);
//   F32      softmax, log_softmax, cross_entropy, linear_cross_entropy, mse_loss, sum, mean:
//            16-bit inputs up to f32, output f32;
//   Promote  add, sub, mul, div, where, concat: inputs of mixed floating dtypes go to the widest
//            (f64 > f32 > 16 bits; bf16 with f16 gives f32), e.g. an f32 residual plus a bf16
//            block output is f32.
// Every other op (elementwise functions, activations, dropout, views, embedding) runs in its
// inputs' dtype: a GELU of a bf16 linear output is bf16. f64 inputs are never cast (gradient
// checks stay f64). linear_cross_entropy runs whole in f32 (h and W cast up): its dW accumulates
// over the row chunks, which a 16-bit buffer would round at every chunk.
//
// A cast is an ordinary recorded op (reel::cast, autograd/ops/cast.cpp): its backward casts the
// gradient back to the input's dtype, so a parameter (f32, the master weight) gets an f32 gradient
// while the GEMM that used its bf16 copy computed a bf16 one. A cast to the dtype a tensor already
// has is no cast: the tensor itself, nothing recorded. Because the casts are nodes, a checkpoint
// segment's replay (which re-runs recorded nodes, never the user's code) repeats them exactly, and
// its gradients are bit-identical to the run without checkpointing, whatever autocast state is
// current at backward. Backward itself runs with autocast off (Tape::backward), so a backward rule
// that calls a user function computes in the dtypes it is given.
//
// No cast cache: a weight used by two ops in one forward is cast twice (two nodes), which keeps
// every node's forward a function of its inputs alone. A GEMM that saves its 16-bit copy of a
// parameter keeps the parameter instead and casts it again in backward (autograd/ops/cast.h): the
// copy is no activation between forward and backward, and the gradients are the same bits.
#pragma once
#include <optional>

#include "autograd/op.h"
#include "core/tensor.h"

namespace reel::autograd {

// What an op listed in the autocast table does to its floating inputs inside a scope.
enum class CastPolicy {
  Lower,    // to the scope's 16-bit dtype
  F32,      // 16-bit inputs up to f32
  Promote,  // mixed floating dtypes to the widest of them
};
const char* cast_policy_name(CastPolicy p);

// The table's entry for `op` (its user function's name, e.g. "linear"); null if it has none (the
// op runs in its inputs' dtype).
const CastPolicy* autocast_policy(const char* op);

// This thread's autocast dtype (bf16 or f16), or nullopt outside any scope / inside an off scope.
std::optional<DType> autocast_dtype();

// RAII: sets this thread's autocast dtype while it lives, and restores the one before it. `dtype`
// is bf16 or f16 (reel::Error otherwise), or std::nullopt to turn autocast off inside.
class Autocast {
 public:
  explicit Autocast(std::optional<DType> dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

// The inputs `in` as op `op` runs them under this thread's autocast state: unchanged outside a
// scope or for an op the table does not list; else its floating inputs cast by its policy
// (reel::cast, recorded). Undefined and integer tensors pass through. reel::Error for an op name the
// table does not know, so a call site cannot silently miss its row.
Tensors autocast(const char* op, Tensors in);
// The same for one input (no one-element initializer list at the call site: GCC 12's -Warray-bounds
// misreads its inlined copy).
Tensor autocast(const char* op, const Tensor& x);

}  // namespace reel::autograd
