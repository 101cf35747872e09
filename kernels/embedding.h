// The embedding family: gather rows of a table by integer ids (i32 or i64), and the
// deterministic scatter-add backward. Plain kernels, no autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (kernels/embedding_backend.h) on cpu or cuda.
#pragma once
#include "core/tensor.h"

namespace reel::kernels {

// ids (N...) i32 or i64 in [0, V), table (V, C) floating -> out (N..., C) = table[ids].
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
// dout (N..., C), ids (N...) -> dtable (V, C): row v = sum of dout rows at the positions where
// ids == v, added in position order. Deterministic: no float atomics, the result is
// bit-identical for any number of threads (see kernels/cpu/embedding.cpp for the strategy).
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings);

}  // namespace reel::kernels
