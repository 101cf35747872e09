// The per-channel scale and shift of a norm op over channels (group_norm, batch_norm) whose weight
// and bias are optional inputs: the op's inputs are x (N, C, *), then the weight (C) and the bias (C)
// where given; an absent weight is ones and an absent bias zeros, as constants of x's dtype and device.
#pragma once
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel::autograd::ops {

struct ChannelAffine {
  Tensor weight, bias;  // (C) each
};

inline ChannelAffine channel_affine(const Tensors& in, bool has_weight, bool has_bias) {
  const Tensor& x = in[0];
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 0;
  ChannelAffine a;
  a.weight = has_weight ? in[1] : full({channels}, 1.0, x.dtype(), x.device());
  a.bias = has_bias ? in[has_weight ? 2 : 1] : zeros({channels}, x.dtype(), x.device());
  return a;
}

}  // namespace reel::autograd::ops
