// The differentiable ops: each runs kernels:: and, when grad mode is on and an input requires
// grad, records itself on the tape (one file per op family under autograd/ops/, forward and
// backward side by side). Broadcasting follows NumPy; gradients of broadcast inputs are summed back down.
// Inside an autograd::Autocast scope, matmul, sum/mean and the binary ops cast their inputs first
// by the policy table (autograd/autocast.h); the casts are recorded ops (cast, below).
//
//   Tensor h = gelu(matmul(x, w) + b);     // (B, D) @ (D, H) + (H) -> (B, H)
//   Tensor loss = sum(h * h) / 2.0;
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace reel {

// reel::exp/log/tanh/sqrt/abs below would hide the <cmath> functions from unqualified calls on
// doubles made anywhere inside namespace reel (core/philox.h does so); joining them keeps both
// working.
using std::abs;
using std::exp;
using std::log;
using std::max;
using std::sqrt;
using std::tanh;

// ---- arithmetic (autograd/ops/elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor neg(const Tensor& x);  // a unary op of the list below

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator/(double a, const Tensor& b) { return div(a, b); }

// ---- matmul (autograd/ops/matmul.cpp) ----
// a (..., M, K) @ b (..., K, N) -> (..., M, N), numpy.matmul rules; transpose_a / transpose_b use
// the transpose of the last two dims (q @ k^T is matmul(q, k, false, true)).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// ---- reductions (autograd/ops/sum.cpp) ----
// Over `axes` (negative counts from the end; empty = all dims); keepdim leaves size-1 dims.
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);

// ---- max along one axis (autograd/ops/max.cpp) ----
// The values, as torch.max(x, dim).values: the gradient goes to the first maximum of each slice
// (its index is saved for backward). argmax gives the indices (i64) and records nothing.
Tensor max(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);

// ---- elementwise functions (autograd/ops/elementwise.cpp) ----
// One per line of REEL_UNARY_OPS (kernels/op_kinds.h), which defines them; the backward of each
// is one fused pass (kernels::unary_backward). neg is declared with the arithmetic above.
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // tanh approximation, as GPT-2
Tensor sigmoid(const Tensor& x);
Tensor silu(const Tensor& x);  // x * sigmoid(x), a.k.a. swish
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);   // gradient sign(x), 0 at 0
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor softplus(const Tensor& x);  // log(1 + e^x), computed without overflow

// ---- comparisons and selection (autograd/ops/elementwise.cpp) ----
// Masks in the inputs' floating dtype: 1 where `a op b`, else 0 (NaN compares false, except ne).
// Broadcasting; not differentiable (the result never requires grad). One pair per line of
// REEL_COMPARE_OPS.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, double b);
// a where cond is nonzero, else b (torch.where; cond is typically a mask from the functions
// above, in a's dtype). The three broadcast together. Differentiable in a and b (each gets the
// gradient where it was picked, summed down to its shape); cond gets no gradient.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- shape ops (autograd/ops/view.cpp, transpose.cpp, slice.cpp, expand.cpp, concat.cpp) ----
// Named and behaving as in PyTorch. All but concat return views sharing the input's storage
// (reshape and contiguous copy only when they must; split and chunk return views). The Tensor
// methods of the same names (x.t(), x.view(...), ...) record these same ops when x requires grad.
// Dims may be negative (counted from the end).
Tensor view(const Tensor& x, Shape shape);     // needs compatible strides; one dim may be -1
Tensor reshape(const Tensor& x, Shape shape);  // a view when possible, else a copy
Tensor flatten(const Tensor& x);               // reshape to (numel)
Tensor contiguous(const Tensor& x);            // x itself when already contiguous
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, std::vector<int64_t> dims);
Tensor squeeze(const Tensor& x, int64_t dim);    // x itself when that dim is not of size 1
Tensor unsqueeze(const Tensor& x, int64_t dim);  // dim in [-rank-1, rank]
Tensor expand(const Tensor& x, Shape shape);      // size-1 dims broadcast; -1 keeps a dim
// x[..., start:end:step, ...] along dim, python rules (negative start/end count from the end,
// clamped); step > 0.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);  // drops dim
// Tensors of one dtype and device, equal in every dim but `dim`, end to end along it (a copy).
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pieces of the given sizes along dim (they must add up to its size); chunk: n pieces of
// ceil(size / n), the last smaller, fewer than n when the size runs out (torch.chunk).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim = 0);

// ---- dtype cast (autograd/ops/cast.cpp) ----
// x in another floating dtype (to bf16/f16: round to nearest even), recorded: the gradient is cast
// back to x's dtype. x itself, nothing recorded, when it already has that dtype. Autocast's casts
// (autograd/autocast.h) are these. (Tensor::to(DType) is not recorded: its copy is cut from the graph.)
Tensor cast(const Tensor& x, DType dtype);

// ---- dropout (autograd/ops/dropout.cpp) ----
// Zeroes each element with probability p and scales the rest by 1 / (1 - p). The mask is a pure
// function of a Philox stream (seed, offset) taken from `gen` (the default generator when null),
// recorded on the tape so backward and checkpoint replays reproduce it exactly. Identity when
// !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace reel
