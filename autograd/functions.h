// The differentiable ops: each runs kernels:: and, when grad mode is on and an input requires
// grad, records itself on the tape (one file per op under autograd/ops/, forward and backward
// side by side). Broadcasting follows NumPy; gradients of broadcast inputs are summed back down.
//
//   Tensor h = gelu(matmul(x, w) + b);     // (B, D) @ (D, H) + (H) -> (B, H)
//   Tensor loss = sum(h * h) / 2.0;
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace reel {

// reel::exp/log/tanh below would hide the <cmath> functions from unqualified calls on doubles
// made anywhere inside namespace reel (core/philox.h does so); joining them keeps both working.
using std::exp;
using std::log;
using std::tanh;

// ---- arithmetic (autograd/ops/add.cpp, sub.cpp, mul.cpp, div.cpp) ----
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
Tensor neg(const Tensor& x);

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

// ---- elementwise functions (autograd/ops/<name>.cpp) ----
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor gelu(const Tensor& x);  // tanh approximation, as GPT-2
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);

// ---- dropout (autograd/ops/dropout.cpp) ----
// Zeroes each element with probability p and scales the rest by 1 / (1 - p). The mask is a pure
// function of a Philox stream (seed, offset) taken from `gen` (the default generator when null),
// recorded on the tape so backward and checkpoint replays reproduce it exactly. Identity when
// !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace reel
