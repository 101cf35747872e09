// Fused cross-entropy over logits (N, V) with integer targets, on the CPU.
//
// Forward, one task per row: a single sweep over the logits keeps a running max m and a running
// sum s of exp(x - m), rescaling s by exp(m_old - m_new) when a block raises the max (the online
// softmax of Milakov & Gimelshein 2018, by blocks of 2048 so that exp stays vectorised). The row's
// log-sum-exp is m + log(s); the loss is lse - x[target]. The (N, V) probability matrix never
// exists. When the caller asks for the gradient in the same call (llm.c's fused classifier), the
// sweep also stores exp(x - running max) into dlogits and a second sweep over that row, still in
// L1/L2, rescales it to (softmax - onehot(target)) * g: one exp per logit in all (exp is what
// bounds this kernel on a CPU), and training never reads the logits again in backward.
//
// Backward from the saved lse (N): p = exp(x - lse), dlogits = (p - onehot) * dloss_row.
// Numerics: the fused path computes p = exp(x - m_k) * exp(m_k - max - log s) from exact maxima,
// which is more precise than exp(x - lse) with lse rounded to the logits' dtype; the two agree to
// a few ulps of the dtype times |lse| (they differ visibly in f32 only for logits of order 1e4).
// The sum of exps is double (wider than the dispatch's acc_t); the max, the exps and the gradient
// arithmetic run in acc_t (loads T -> acc_t, stores acc_t -> T: no-ops for f32 and f64). lse and
// the per-row losses are written in acc_t (the entry point rounds the losses to T).
// bf16 and f16: each row is widened into per-thread f32 buffers and run through the f32 code (the
// fused exps kept in f32 too), and dlogits rounded once to T on store.
//
// The count of non-ignored targets and the f64 reduction of the per-row losses (in kLossLanes'
// order, the cuda block's) are small host loops, run by the forward (the count by
// cross_entropy_count, before it, under CrossEntropyPlan's fallback: cuda's launches).
//
// mse_loss: one pass per element, forward (x - t)^2 into acc_t, backward 2 (x - t) g stored as T;
// the entry point sums the squares (kernels::sum) for Sum and Mean.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/exp_ftz.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kBlock = 2048;  // online-softmax block: long enough for SIMD, short enough for L1

template <typename T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

struct RowLse {
  double max;      // the row max (a logit, exact)
  double log_sum;  // log(sum(exp(x - max)));  lse = max + log_sum
};

// One sweep, blockwise-online max and sum of exp. With `e` set, also keeps e = exp(x - m_k) in it
// (m_k: the running max when block k was summed, stored in block_max[k]), so that the fused
// gradient needs one multiply per logit instead of a second exp.
template <typename T, typename acc_t>
RowLse row_lse(const T* x, int64_t V, T* e, acc_t* block_max) {
  acc_t m = -std::numeric_limits<acc_t>::infinity();
  double s = 0;
  for (int64_t c0 = 0, k = 0; c0 < V; c0 += kBlock, ++k) {
    const int64_t n = std::min(kBlock, V - c0);
    const ConstRow<T> bt(x + c0, n);
    const auto& blk = bt.template cast<acc_t>();  // bt itself when acc_t is T
    const acc_t bm = blk.maxCoeff();
    if (bm > m) {  // rescale what was summed against the old max (s is 0 while m is -inf)
      s = s == 0 ? 0 : s * std::exp(static_cast<double>(m) - static_cast<double>(bm));
      m = bm;
    }
    if (m == -std::numeric_limits<acc_t>::infinity()) {  // all -inf so far (masked classes): adds 0
      if (e != nullptr) {
        std::fill(e + c0, e + c0 + n, T(0));
        block_max[k] = m;
      }
      continue;
    }
    // NaN logits fall through `bm > m` and make s (hence lse and the loss) NaN, as they should.
    if (e == nullptr) {
      s += static_cast<double>(exp_ftz(blk - m).sum());
    } else {
      Row<T> eb(e + c0, n);
      eb = exp_ftz(blk - m).template cast<T>();  // masked (-inf) classes exactly 0
      s += static_cast<double>(eb.template cast<acc_t>().sum());
      block_max[k] = m;
    }
  }
  return {static_cast<double>(m), std::log(s)};
}

// The fused gradient from row_lse's e: d = e * exp(m_k - max - log_sum) * g per block, minus g at
// the target: (softmax - onehot) * g.
template <typename T, typename acc_t>
void fused_grad(int64_t V, const RowLse& r, const acc_t* block_max, int64_t target, double g, T* d) {
  for (int64_t c0 = 0, k = 0; c0 < V; c0 += kBlock, ++k) {
    const acc_t f = static_cast<acc_t>(std::exp(static_cast<double>(block_max[k]) - r.max - r.log_sum) * g);
    Row<T> db(d + c0, std::min(kBlock, V - c0));
    db = (db.template cast<acc_t>() * f).template cast<T>();
  }
  d[target] = static_cast<T>(static_cast<acc_t>(d[target]) - static_cast<acc_t>(g));
}

// d (V) = (softmax(x) - onehot(target)) * g with softmax = exp(x - lse) (the separate backward).
template <typename T, typename acc_t>
void row_grad(const T* x, int64_t V, acc_t lse, int64_t target, acc_t g, T* d) {
  const ConstRow<T> xt(x, V);
  const auto& xr = xt.template cast<acc_t>();  // xt itself when acc_t is T
  Row<T> dr(d, V);
  dr = (exp_ftz(xr - lse) * g).template cast<T>();
  dr[target] = static_cast<T>(static_cast<acc_t>(dr[target]) - g);
}

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
// The type the row kernels above see: T, or f32 for a 16-bit T (rows widened into a buffer).
template <typename T>
using RowT = std::conditional_t<kIs16<T>, float, T>;

// logits, dlogits: (N, V) or dlogits null; targets, losses, lse: (N).
template <typename T, typename acc_t, typename I>
void forward_impl(const T* logits, const I* targets, int64_t ignore_index, acc_t* losses, acc_t* lse, T* dlogits,
                  double grad_scale, int64_t N, int64_t V) {
  using W = RowT<T>;
  const int64_t blocks = (V + kBlock - 1) / kBlock;
#pragma omp parallel if (N > 1 && N * V >= kMinParallelElements)
  {
    std::vector<acc_t> block_max(static_cast<size_t>(blocks));  // per thread
    // 16-bit: this thread's widened row and its f32 dlogits row (V each); empty otherwise.
    std::vector<W> xb(kIs16<T> ? static_cast<size_t>(V) : 0), db(kIs16<T> && dlogits ? static_cast<size_t>(V) : 0);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = static_cast<int64_t>(targets[n]);
      const bool ignored = t == ignore_index;
      const W* row;  // (V)
      W* d;          // (V) or null
      if constexpr (kIs16<T>) {
        for (int64_t c = 0; c < V; ++c) xb[c] = static_cast<W>(logits[n * V + c]);
        row = xb.data();
        d = dlogits == nullptr ? nullptr : db.data();
      } else {
        row = logits + n * V;
        d = dlogits == nullptr ? nullptr : dlogits + n * V;
      }
      const RowLse r = row_lse(row, V, ignored ? nullptr : d, block_max.data());
      lse[n] = static_cast<acc_t>(r.max + r.log_sum);
      losses[n] = ignored ? acc_t(0) : static_cast<acc_t>((r.max - static_cast<double>(row[t])) + r.log_sum);
      if (d == nullptr) continue;
      if (ignored) std::fill(d, d + V, W(0));
      else fused_grad(V, r, block_max.data(), t, grad_scale, d);
      if constexpr (kIs16<T>)
        for (int64_t c = 0; c < V; ++c) dlogits[n * V + c] = static_cast<T>(d[c]);  // one rounding
    }
  }
}

// The f64 sum of losses (n) in the order of kLossLanes (kernels/cross_entropy.h), the cuda block's:
// bit for bit its sum.
template <typename acc_t>
double sum_in_lanes(const acc_t* losses, int64_t n) {
  double lanes[kLossLanes] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % kLossLanes] += static_cast<double>(losses[i]);
  for (int w = kLossLanes / 2; w > 0; w /= 2)
    for (int t = 0; t < w; ++t) lanes[t] += lanes[t + w];
  return lanes[0];
}

// The Mean's row scale read from count (() i64), else 1.
double count_scale(const Tensor& count) { return count.defined() ? REEL_MEAN_SCALE(count.data<int64_t>()[0]) : 1.0; }

// dloss: (N) when per_row, else one value; logits, dlogits: (N, V); targets, lse: (N).
template <typename T, typename acc_t, typename I>
void backward_impl(const T* dloss, bool per_row, double scale, const T* logits, const I* targets, const acc_t* lse,
                   int64_t ignore_index, T* dlogits, int64_t N, int64_t V) {
  parallel_for(N, N > 1 && N * V >= kMinParallelElements, [&](int64_t n) {
    const int64_t t = static_cast<int64_t>(targets[n]);
    T* d = dlogits + n * V;
    if (t == ignore_index) {
      std::fill(d, d + V, T(0));
      return;
    }
    // g rounded to T first, as the gradient tensor it stands for would be.
    const acc_t g = static_cast<T>(static_cast<double>(dloss[per_row ? n : 0]) * scale);
    if constexpr (kIs16<T>) {  // the row widened, its f32 gradient rounded once on store
      thread_local std::vector<float> xb, db;
      xb.resize(static_cast<size_t>(V));
      db.resize(static_cast<size_t>(V));
      for (int64_t c = 0; c < V; ++c) xb[c] = static_cast<float>(logits[n * V + c]);
      row_grad(xb.data(), V, lse[n], t, g, db.data());
      for (int64_t c = 0; c < V; ++c) d[c] = static_cast<T>(db[c]);
    } else {
      row_grad(logits + n * V, V, lse[n], t, g, d);
    }
  });
}

// x, t, sq: (n). sq = (x - t)^2 in acc_t.
template <typename T, typename acc_t>
void mse_forward_impl(const T* x, const T* t, acc_t* sq, int64_t n) {
  parallel_for(n, n >= kMinParallelStreamElements, [&](int64_t i) {
    const acc_t d = static_cast<acc_t>(x[i]) - static_cast<acc_t>(t[i]);
    sq[i] = d * d;
  });
}

// dloss: (n) when per_element, else one value; x, t, dx: (n). dx = 2 (x - t) g.
template <typename T, typename acc_t>
void mse_backward_impl(const T* dloss, bool per_element, double scale, const T* x, const T* t, T* dx, int64_t n) {
  parallel_for(n, n >= kMinParallelStreamElements, [&](int64_t i) {
    // g rounded to T first, as the gradient tensor it stands for would be.
    const acc_t g = static_cast<T>(static_cast<double>(dloss[per_element ? i : 0]) * scale);
    dx[i] = static_cast<T>(acc_t(2) * (static_cast<acc_t>(x[i]) - static_cast<acc_t>(t[i])) * g);
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void cross_entropy_count(const Tensor& targets, int64_t ignore_index, const Tensor& count) {
  const int64_t N = targets.numel();
  int64_t c = 0;
  if (targets.dtype() == DType::i32)
    for (int64_t n = 0; n < N; ++n) c += targets.data<int32_t>()[n] != ignore_index;
  else
    for (int64_t n = 0; n < N; ++n) c += targets.data<int64_t>()[n] != ignore_index;
  count.data<int64_t>()[0] = c;
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses,
                           const Tensor& lse, const Tensor& dlogits, double grad_scale_, bool mean,
                           const CrossEntropyPlan& plan, const Tensor& count, const Tensor& loss) {
  const int64_t N = logits.size(0), V = logits.size(1);
  if (!plan.count_first) cross_entropy_count(targets, ignore_index, count);
  const double scale = mean ? count_scale(count) : 1.0;
  const double grad_scale = grad_scale_ * scale;
  REEL_DISPATCH_FLOATING_AND_16(logits.dtype(), "cross_entropy_forward", {
    scalar_t* d = dlogits.defined() ? dlogits.data<scalar_t>() : nullptr;
    if (targets.dtype() == DType::i32)
      forward_impl<scalar_t, acc_t>(logits.data<scalar_t>(), targets.data<int32_t>(), ignore_index, losses.data<acc_t>(),
                             lse.data<acc_t>(), d, grad_scale, N, V);
    else
      forward_impl<scalar_t, acc_t>(logits.data<scalar_t>(), targets.data<int64_t>(), ignore_index, losses.data<acc_t>(),
                             lse.data<acc_t>(), d, grad_scale, N, V);
    if (loss.defined())
      loss.data<scalar_t>()[0] = static_cast<scalar_t>(sum_in_lanes(losses.data<acc_t>(), N) * scale);
  })
}

void cross_entropy_backward(const Tensor& dloss, const Tensor& count, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const double scale = count_scale(count);
  const bool per_row = dloss.numel() > 1;  // else one gradient for every row
  REEL_DISPATCH_FLOATING_AND_16(logits.dtype(), "cross_entropy_backward", {
    if (targets.dtype() == DType::i32)
      backward_impl<scalar_t, acc_t>(dloss.data<scalar_t>(), per_row, scale, logits.data<scalar_t>(),
                              targets.data<int32_t>(), lse.data<acc_t>(), ignore_index,
                              dlogits.data<scalar_t>(), N, V);
    else
      backward_impl<scalar_t, acc_t>(dloss.data<scalar_t>(), per_row, scale, logits.data<scalar_t>(),
                              targets.data<int64_t>(), lse.data<acc_t>(), ignore_index,
                              dlogits.data<scalar_t>(), N, V);
  })
}

void mse_loss_forward(const Tensor& input, const Tensor& target, const Tensor& sq) {
  REEL_DISPATCH_FLOATING_AND_16(input.dtype(), "mse_loss_forward", {
    mse_forward_impl<scalar_t, acc_t>(input.data<scalar_t>(), target.data<scalar_t>(), sq.data<acc_t>(),
                                      input.numel());
  })
}

void mse_loss_backward(const Tensor& dloss, double scale, const Tensor& input, const Tensor& target,
                       const Tensor& dinput) {
  const bool per_element = dloss.numel() > 1;  // else one gradient for every element
  REEL_DISPATCH_FLOATING_AND_16(input.dtype(), "mse_loss_backward", {
    mse_backward_impl<scalar_t, acc_t>(dloss.data<scalar_t>(), per_element, scale, input.data<scalar_t>(),
                                       target.data<scalar_t>(), dinput.data<scalar_t>(), input.numel());
  })
}

}  // namespace reel::kernels::cpu
