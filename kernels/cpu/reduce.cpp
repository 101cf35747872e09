// CPU reductions. The caller permutes the input so that reduced dims trail; each output element
// then reduces one sub-tensor. When those sub-tensors are not contiguous runs (e.g. a column sum,
// the bias gradient of a linear layer), the input is copied contiguous first: one streaming pass
// beats strided access per output. Sums and means accumulate in double for every dtype: wider than
// the dispatch's acc_t (kept so, for f32 too, since a sum of many terms keeps its low bits).
// bf16 and f16: each element widened on load (to double for sums, to f32 for max, both exact), the
// result rounded once to the 16-bit type on store (an accumulating store adds in f32 and rounds
// once, as the elementwise add of out and the 16-bit sum would).
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/strided_loop.h"
#include "kernels/indexing.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using Acc = double;  // accumulator for every dtype: at least as wide as acc_t
static_assert(sizeof(Acc<float>) >= sizeof(acc_type_t<float>) && sizeof(Acc<double>) >= sizeof(acc_type_t<double>));
static_assert(sizeof(Acc<bf16>) >= sizeof(acc_type_t<bf16>) && sizeof(Acc<f16>) >= sizeof(acc_type_t<f16>));

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// The type a max compares in: T itself, f32 for the 16-bit types (exact widening; Eigen and
// std::numeric_limits know neither 16-bit type).
template <typename T>
using MaxT = std::conditional_t<kIs16<T>, float, T>;

// out + v in T (an accumulating store): for 16-bit in f32, rounded once.
template <typename T>
T add_in(T out, T v) {
  return static_cast<T>(static_cast<acc_type_t<T>>(out) + static_cast<acc_type_t<T>>(v));
}

template <typename T>
void reduce_impl(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out, bool accumulate) {
  const int kept = static_cast<int>(x.dim() - reduced_dims);
  const ReducedSplit split = split_reduced(x, reduced_dims);
  const int64_t R = shape_numel(split.reduced_shape);
  const int64_t O = out.numel();
  const T* src = x.data<T>();
  T* dst = out.data<T>();
  StridedLoop<1> inner(split.reduced_shape, {&split.reduced_strides});
  const int64_t* xstrides = x.strides().data();
  parallel_for(O, O > 1 && O * R >= kMinParallelStreamElements, [&](int64_t o) {
    int64_t base = 0;
    unravel_index<int64_t>(o, kept, x.shape().data(), [&](int d, int64_t i) { base += i * xstrides[d]; });
    const T* p = src + base;
    if (op == ReduceOp::Max) {
      using M = MaxT<T>;
      M m = -std::numeric_limits<M>::infinity();
      bool nan = false;
      for (int64_t r = 0; r < inner.runs(); ++r) {
        const int64_t off = inner.run_offsets(r)[0];
        const int64_t s = inner.strides[0].back();
        if constexpr (!kIs16<T>) {
          if (s == 1) {
            const T v = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p + off, inner.inner())
                            .template maxCoeff<Eigen::PropagateNaN>();
            nan |= v != v;
            m = v > m ? v : m;
            continue;
          }
        }
        for (int64_t i = 0; i < inner.inner(); ++i) {
          const M v = static_cast<M>(p[off + i * s]);
          nan |= v != v;
          m = v > m ? v : m;
        }
      }
      dst[o] = static_cast<T>(nan ? std::numeric_limits<M>::quiet_NaN() : m);
    } else {
      Acc<T> acc = 0;
      for (int64_t r = 0; r < inner.runs(); ++r) {
        const int64_t off = inner.run_offsets(r)[0];
        const int64_t s = inner.strides[0].back();
        const T* q = p + off;
        if constexpr (!kIs16<T>) {
          if (s == 1) {  // Eigen keeps several vector accumulators: not bound by one add chain
            acc += Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(q, inner.inner()).template cast<double>().sum();
            continue;
          }
        }
        for (int64_t i = 0; i < inner.inner(); ++i) acc += static_cast<Acc<T>>(q[i * s]);
      }
      const T v = static_cast<T>(op == ReduceOp::Mean ? acc / static_cast<Acc<T>>(R) : acc);
      dst[o] = accumulate ? add_in(dst[o], v) : v;
    }
  });
}

// Column reductions (kept dims contiguous and innermost in memory, reduced dims outer, e.g. the
// bias gradient: sum over rows of (N, C)): a task owns a block of kBlock output columns and
// streams over the rows, adding whole row segments (four rows per pass over its accumulators), so
// every input byte is read once, in order. Sums of many rows also split the rows into chunks of
// kRowChunk, each summed on its own and the chunks' sums added in chunk order after: the char
// GPT's (2048, 96) bias gradients were one task on one thread. The tasks come from the shape, not
// the thread count, so the bits do not depend on it.
template <typename T>
bool reduce_columns(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out, bool accumulate) {
  const ReducedSplit split = split_reduced(x, reduced_dims);
  StridedLoop<1> cols(split.kept_shape, {&split.kept_strides}), rows(split.reduced_shape, {&split.reduced_strides});
  if (cols.runs() != 1 || cols.strides[0].back() != 1 || rows.runs() != 1) return false;
  const int64_t C = cols.inner(), R = rows.inner(), row_stride = rows.strides[0].back();
  const T* src = x.data<T>();
  T* dst = out.data<T>();
  constexpr int64_t kBlock = 256, kRowChunk = 512;
  const bool is_max = op == ReduceOp::Max;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
  const int64_t chunks = is_max ? 1 : (R + kRowChunk - 1) / kRowChunk;  // a max needs no order
  std::vector<double> partial(static_cast<size_t>(chunks > 1 ? chunks * C : 0));  // (chunks, C)
  const bool parallel = blocks * chunks > 1 && R * C >= kMinParallelStreamElements;
  auto finish = [&](int64_t j, double total) {  // output j from its whole sum
    const T v = static_cast<T>(op == ReduceOp::Mean ? total / static_cast<double>(R) : total);
    dst[j] = accumulate ? add_in(dst[j], v) : v;
  };
  parallel_for(blocks * chunks, parallel, [&](int64_t task) {
    const int64_t block = task / chunks, chunk = task % chunks;
    const int64_t c0 = block * kBlock, n = std::min(kBlock, C - c0);
    const int64_t r0 = chunks > 1 ? chunk * kRowChunk : 0, r1 = chunks > 1 ? std::min(R, r0 + kRowChunk) : R;
    double acc[kBlock];
    if (is_max) {
      bool nan[kBlock];
      for (int64_t j = 0; j < n; ++j) {
        acc[j] = -std::numeric_limits<double>::infinity();
        nan[j] = false;
      }
      for (int64_t r = r0; r < r1; ++r) {
        const T* p = src + r * row_stride + c0;
        for (int64_t j = 0; j < n; ++j) {
          const double v = static_cast<double>(p[j]);  // exact for every dtype
          nan[j] |= v != v;
          acc[j] = v > acc[j] ? v : acc[j];
        }
      }
      for (int64_t j = 0; j < n; ++j)
        dst[c0 + j] = nan[j] ? static_cast<T>(std::numeric_limits<double>::quiet_NaN()) : static_cast<T>(acc[j]);
      return;
    }
    std::fill_n(acc, n, 0.0);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {  // the same additions, in the same order, as one row at a time
      const T* p = src + r * row_stride + c0;
      for (int64_t j = 0; j < n; ++j)
        acc[j] = acc[j] + static_cast<double>(p[j]) + static_cast<double>(p[j + row_stride]) +
                 static_cast<double>(p[j + 2 * row_stride]) + static_cast<double>(p[j + 3 * row_stride]);
    }
    for (; r < r1; ++r) {
      const T* p = src + r * row_stride + c0;
      for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(p[j]);
    }
    if (chunks > 1) {
      std::copy(acc, acc + n, partial.data() + chunk * C + c0);
      return;
    }
    for (int64_t j = 0; j < n; ++j) finish(c0 + j, acc[j]);
  });
  if (chunks > 1) {  // the chunks' sums, in chunk order
    for (int64_t j = 0; j < C; ++j) {
      double total = partial[static_cast<size_t>(j)];
      for (int64_t k = 1; k < chunks; ++k) total += partial[static_cast<size_t>(k * C + j)];
      finish(j, total);
    }
  }
  return true;
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out, bool accumulate) {
  if (out.numel() == 0) return;
  bool done = false;
  if (x.numel() > 0 && reduced_dims > 0 && reduced_dims < x.dim())
    REEL_DISPATCH_FLOATING_AND_16(x.dtype(), op_name(op),
                           done = reduce_columns<scalar_t>(op, x, reduced_dims, out, accumulate))
  if (done) return;
  Tensor in = x;
  if (x.numel() > 0 && reduced_dims > 0) {
    const ReducedSplit split = split_reduced(x, reduced_dims);
    StridedLoop<1> inner(split.reduced_shape, {&split.reduced_strides});
    if (inner.strides[0].back() != 1 && inner.inner() > 1) in = untracked::contiguous(x);
  }
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), op_name(op), reduce_impl<scalar_t>(op, in, reduced_dims, out, accumulate))
}

}  // namespace reel::kernels::cpu
