// CPU matmul: every product, batched or not, is cut into blocks fixed by its shape and each block
// is one kernels/cpu/gemm.h call (oneDNN's sgemm for f32 when built with it, else Eigen) on one of
// reel's threads. A group of products (matmul_group) runs them one after another, each as alone.
//
// Work split. Batches of small products: one product per task. One large product (>= 2^21
// multiply-adds, ~4 MFLOP, tens of microseconds on one core, where a parallel region's start-up is
// noise: even the MLP's thin (512, 512) @ (512, 10) runs faster cut in two than whole): cut along
// its longer output dim into an even number of parts of at least kMinBlock rows (or columns; twice
// that for a wide layer's weight gradient over a short batch, see split_of), at most
// kMaxParts of them, edges on multiples of kAlign; one whose output is too small for two such
// parts but whose K is long is cut along K into up to kMaxKParts slices of at least kMinKBlock,
// summed into the output in slice order. The parts come from the shape alone, never from the thread count: a
// GEMM's bits depend on the shape it is given (oneDNN's blocking, Eigen's register panels of up
// to 48 f32 put an element's K sum in a different order for another block shape: an f32
// (128, 784) @ (784, 512) differed in its last bits when cut at the thread count), so with the
// same blocks (and slices, added in the same order) on 1, 2 or 16 threads the result is
// bit-identical (tests/test_matmul.cpp). A block narrower than kMinBlock would spend its time
// re-packing the shared operand.
//
// Bias: an optional (N) vector added to every output row inside the GEMM, never as a second pass
// over the finished output: each block's rows of C start as the bias and the product is
// accumulated onto them (a GEMM with beta = 1), so there is no zero fill either. accumulate: the
// same beta = 1 onto what out holds (kernels::matmul_into_).
//
// bf16 and f16 on oneDNN's 16-bit matmul: each block's f32 sums (exact products summed in f32,
// kernels/cpu/gemm.h), bias or accumulated values included, are rounded to 16 bits once (to nearest
// even) straight into out by oneDNN (gemm16_rounded), as cuBLAS's GemmEx with an f32 compute type
// does; no f32 copy of out, no second pass. A product cut along K (into fewer, longer slices than
// f32's: split_of) writes its slices' f32 sums into a scratch buffer and, in the same parallel
// region once every slice is done, sums each element's slices in slice order and rounds it once
// into out. Without a 16-bit engine the operands are
// widened to f32 once and the f32 product runs, rounded into out the same way.
//
// linear's fused GEMMs (kernels/matmul.h), each one backend call and so one profiler record: the
// bias gradient (matmul_bgrad) is the GEMM dW = G^T X then the column sums of G; GELU after the
// biased GEMM (matmul_gelu) and its gradient after the GEMM dY = G W (matmul_dgelu) are the
// elementwise backend's GELU passes (kernels/cpu/elementwise.cpp) over the GEMM's output, so the
// fused ops give exactly the bits of linear then gelu on the cpu. Column sums: blocks of kSumCols
// columns on reel's threads, each column summed over the rows in order, in acc_t (f32 for 16-bit,
// rounded once): the same bits on any thread count.
//
// Operands are taken in place when one of their last two dims has stride 1 (row-major, or
// column-major = a transposed view: kernels/matmul_layout.h), so transposes cost no copy; other
// layouts are made contiguous first.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/gemm.h"
#include "kernels/matmul_layout.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kMinBlock = 256, kMaxParts = 16, kAlign = 48;
constexpr int64_t kMinKBlock = 512, kMaxKParts = 8;
// A 16-bit product's K slices (oneDNN's bf16 matmul): at least kMinKBlock16 long where K allows
// more than 2, edges on multiples of kAlignK16 (see split_of).
constexpr int64_t kMinKBlock16 = 1024, kAlignK16 = 32;
constexpr int64_t kShortK = 256;

// How a product of (M, N, K) is cut, from its shape alone (see the top of the file).
struct Split {
  bool rows;           // the output blocks are row blocks (else column blocks)
  int64_t dim = 1;     // the dim they cut: M or N
  int64_t parts = 1;   // output blocks
  int64_t kparts = 1;  // K slices of a product too narrow to cut into output blocks
  int64_t kalign = kAlign;  // the slices' edges are multiples of it
};

// is16: the product runs on oneDNN's 16-bit matmul (gemm16_native); f32, f64 and widened 16-bit
// products take the f32 slices.
Split split_of(int64_t M, int64_t N, int64_t K, int64_t batches, bool a_transposed, bool is16) {
  Split s;
  s.rows = M >= N;
  s.dim = s.rows ? M : N;
  if (M * N * K < (int64_t{1} << 21)) return s;  // ~4 MFLOP: a parallel region's start-up is noise above
  // A weight gradient G^T X of a wide layer over a short batch (transposed A, K <= kShortK) takes
  // blocks of at least 2 kMinBlock: oneDNN ran the chain's (1024, 1024) gradient over 256 rows
  // faster in 2 blocks of 512 than in 4 of 256 (alternating runs of both), while its forward and
  // dX products, K = 1024, ran best in blocks of 256. The "chain b256" rows of the table "CPU GEMM
  // engines" of docs/benchmarks.md give these products' rates as split here.
  const int64_t min_block = a_transposed && K <= kShortK && s.dim >= 4 * kMinBlock ? 2 * kMinBlock : kMinBlock;
  s.parts = std::clamp<int64_t>(s.dim / min_block, 1, kMaxParts);
  // An even count: 3 blocks on 2 threads leave one thread idle for a third of the product.
  if (s.parts > 1 && s.parts % 2 == 1) --s.parts;
  // One product with no output block to share out but a long K (a weight gradient G^T X over many
  // rows, e.g. the char GPT's (288, 96) sums over 2048 tokens), cut along K instead: each slice
  // is a product of its own (the first onto out, the others into buffers), summed into out in
  // slice order after. Without it the product ran on one thread.
  if (s.parts == 1 && batches == 1 && K >= 2 * kMinKBlock) s.kparts = std::min(K / kMinKBlock, kMaxKParts);
  // In 16 bits the slices are twice as long (but still 2 from K = 2 kMinKBlock) and their edges on
  // multiples of 32 (bf16 pairs along K, the brgemm kernel's K blocks): a slice's GEMM runs faster
  // than f32's, so its fixed costs (oneDNN packing A and B, writing its f32 output) weigh more.
  // char_gpt's dW products over 2048 rows take 2 equal slices rather than 4 of 480-528, which
  // raised each one's rate over f32 in alternating one-product timings of both splits; the dW
  // rows of the table "CPU GEMM in 16 bits against f32" of docs/benchmarks.md give those ratios.
  if (is16 && s.kparts > 1) {
    s.kparts = std::clamp<int64_t>(K / kMinKBlock16, 2, kMaxKParts);
    s.kalign = kAlignK16;
  }
  return s;
}

// Where piece `i` of `n` of a dim of `size` starts: an even share, rounded down to a multiple of
// `align` (kAlign: the register panels of the GEMMs).
int64_t edge(int64_t size, int64_t i, int64_t n, int64_t align = kAlign) {
  return i == n ? size : size * i / n / align * align;
}

template <typename T, typename acc_t>
void gemm_batches(const MatmulOperand& A, const MatmulOperand& B, const Tensor& out, const Tensor& bias,
                  bool accumulate) {
  const int64_t r = out.dim();
  const int64_t M = out.size(r - 2), N = out.size(r - 1), K = A.t.size(r - 1);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  const T* pa = A.t.template data<T>();
  const T* pb = B.t.template data<T>();
  const T* pbias = bias.defined() ? bias.template data<T>() : nullptr;  // (N) or none
  const Shape& shape = out.shape();
  constexpr bool is16 = !std::is_same_v<T, acc_t>;  // matmul() sends no 16-bit product here unless native
  const Split split = split_of(M, N, K, batches, A.col_major, is16);
  // The GEMMs write acc_t: out itself for f32 and f64. bf16 and f16 blocks round their f32 sums
  // straight into out (gemm16_rounded) when oneDNN runs them and K is not sliced; a 16-bit product
  // cut along K writes each slice's f32 sums into a scratch buffer of the calling thread and, in
  // the same parallel region, adds them in slice order and rounds each element once into out; K = 0
  // writes an f32 copy of out (its values when accumulating), rounded once into out at the end.
  const bool rounded = is16 && K > 0 && split.kparts == 1;
  const bool fused = is16 && split.kparts > 1;
  const bool wide = is16 && !rounded && !fused;
  std::vector<acc_t> wide_out;
  acc_t* pc = nullptr;
  if (wide) {
    wide_out.resize(static_cast<size_t>(out.numel()));
    pc = wide_out.data();
    if (accumulate) {
      const T* o = out.template data<T>();
      for (int64_t i = 0; i < out.numel(); ++i) pc[i] = static_cast<acc_t>(o[i]);
    }
  } else if constexpr (!is16) {
    pc = out.template data<T>();
  }
  // K slice `kp`'s partial product, for kp >= 1: written here (acc_t), added into out afterwards.
  // A 16-bit product's slices, slice 0's first, go to a buffer the calling thread keeps (at most
  // kMaxKParts x 511 x 511 f32: only an output too small for two blocks is sliced), written by the
  // GEMMs without a zero fill first: the zeroed vectors (the f32 copy of out and the partials)
  // and the separate summing and rounding passes had cost char_gpt's dW products a large share of
  // their time.
  thread_local std::vector<acc_t> slices;
  std::vector<acc_t> partials;
  acc_t* ppartials = nullptr;
  if (fused) {
    slices.resize(static_cast<size_t>(split.kparts) * static_cast<size_t>(M * N));
    pc = slices.data();
    ppartials = pc + M * N;
  } else {
    partials.resize(static_cast<size_t>(split.kparts - 1) * static_cast<size_t>(M * N));
    ppartials = partials.data();
  }
  // Rows [lo, hi) (split.rows) or columns [lo, hi) of product b, or K slice kp of the only product.
  auto block = [&](int64_t b, int64_t part, int64_t kp) {
    int64_t oa, ob;
    matmul_batch_offsets(b, static_cast<int>(r - 2), shape.data(), A.t, B.t, oa, ob);
    const int64_t lo = edge(split.dim, part, split.parts), hi = edge(split.dim, part + 1, split.parts);
    const int64_t row0 = split.rows ? lo : 0, rows = split.rows ? hi - lo : M;
    const int64_t col0 = split.rows ? 0 : lo, cols = split.rows ? N : hi - lo;
    const int64_t k0 = edge(K, kp, split.kparts, split.kalign), k1 = edge(K, kp + 1, split.kparts, split.kalign);
    // Element (i, k) of op(A) is at a + i * lda + k (row-major) or a + i + k * lda (column-major);
    // element (k, j) of op(B) at b + k * ldb + j (row-major) or b + k + j * ldb (column-major).
    const T* a = pa + oa + row0 * (A.col_major ? 1 : A.ld) + k0 * (A.col_major ? A.ld : 1);
    const T* bb = pb + ob + col0 * (B.col_major ? B.ld : 1) + k0 * (B.col_major ? 1 : B.ld);
    if (kp > 0) {  // a later K slice: its own buffer, written
      gemm_serial<T>(A.col_major, B.col_major, M, N, k1 - k0, a, A.ld, bb, B.ld, false,
                     ppartials + (kp - 1) * M * N, N);
      return;
    }
    if constexpr (is16) {
      if (rounded) {
        gemm16_rounded<T>(A.col_major, B.col_major, rows, cols, K, a, A.ld, bb, B.ld, pbias ? pbias + col0 : nullptr,
                          accumulate, out.template data<T>() + b * M * N + row0 * N + col0, N);
        return;
      }
      if (fused && accumulate && !pbias) {  // slice 0 adds onto out's values (a bias replaces them)
        const T* o = out.template data<T>();
        for (int64_t i = 0; i < M * N; ++i) pc[i] = static_cast<acc_t>(o[i]);
      }
    }
    acc_t* c = pc + b * M * N + row0 * N + col0;
    if (pbias)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) c[i * N + j] = static_cast<acc_t>(pbias[col0 + j]);
    gemm_serial<T>(A.col_major, B.col_major, rows, cols, k1 - k0, a, A.ld, bb, B.ld, accumulate || pbias != nullptr,
                   c, N);
  };
  // fused: elements [i0, i1) of out = ((slice 0 + slice 1) + slice 2) + ..., rounded once: the
  // order of the f32 sums does not depend on the thread that runs the range.
  auto finish = [&](int64_t i0, int64_t i1) {
    if constexpr (is16) {
      T* o = out.template data<T>();
      const int64_t n = M * N;
      constexpr int64_t kRun = 256;  // a run of sums on the stack: each pass over it vectorises
      acc_t sum[kRun];
      for (int64_t i = i0; i < i1; i += kRun) {
        const int64_t len = std::min(kRun, i1 - i);
        for (int64_t j = 0; j < len; ++j) sum[j] = pc[i + j];
        for (int64_t kp = 1; kp < split.kparts; ++kp) {
          const acc_t* partial = ppartials + (kp - 1) * n + i;
          for (int64_t j = 0; j < len; ++j) sum[j] += partial[j];
        }
        for (int64_t j = 0; j < len; ++j) o[i + j] = T(sum[j]);
      }
    } else {
      (void)i0, (void)i1;
    }
  };
  const int64_t tasks = batches * split.parts * split.kparts;
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (M * N + kChunk - 1) / kChunk;
  if (tasks > 1 && batches * M * N * K >= (int64_t{1} << 16)) {
#pragma omp parallel
    {
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t)
        block(t / (split.parts * split.kparts), t / split.kparts % split.parts, t % split.kparts);
      if (fused) {
#pragma omp for schedule(static)
        for (int64_t ch = 0; ch < chunks; ++ch) finish(ch * kChunk, std::min(M * N, (ch + 1) * kChunk));
      }
    }
  } else {  // without entering OpenMP (an `omp parallel if (false)` still costs a team set-up)
    for (int64_t t = 0; t < tasks; ++t)
      block(t / (split.parts * split.kparts), t / split.kparts % split.parts, t % split.kparts);
    if (fused) finish(0, M * N);
  }
  if (split.kparts > 1 && !fused) {
    // out += slice 1, then slice 2, ...: each element sums in slice order whatever thread runs it.
    const int64_t n = M * N, chunk = 4096, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t i0 = ch * chunk, i1 = std::min(n, i0 + chunk);
      for (int64_t kp = 1; kp < split.kparts; ++kp) {
        const acc_t* partial = ppartials + (kp - 1) * n;
        for (int64_t i = i0; i < i1; ++i) pc[i] += partial[i];
      }
    }
  }
  if (wide) {  // the one rounding of each f32 result to 16 bits
    T* o = out.template data<T>();
    const int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
    for (int64_t i = 0; i < n; ++i) o[i] = T(pc[i]);
  }
}

}  // namespace

namespace {
// out (contiguous, To) = each element of x (contiguous, From) converted: exact to f32, rounded to
// nearest even to 16 bits. One pass on reel's threads.
template <typename From, typename To>
void convert(const Tensor& x, const Tensor& out) {
  const From* px = x.data<From>();
  To* po = out.data<To>();
  const int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) po[i] = To(px[i]);
}

// x converted to an f32 tensor of its shape (exact for bf16 / f16): contiguous, or, for a view
// with its last two dims transposed (linear's W^T), the same transposed layout, so the conversion
// is one linear pass either way.
Tensor widened(const Tensor& x) {
  if (x.dim() >= 2 && !x.is_contiguous()) {
    const Tensor t = untracked::transpose(x, -2, -1);
    if (t.is_contiguous()) return untracked::transpose(widened(t), -2, -1);
  }
  Tensor w = empty(x.shape(), DType::f32, x.device());
  if (!x.is_contiguous()) {
    w.copy_(x);
    return w;
  }
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "matmul", convert<scalar_t, float>(x, w))
  return w;
}


}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, bool accumulate) {
  if (out.numel() == 0) return;
  if (is_16bit_floating(out.dtype()) && !gemm16_native(out.dtype())) {
    // No 16-bit engine (kernels/cpu/gemm.h): the whole product in f32 on operands widened once
    // (exactly; per block, the shared operand would be widened once per block), then each element
    // rounded once into out. An operand broadcast over batch dims is widened at its full size.
    const Tensor out32 = accumulate ? widened(out) : empty(out.shape(), DType::f32, out.device());
    matmul(widened(a), widened(b), out32, bias.defined() ? widened(bias) : Tensor(), accumulate);
    if (out.dtype() == DType::bf16) convert<float, bf16>(out32, out);
    else convert<float, f16>(out32, out);
    return;
  }
  const MatmulOperand A = matmul_operand(a), B = matmul_operand(b);
  // K == 0 needs nothing special: the empty sum is zero, plus the bias (gemm_serial writes the
  // zeros, or leaves out as it is when accumulating).
  REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "matmul", gemm_batches<scalar_t, acc_t>(A, B, out, bias, accumulate))
}

// One after another, each exactly as matmul_into_ runs it: the same bits.
void matmul_group(const std::vector<GemmInto>& gemms) {
  for (const GemmInto& g : gemms) matmul(g.a, g.b, g.out, Tensor(), g.accumulate);
}

namespace {
// db (C) = the column sums of g (N, C) (or db + them, accumulate), in acc_t, rows in order
// (kernels/cpu/column_sums.h), each rounded once.
template <typename T, typename acc_t>
void bias_column_sums(const Tensor& g_in, const Tensor& db, bool accumulate) {
  const Tensor g = g_in.stride(1) == 1 ? g_in : untracked::contiguous(g_in);
  const int64_t N = g.size(0), C = g.size(1);
  T* pd = db.data<T>();
  column_sums<T, acc_t>(g.data<T>(), N, C, g.stride(0), N * C >= (int64_t{1} << 16), [&](int64_t c, acc_t sum) {
    pd[c] = static_cast<T>(accumulate ? static_cast<acc_t>(pd[c]) + sum : sum);
  });
}
}  // namespace

void matmul_bgrad(const Tensor& g, const Tensor& x, const Tensor& dw, const Tensor& db, bool accumulate_w,
                  bool accumulate_b) {
  matmul(untracked::transpose(g, 0, 1), x, dw, Tensor(), accumulate_w);  // dW (out, in) = G^T X
  if (db.numel() == 0) return;
  REEL_DISPATCH_FLOATING_AND_16(db.dtype(), "matmul_bgrad", bias_column_sums<scalar_t, acc_t>(g, db, accumulate_b))
}

void matmul_gelu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& pre) {
  if (pre.numel() == 0) return;
  matmul(x, untracked::transpose(w, 0, 1), pre, b, false);  // pre (N, out) = x w^T + b
  unary(UnaryOp::Gelu, pre, y);
}

void matmul_dgelu(const Tensor& g, const Tensor& w, const Tensor& pre, const Tensor& dpre, const Tensor& db,
                  bool accumulate_b) {
  if (dpre.numel() > 0) {
    const Tensor dy = empty(dpre.shape(), dpre.dtype(), dpre.device());  // (N, hidden) = g w
    matmul(g, w, dy, Tensor(), false);
    unary_backward(UnaryOp::Gelu, dy, pre, dpre);
  }
  if (db.numel() == 0) return;
  REEL_DISPATCH_FLOATING_AND_16(db.dtype(), "matmul_dgelu", bias_column_sums<scalar_t, acc_t>(dpre, db, accumulate_b))
}

}  // namespace reel::kernels::cpu
