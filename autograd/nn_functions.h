// The differentiable ops of MLPs, transformers and small CNNs: linear, LayerNorm/RMSNorm/GroupNorm,
// softmax, fused cross-entropy, the LM head fused with it (chunked), embedding, causal attention,
// 2-D max and average pooling, 2-D convolution. Each family is one header, autograd/ops/<family>.h:
// its tape ops (forward, what they save, backward, side by side) over the kernels of kernels/ops.h,
// and the user functions that record them, with their contracts. attention_composed is built from
// other ops, as a reference. A new family adds its line here. Inside an autograd::Autocast scope
// each user function casts its floating inputs first, by its row of the policy table
// (autograd/autocast.h): linear, conv2d, attention to 16 bits; softmax, the norms and the losses to f32.
//
//   Tensor x = embedding(ids, wte);                       // ids (B, T) -> (B, T, C)
//   Tensor y = attention(q, k, v);                        // q, k, v (B, H, T, D), causal
//   Tensor logits = linear(layer_norm(x, g, b), wte);     // (B, T, V), weights tied to wte
//   Tensor loss = cross_entropy(logits, targets);         // targets (B, T), mean over tokens
//   Tensor same = linear_cross_entropy(layer_norm(x, g, b), wte, targets);  // no (B, T, V) logits kept
#pragma once
#include "autograd/ops/attention.h"
#include "autograd/ops/batchnorm.h"
#include "autograd/ops/conv.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/embedding.h"
#include "autograd/ops/layernorm.h"
#include "autograd/ops/linear.h"
#include "autograd/ops/linear_cross_entropy.h"
#include "autograd/ops/pool.h"
#include "autograd/ops/softmax.h"
