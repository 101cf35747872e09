// CPU kernels of the conv family (kernels/conv.h): conv2d forward and its input, weight and bias
// backward, by im2col + the CPU GEMM (kernels/cpu/gemm.h: oneDNN's sgemm for f32 where reel is
// built with it, else Eigen; the engine of kernels/cpu/matmul.cpp too) and col2im.
//
// Per sample n and group g, with K = (C_in / G) * kH * kW rows of taps and L = OH * OW positions:
//   im2col:   col (G * K, L): row (c, i, j), column (oh, ow) holds the input that tap reads (0 in
//             the padding); a 1x1 kernel with stride 1 and no padding reads x itself, no copy.
//   forward:  y[n, g] (O_g, L)   = b (each row starts as its bias) + w[g] (O_g, K) @ col[g] (K, L)
//   input:    dcol[g] (K, L)     = w[g]^T (K, O_g) @ dy[n, g] (O_g, L), then col2im adds each
//             column entry back to the input it was read from
//   weight:   dw[g] (O_g, K)    += dy[n, g] (O_g, L) @ col[g]^T (L, K), summed over n
//   bias:     db[o] = sum over n of the sum of dy[n, o] (L)
//
// Threads and determinism. Forward and input backward: one task per sample, a per-thread col buffer
// ((G * K, L), as PyTorch's: the batch's full im2col would be N times that), each sample's GEMMs and
// col2im run serially on its thread. Weight backward: the batch is cut into a number of chunks fixed
// by N alone; each chunk sums its samples' products into its own partial dw in sample order, and the
// partials are added in chunk order: no atomics, and the same bits for any thread count (each GEMM
// runs on its one thread).
//
// The products accumulate inside gemm_serial, whose result is the dispatch's acc_t; the weight
// partials, dcol, col2im's sums and the bias sums are acc_t too. For f32 and f64 acc_t is T and the
// products write the outputs in place. bf16 and f16: im2col copies x's 16-bit values (exact), the
// GEMMs take 16-bit operands (gemm_serial's 16-bit path: oneDNN's bf16 / f16 matmul where the CPU
// has the instructions, else widened to f32 and the f32 GEMM: kernels/cpu/gemm.h's choice, made
// once per process), every sum is f32 (a per-thread (O, L) y or (C, H, W) dx buffer), and each
// output element is rounded once to the 16-bit type.
#include <algorithm>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using CMap = Eigen::Map<const Mat<T>>;

// Every size of one convolution, read from the (contiguous) tensors.
struct Dims {
  int64_t N, C, H, W;   // x
  int64_t O, kH, kW;    // w: (O, C / G, kH, kW)
  int64_t OH, OW;       // y
  int64_t G, Og, K, L;  // groups, output channels per group, taps per group (C / G * kH * kW), OH * OW
  Conv2d p;
  // A 1x1 kernel, stride 1, no padding: the col matrix of a sample is x itself.
  bool direct() const {
    return kH == 1 && kW == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 && p.padding[1] == 0;
  }
};

Dims dims_of(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2d& p) {
  Dims d{};
  d.N = x.size(0), d.C = x.size(1), d.H = x.size(2), d.W = x.size(3);
  d.O = w.size(0), d.kH = w.size(2), d.kW = w.size(3);
  d.OH = y.size(2), d.OW = y.size(3);
  d.G = p.groups, d.Og = d.O / d.G, d.K = w.size(1) * d.kH * d.kW, d.L = d.OH * d.OW;
  d.p = p;
  return d;
}

// Work worth a parallel region: a sample's product is at least this many multiply-adds.
bool worth_threads(const Dims& d) { return d.N * d.O * d.K * d.L >= (int64_t{1} << 16); }

// xn (C, H, W) -> col (C * kH * kW, L).
template <typename T>
void im2col(const T* xn, const Dims& d, T* col) {
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t i = 0; i < d.kH; ++i)
      for (int64_t j = 0; j < d.kW; ++j) {
        T* row = col + ((c * d.kH + i) * d.kW + j) * d.L;
        for (int64_t oh = 0; oh < d.OH; ++oh) {
          const int64_t ih = oh * d.p.stride[0] - d.p.padding[0] + i * d.p.dilation[0];
          T* out = row + oh * d.OW;
          if (ih < 0 || ih >= d.H) {
            std::fill(out, out + d.OW, T(0));
            continue;
          }
          const T* in = xn + (c * d.H + ih) * d.W;
          for (int64_t ow = 0; ow < d.OW; ++ow) {
            const int64_t iw = ow * d.p.stride[1] - d.p.padding[1] + j * d.p.dilation[1];
            out[ow] = (iw >= 0 && iw < d.W) ? in[iw] : T(0);
          }
        }
      }
}

// col (C * kH * kW, L) -> dxn (C, H, W): every entry added to the input it was read from, in row
// order (one thread per sample: a fixed order).
template <typename T>
void col2im(const T* col, const Dims& d, T* dxn) {
  std::fill(dxn, dxn + d.C * d.H * d.W, T(0));
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t i = 0; i < d.kH; ++i)
      for (int64_t j = 0; j < d.kW; ++j) {
        const T* row = col + ((c * d.kH + i) * d.kW + j) * d.L;
        for (int64_t oh = 0; oh < d.OH; ++oh) {
          const int64_t ih = oh * d.p.stride[0] - d.p.padding[0] + i * d.p.dilation[0];
          if (ih < 0 || ih >= d.H) continue;
          T* out = dxn + (c * d.H + ih) * d.W;
          for (int64_t ow = 0; ow < d.OW; ++ow) {
            const int64_t iw = ow * d.p.stride[1] - d.p.padding[1] + j * d.p.dilation[1];
            if (iw >= 0 && iw < d.W) out[iw] += row[oh * d.OW + ow];
          }
        }
      }
}

// Where a sample's products are summed: the T output itself for f32 and f64 (acc_t is T), else
// (bf16, f16) the thread's acc_t buffer `buf`, rounded into the output once at the end.
template <typename T, typename acc_t>
acc_t* acc_out(T* out, std::vector<acc_t>& buf) {
  if constexpr (std::is_same_v<T, acc_t>) return out;
  else return buf.data();
}
// out[i] = T(acc[i]) for i < n: the one rounding of a 16-bit output (nothing for f32 and f64).
template <typename T, typename acc_t>
void round_out(const acc_t* acc, int64_t n, T* out) {
  if constexpr (!std::is_same_v<T, acc_t>)
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(acc[i]);
}

// x (N, C, H, W), w (O, K * G), b (O) or null -> y (N, O, L).
template <typename T, typename acc_t>
void forward_impl(const T* x, const T* w, const T* b, T* y, const Dims& d) {
  constexpr bool wide = !std::is_same_v<T, acc_t>;
  const bool direct = d.direct();
#pragma omp parallel if (worth_threads(d))
  {
    std::vector<T> col(direct ? 0 : static_cast<size_t>(d.G * d.K * d.L));
    std::vector<acc_t> ybuf(wide ? static_cast<size_t>(d.O * d.L) : 0);  // (O, L): a 16-bit sample's f32 sums
#pragma omp for schedule(static)
    for (int64_t n = 0; n < d.N; ++n) {
      const T* xn = x + n * d.C * d.H * d.W;
      if (!direct) im2col(xn, d, col.data());
      const T* cn = direct ? xn : col.data();
      T* yn = y + n * d.O * d.L;
      acc_t* ya = acc_out(yn, ybuf);
      if (b)  // the bias rows, the product accumulated onto them: no second pass
        for (int64_t o = 0; o < d.O; ++o) std::fill(ya + o * d.L, ya + (o + 1) * d.L, static_cast<acc_t>(b[o]));
      for (int64_t g = 0; g < d.G; ++g)
        gemm_serial<T>(false, false, d.Og, d.L, d.K, w + g * d.Og * d.K, d.K, cn + g * d.K * d.L, d.L, b != nullptr,
                       ya + g * d.Og * d.L, d.L);
      round_out(ya, d.O * d.L, yn);
    }
  }
}

// dy (N, O, L), w (O, K * G) -> dx (N, C, H, W).
template <typename T, typename acc_t>
void backward_input_impl(const T* dy, const T* w, T* dx, const Dims& d) {
  constexpr bool wide = !std::is_same_v<T, acc_t>;
  const bool direct = d.direct();
#pragma omp parallel if (worth_threads(d))
  {
    std::vector<acc_t> col(direct ? 0 : static_cast<size_t>(d.G * d.K * d.L));  // dcol
    std::vector<acc_t> dxbuf(wide ? static_cast<size_t>(d.C * d.H * d.W) : 0);   // a 16-bit sample's f32 dx
#pragma omp for schedule(static)
    for (int64_t n = 0; n < d.N; ++n) {
      T* dxn = dx + n * d.C * d.H * d.W;
      acc_t* dxa = acc_out(dxn, dxbuf);
      acc_t* cn = direct ? dxa : col.data();  // direct: dcol is dx itself
      for (int64_t g = 0; g < d.G; ++g)  // w[g] stored (O_g, K): transposed
        gemm_serial<T>(true, false, d.K, d.L, d.Og, w + g * d.Og * d.K, d.K, dy + (n * d.O + g * d.Og) * d.L, d.L,
                       false, cn + g * d.K * d.L, d.L);
      if (!direct) col2im(col.data(), d, dxa);
      round_out(dxa, d.C * d.H * d.W, dxn);
    }
  }
}

// The number of chunks the weight backward cuts the batch into: fixed by N (never by the thread
// count), enough to keep up to 16 threads busy, each chunk's partial dw (O, K) being small.
int64_t weight_chunks(int64_t N) { return std::min<int64_t>(N, 16); }

// dy (N, O, L), x (N, C, H, W) -> dw (O, K * G).
template <typename T, typename acc_t>
void backward_weight_impl(const T* dy, const T* x, T* dw, const Dims& d) {
  const bool direct = d.direct();
  const int64_t chunks = weight_chunks(d.N), wsize = d.O * d.K;
  std::vector<acc_t> partial(static_cast<size_t>(chunks * wsize));  // (chunks, O, K)
#pragma omp parallel if (worth_threads(d) && chunks > 1)
  {
    std::vector<T> col(direct ? 0 : static_cast<size_t>(d.G * d.K * d.L));
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      acc_t* part = partial.data() + ch * wsize;
      const int64_t n0 = d.N * ch / chunks, n1 = d.N * (ch + 1) / chunks;
      for (int64_t n = n0; n < n1; ++n) {
        const T* xn = x + n * d.C * d.H * d.W;
        if (!direct) im2col(xn, d, col.data());
        const T* cn = direct ? xn : col.data();
        for (int64_t g = 0; g < d.G; ++g)  // col[g] stored (K, L): transposed
          gemm_serial<T>(false, true, d.Og, d.K, d.L, dy + (n * d.O + g * d.Og) * d.L, d.L, cn + g * d.K * d.L, d.L,
                         n != n0, part + g * d.Og * d.K, d.K);
      }
    }
  }
  // The partials in chunk order, element by element.
  parallel_for(wsize, wsize * chunks >= kMinParallelStreamElements, [&](int64_t e) {
    acc_t acc = partial[static_cast<size_t>(e)];
    for (int64_t ch = 1; ch < chunks; ++ch) acc += partial[static_cast<size_t>(ch * wsize + e)];
    dw[e] = static_cast<T>(acc);
  });
}

// dy (N, O, L) -> db (O): per channel, each sample's row summed by Eigen, the samples in order.
template <typename T, typename acc_t>
void backward_bias_impl(const T* dy, T* db, int64_t N, int64_t O, int64_t L) {
  parallel_for(O, N * O * L >= kMinParallelStreamElements, [&](int64_t o) {
    acc_t acc = 0;
    for (int64_t n = 0; n < N; ++n) {
      if constexpr (std::is_same_v<T, acc_t>) {
        acc += CMap<T>(dy + (n * O + o) * L, 1, L).template cast<acc_t>().sum();
      } else {  // 16-bit: no Eigen scalar type; widened and summed in order
        acc_t row = 0;
        for (int64_t l = 0; l < L; ++l) row += static_cast<acc_t>(dy[(n * O + o) * L + l]);
        acc += row;
      }
    }
    db[o] = static_cast<T>(acc);
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2d& p, const Tensor& y) {
  const Dims d = dims_of(x, w, y, p);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "conv2d_forward",
                         forward_impl<scalar_t, acc_t>(x.data<scalar_t>(), w.data<scalar_t>(),
                                                b.defined() ? b.data<scalar_t>() : nullptr, y.data<scalar_t>(), d))
}

void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Conv2d& p, const Tensor& dx) {
  const Dims d = dims_of(dx, w, dy, p);
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "conv2d_backward_input",
                         backward_input_impl<scalar_t, acc_t>(dy.data<scalar_t>(), w.data<scalar_t>(), dx.data<scalar_t>(),
                                                       d))
}

void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Conv2d& p, const Tensor& dw) {
  const Dims d = dims_of(x, dw, dy, p);
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "conv2d_backward_weight",
                         backward_weight_impl<scalar_t, acc_t>(dy.data<scalar_t>(), x.data<scalar_t>(), dw.data<scalar_t>(),
                                                        d))
}

void conv2d_backward_bias(const Tensor& dy, const Tensor& db) {
  const int64_t N = dy.size(0), O = dy.size(1), L = dy.size(2) * dy.size(3);
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "conv2d_backward_bias",
                         backward_bias_impl<scalar_t, acc_t>(dy.data<scalar_t>(), db.data<scalar_t>(), N, O, L))
}

}  // namespace reel::kernels::cpu
