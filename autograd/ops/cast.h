// cast: x converted to another floating dtype (Tensor::to's rounding: to bf16/f16 round to nearest
// even, NaN/inf kept; up to f32 exact). A recorded op, so that autocast's casts (autograd/autocast.h)
// are nodes a checkpoint replay repeats. Backward casts the gradient back to x's dtype: the
// gradient of an f32 master weight whose bf16 copy fed a GEMM is f32. Nothing is saved.
//
// A cast of a parameter (a leaf that requires grad, or a view of one) remembers it in `source`
// (detached: its data, which lives anyway, no autograd state). An op that saves that cast's output
// (a GEMM saving its bf16 weight) then keeps the parameter instead and casts it again when backward
// reads it (autograd/checkpoint.cpp, SavedTensor::recast_from): the 16-bit copy is not an activation
// between forward and backward. The same bits come back (the cast rounds the same value the same
// way), and a write to the parameter in between is refused, as for a save of the parameter itself.
#pragma once
#include <string>

#include "autograd/op.h"

namespace reel::autograd::ops {

struct Cast final : Op {
  DType from, to;  // x's dtype (the gradient's), the output's
  Tensor source;   // x detached when x is a parameter or a view of one, else undefined
  Cast(DType from, DType to) : from(from), to(to) {}
  const char* name() const override { return "cast"; }
  std::string attributes() const override { return std::string(dtype_name(from)) + "->" + dtype_name(to); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].to(to)}; }
  Tensors backward(const Tensors& grad, BackwardCtx&) const override { return {grad[0].to(from)}; }
};

}  // namespace reel::autograd::ops
