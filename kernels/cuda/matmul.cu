// kernels/cuda/matmul.cu: batched matmul out (B..., M, N) = a (B..., M, K) @ b (B..., K, N).
// Production path: cuBLAS strided-batched GEMM (bf16 / f16 through GemmEx with f32 compute; f32
// through GemmEx with TF32 compute under reel::allow_tf32()). reel's tensors are row-major and cuBLAS is
// column-major; the translation lives in ONE place, gemm_batched() below. Transposed views cost
// no copy (an operand whose second-last dim has stride 1 is column-major: cuBLAS's op flag
// handles it); other layouts are made contiguous. Batch dims that collapse to one stride per
// operand (contiguous, or broadcast with stride 0) go to cuBLAS in one call; the rest are
// looped on the host, one strided-batched call per outer index.
// Bias (an optional (N) vector added to every output row): where the product is one 2-D GEMM (2-D
// operands, or a batch of a's rows against one b, as linear on (B, T, C) inputs: as_one_gemm()),
// one cublasLtMatmul whose epilogue adds the bias (CUBLASLT_EPILOGUE_BIAS) to each f32 sum before
// the one rounding: one launch, no pass over the output. Otherwise (a batch that does not collapse,
// or f64, whose bias epilogue reel does not rely on) a small kernel fills out's rows with the bias
// and cuBLAS accumulates the product onto them with beta = 1 (PyTorch's addmm does the same): two
// launches, one rounding of the sum too. An empty K is the bias rows alone.
// linear's fused GEMMs (kernels/matmul.h) are one cublasLtMatmul each, its epilogue doing the rest
// in the same kernel: CUBLASLT_EPILOGUE_BGRADB (dW = G^T X and db = the column sums of G),
// GELU_AUX_BIAS (y = gelu(x W^T + b), the pre-activation written as the aux output) and
// DGELU_BGRAD (dpre = (G W) * gelu'(pre) and its column sums). lt_gemm() holds their row-major <->
// column-major translation, the same as gemm_batched()'s. cuBLASLt writes a bias gradient, never
// adds it: a gradient that accumulates (a bias .grad not cleared since the last backward) goes to a
// temporary first and one small kernel adds it; after zero_grad the epilogue writes .grad itself.
// Grouped GEMMs (matmul_group: linear's dX and dW in one launch): one cublasGemmGroupedBatchedEx
// whose device-read pointer arrays come from a per-device ring of pinned, mapped host memory (see
// the ring below), never under a CUDA graph capture (separate GEMMs then).
// Teaching path: matmul_tiled(), the classic 16x16 shared-memory tiled kernel, checked against
// cuBLAS and the CPU by the tests.
#include <climits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/profile.h"  // record_host_sync: the pointer ring's rare wait
#include "kernels/backends.h"
#include "kernels/cuda/cuda_only.h"
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/launch.h"
#include "kernels/matmul_layout.h"
#include "kernels/simt/cublas.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kTile = 16;

struct TiledArgs {
  int64_t M, N, K;
  int64_t a_row, a_col;  // element strides of a's last two dims
  int64_t b_row, b_col;
  OffsetCalc<2> batch;   // batch index -> offsets of a and b
};
static_assert(std::has_unique_object_representations_v<TiledArgs>);  // equal arguments are equal bytes

// ---- kernels ---------------------------------------------------------------------------------

// The teaching SGEMM. Block (16, 16) computes the 16x16 tile of C at (blockIdx.y, blockIdx.x)
// of batch batch0 + blockIdx.z. Each step stages a 16x16 tile of A and one of B in shared memory
// (one element per thread), synchronises, and accumulates 16 products per thread from shared
// memory: every element of A and B is read from global memory N/16 and M/16 times instead of N
// and M times. Elements past the edge of a partial tile are staged as 0, so any M, N, K works.
// The second barrier keeps a fast thread from overwriting a tile others still read.
// a, b: any strides (args); c: (batches, M, N) contiguous. The products accumulate in acc_t.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kTile * kTile) matmul_tiled_kernel(const T* a, const T* b, T* c, TiledArgs args, int64_t batch0) {
  __shared__ T As[kTile][kTile];
  __shared__ T Bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = blockIdx.y * int64_t{kTile} + ty, col = blockIdx.x * int64_t{kTile} + tx;
  const int64_t batch = batch0 + blockIdx.z;
  int64_t off[2];
  args.batch.get(batch, off);
  a += off[0];
  b += off[1];
  c += batch * args.M * args.N;
  acc_t acc = 0;
  for (int64_t k0 = 0; k0 < args.K; k0 += kTile) {
    As[ty][tx] = (row < args.M && k0 + tx < args.K) ? a[row * args.a_row + (k0 + tx) * args.a_col] : T(0);
    Bs[ty][tx] = (k0 + ty < args.K && col < args.N) ? b[(k0 + ty) * args.b_row + col * args.b_col] : T(0);
    __syncthreads();
    for (int k = 0; k < kTile; ++k) acc += static_cast<acc_t>(As[ty][k]) * static_cast<acc_t>(Bs[k][tx]);
    __syncthreads();
  }
  if (row < args.M && col < args.N) c[row * args.N + col] = static_cast<T>(acc);
}

// out[i] = bias[i % N]: every row of out (rows, N) starts as the bias, which cuBLAS then
// accumulates the product onto (beta = 1): the bias path where the epilogue's does not apply
// (matmul_bias_impl). out: (n) contiguous, n = rows * N; bias: (N).
template <typename T>
__global__ void __launch_bounds__(kThreads) bias_rows_kernel(T* out, const T* bias, int64_t n, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = bias[i % N];
}

// out[i] += x[i] (n elements), summed in acc_t: a bias gradient cuBLASLt wrote into x, added.
template <typename T>
__global__ void __launch_bounds__(kThreads) add_into_kernel(T* out, const T* x, int64_t n) {
  using acc_t = acc_type_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = static_cast<T>(static_cast<acc_t>(out[i]) + static_cast<acc_t>(x[i]));
}

// ---- cuBLAS ----------------------------------------------------------------------------------

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    REEL_FAIL("cuBLAS error in ", what, ": ", cublasGetStatusName(status), ": ", cublasGetStatusString(status));
}

// The handle of the current device, created on first use and bound to stream() at each call (the
// capture stream while a CUDA graph captures, core/graph.h). Never destroyed: tensors and their
// kernels may outlive main.
cublasHandle_t handle() {
  static std::mutex mutex;
  static std::vector<cublasHandle_t>* handles = new std::vector<cublasHandle_t>;
  int device = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cublasHandle_t& h = (*handles)[device];
  if (!h) check_cublas(cublasCreate(&h), "cublasCreate");
  cudaStream_t bound = nullptr;
  check_cublas(cublasGetStream(h, &bound), "cublasGetStream");
  if (bound != stream()) check_cublas(cublasSetStream(h, stream()), "cublasSetStream");
  return h;
}

int as_int(int64_t v, const char* what) {
  REEL_CHECK(v <= INT_MAX, "matmul: ", what, " = ", v, " exceeds cuBLAS's int range");
  return static_cast<int>(v);
}

// THE row-major <-> column-major translation. cuBLAS reads a row-major (r, c) matrix with
// leading dimension ld as the column-major (c, r) matrix, its transpose. So row-major
// C (M, N) = A (M, K) B (K, N) is column-major C^T (N, M) = B^T (N, K) A^T (K, M): pass b first
// and a second, with m = N and n = M. A row-major operand, read column-major, is already the
// transpose needed (op N); a column-major one (a transposed view) is not (op T).
// `count` products: a + i * stride_a, b + i * stride_b -> c + i * M * N; with accumulate, the
// products are added to what c holds (beta = 1: the bias rows), else c is written, never read.
// cuBLAS accumulates f32 in f32 and f64 in f64: the dispatch's acc_t; alpha and beta are acc_t.
// bf16 / f16: cublasGemmStridedBatchedEx with 16-bit A, B and C and CUBLAS_COMPUTE_32F (tensor
// cores; exact products, f32 sums, the result rounded once to C's type). f32 under
// reel::allow_tf32(): the same call on f32 data with CUBLAS_COMPUTE_32F_FAST_TF32 (inputs rounded
// to TF32 on the tensor cores).
template <typename T>
cudaDataType cuda_type() {
  if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, f16>) return CUDA_R_16F;
  else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else return CUDA_R_32F;
}

template <typename T>
void gemm_batched(const MatmulOperand& A, const MatmulOperand& B, const T* a, int64_t stride_a, const T* b,
                  int64_t stride_b, T* c, int64_t M, int64_t N, int64_t K, int64_t count, bool accumulate) {
  const cublasOperation_t op_b = B.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = A.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = as_int(N, "N"), n = as_int(M, "M"), k = as_int(K, "K");
  const int lda = as_int(A.ld, "lda"), ldb = as_int(B.ld, "ldb");
  const acc_type_t<T> one = 1, beta = accumulate ? 1 : 0;
  constexpr bool half = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
  for (int64_t done = 0; done < count; done += INT_MAX) {
    const int batch = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    if constexpr (std::is_same_v<T, float> || half) {
      if (half || allow_tf32()) {
        check_cublas(cublasGemmStridedBatchedEx(handle(), op_b, op_a, m, n, k, &one, b + done * stride_b, cuda_type<T>(),
                                                ldb, stride_b, a + done * stride_a, cuda_type<T>(), lda, stride_a,
                                                &beta, c + done * M * N, cuda_type<T>(), m, M * N, batch,
                                                half ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32,
                                                CUBLAS_GEMM_DEFAULT),
                     "cublasGemmStridedBatchedEx");
        continue;
      }
    }
    if constexpr (std::is_same_v<T, float>)
      check_cublas(cublasSgemmStridedBatched(handle(), op_b, op_a, m, n, k, &one, b + done * stride_b, ldb, stride_b,
                                             a + done * stride_a, lda, stride_a, &beta, c + done * M * N, m, M * N,
                                             batch),
                   "cublasSgemmStridedBatched");
    else if constexpr (std::is_same_v<T, double>)
      check_cublas(cublasDgemmStridedBatched(handle(), op_b, op_a, m, n, k, &one, b + done * stride_b, ldb, stride_b,
                                             a + done * stride_a, lda, stride_a, &beta, c + done * M * N, m, M * N,
                                             batch),
                   "cublasDgemmStridedBatched");
    else if constexpr (!half)
      static_assert(dependent_false<T>, "gemm_batched: a dtype without its cuBLAS call");
  }
}

// Every (N) row of out (contiguous) = bias (N).
template <typename T>
void fill_bias_rows(const Tensor& out, const Tensor& bias) {
  const int64_t n = out.numel();
  launch("bias_rows_kernel", bias_rows_kernel<T>, grid_for(n, kThreads), kThreads, 0, out.data<T>(), bias.data<T>(), n,
         out.size(-1));
}

// out = a @ b, or out += a @ b (accumulate); with a bias, the bias rows and the product onto them
// (the biased product's fallback: matmul_bias_impl). The batch goes to gemm_batched() in as few
// strided-batched calls as its strides allow.
template <typename T>
void matmul_cublas(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, bool accumulate) {
  const int64_t r = out.dim(), nb = r - 2;
  const int64_t M = out.size(r - 2), N = out.size(r - 1), K = a.size(r - 1);
  const MatmulOperand A = matmul_operand(a), B = matmul_operand(b);
  const Shape& bs = out.shape();
  if (bias.defined()) fill_bias_rows<T>(out, bias);
  // Batch dims [inner, nb) collapse to one stride per operand: a's offset for flat index i of
  // them is i * stride_a. Size-1 dims fit anywhere.
  int64_t inner = nb, count = 1, stride_a = 0, stride_b = 0;
  bool started = false;
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (bs[d] == 1) {
      inner = d;
      continue;
    }
    if (!started) {
      stride_a = A.t.stride(d);
      stride_b = B.t.stride(d);
      started = true;
    } else if (A.t.stride(d) != stride_a * count || B.t.stride(d) != stride_b * count) {
      break;
    }
    count *= bs[d];
    inner = d;
  }
  int64_t outer = 1;
  for (int64_t d = 0; d < inner; ++d) outer *= bs[d];
  const T* pa = A.t.template data<T>();
  const T* pb = B.t.template data<T>();
  T* pc = out.template data<T>();
  for (int64_t o = 0; o < outer; ++o) {  // the dims that do not collapse: one call each
    int64_t oa, ob;
    matmul_batch_offsets(o, static_cast<int>(inner), bs.data(), A.t, B.t, oa, ob);
    gemm_batched<T>(A, B, pa + oa, stride_a, pb + ob, stride_b, pc + o * count * M * N, M, N, K, count,
                    accumulate || bias.defined());
  }
}

// ---- cuBLASLt -------------------------------------------------------------------------------------

// The cuBLASLt handle of the current device, created on first use, never destroyed (as handle()).
cublasLtHandle_t lt_handle() {
  static std::mutex mutex;
  static std::vector<cublasLtHandle_t>* handles = new std::vector<cublasLtHandle_t>;
  int device = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cublasLtHandle_t& h = (*handles)[device];
  if (!h) check_cublas(cublasLtCreate(&h), "cublasLtCreate");
  return h;
}

// A cuBLASLt descriptor or layout, destroyed when it goes out of scope (also when a check throws).
struct LtDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~LtDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct LtLayout {
  cublasLtMatrixLayout_t l = nullptr;
  ~LtLayout() { if (l) cublasLtMatrixLayoutDestroy(l); }
};

template <typename V>
void set_attribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& value) {
  check_cublas(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value), "cublasLtMatmulDescSetAttribute");
}

// out (M, N) = a (M, K) @ b (K, N) (row-major; a and b any layout matmul_operand takes, out
// contiguous), onto out's values when accumulate, with cuBLASLt epilogue `epilogue`: bias (its
// vector: N values for BIAS / GELU_AUX_BIAS / DGELU_BGRAD, M... see the callers) and aux ((M, N)
// contiguous, row stride N) as it reads them. Column-major, as gemm_batched(): C^T (N, M) =
// op(b) op(a), b the first operand, m = N, n = M, k = K; an operand stored row-major is op N, a
// transposed view (col_major) op T. So cuBLASLt's "rows of D" are reel's output columns (BIAS, the
// DGELU bias gradient: one value per column of out) and its B is reel's a (BGRADB: sums over K of
// a's columns, i.e. of a^T's rows when a is a transposed view).
template <typename T>
void lt_gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate, cublasLtEpilogue_t epilogue,
             void* bias, void* aux) {
  const MatmulOperand A = matmul_operand(a), B = matmul_operand(b);
  const int64_t M = out.size(0), N = out.size(1), K = a.size(1);
  as_int(M, "M"), as_int(N, "N"), as_int(K, "K");
  constexpr bool f64 = std::is_same_v<T, double>;
  constexpr bool half = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F : (!half && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  LtDesc desc;
  check_cublas(cublasLtMatmulDescCreate(&desc.d, compute, f64 ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
  const int32_t op_first = B.col_major ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = A.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_attribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  set_attribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (bias) set_attribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) {
    set_attribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set_attribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{N});
  }
  // The stored matrices, column-major: b (K, N) row-major is (N, K) with ld B.ld, a transposed view
  // of it (K, N); likewise a; out (N, M), ld N.
  const cudaDataType t = cuda_type<T>();
  LtLayout lf, ls, lc;
  check_cublas(cublasLtMatrixLayoutCreate(&lf.l, t, B.col_major ? K : N, B.col_major ? N : K, B.ld),
               "cublasLtMatrixLayoutCreate");
  check_cublas(cublasLtMatrixLayoutCreate(&ls.l, t, A.col_major ? M : K, A.col_major ? K : M, A.ld),
               "cublasLtMatrixLayoutCreate");
  check_cublas(cublasLtMatrixLayoutCreate(&lc.l, t, N, M, N), "cublasLtMatrixLayoutCreate");
  const acc_type_t<T> one = 1, beta = accumulate ? 1 : 0;
  T* c = out.template data<T>();
  check_cublas(cublasLtMatmul(lt_handle(), desc.d, &one, B.t.template data<T>(), lf.l, A.t.template data<T>(), ls.l,
                              &beta, c, lc.l, c, lc.l, nullptr, nullptr, 0, stream()),
               "cublasLtMatmul");
}

// A batched product that is one 2-D GEMM, as linear's on (B, T, C) inputs: b the same (K, N)
// matrix at every batch index (stride 0 or size 1 on every batch dim) and a's batch dims and rows
// one run of rows (the flat row index i at i * a's row stride), so a (..., M, K) is a2 (rows, K),
// b (..., K, N) is b2 (K, N) and out (..., M, N), contiguous, is out2 (rows, N); false otherwise.
bool as_one_gemm(const Tensor& a, const Tensor& b, const Tensor& out, Tensor& a2, Tensor& b2, Tensor& out2) {
  const int64_t r = out.dim(), nb = r - 2;
  for (int64_t d = 0; d < nb; ++d)
    if (out.size(d) != 1 && b.stride(d) != 0) return false;
  int64_t rows = 1, inner_stride = 0;  // the run so far (dims d+1 .. r-2): its size and innermost stride
  bool started = false;
  for (int64_t d = r - 2; d >= 0; --d) {
    if (a.size(d) == 1) continue;
    if (started && a.stride(d) != inner_stride * rows) return false;
    if (!started) inner_stride = a.stride(d), started = true;
    rows *= a.size(d);
  }
  if (rows > INT_MAX) return false;  // lt_gemm's M is an int; the batched call takes the products apart
  a2 = untracked::view(a, {rows, a.size(r - 1)});
  b2 = b;
  for (int64_t d = 0; d < nb; ++d) b2 = untracked::select(b2, 0, 0);
  out2 = untracked::view(out, {rows, out.size(r - 1)});
  return true;
}

// out = a @ b + bias, the bias (N, contiguous) added to every row. One cublasLtMatmul with
// CUBLASLT_EPILOGUE_BIAS where the product is one 2-D GEMM (as_one_gemm) in f32, bf16 or f16: the
// epilogue adds the bias to each f32 sum before its one rounding to out's type, as the fallback's
// beta = 1 onto the bias rows does. Else (a batch that does not collapse, f64, whose bias epilogue
// is not relied on) the fallback: the bias rows, then the product accumulated onto them (beta = 1).
template <typename T>
void matmul_bias_impl(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias) {
  if constexpr (!std::is_same_v<T, double>) {
    Tensor a2, b2, out2;
    if (as_one_gemm(a, b, out, a2, b2, out2)) {
      lt_gemm<T>(a2, b2, out2, false, CUBLASLT_EPILOGUE_BIAS, const_cast<T*>(bias.data<T>()), nullptr);
      return;
    }
  }
  matmul_cublas<T>(a, b, out, bias, false);
}

// out += x: both (n) contiguous.
template <typename T>
void add_into(const Tensor& out, const Tensor& x) {
  const int64_t n = out.numel();
  launch("add_into_kernel", add_into_kernel<T>, grid_for(n, kThreads), kThreads, 0, out.data<T>(), x.data<T>(), n);
}

// A bias gradient the epilogue writes: db itself, or, when it accumulates, a temporary that
// finish_bias_grad() then adds into db.
Tensor bias_grad_target(const Tensor& db, bool accumulate) {
  return accumulate ? empty(db.shape(), db.dtype(), db.device()) : db;
}
template <typename T>
void finish_bias_grad(const Tensor& db, const Tensor& target) {
  if (!target.same(db)) add_into<T>(db, target);
}

template <typename T>
void matmul_bgrad_impl(const Tensor& g, const Tensor& x, const Tensor& dw, const Tensor& db, bool accumulate_w,
                       bool accumulate_b) {
  // dW (out, in) = g^T (out, N) @ x (N, in): cuBLASLt's B is g^T, read as g, whose column sums
  // over the N rows BGRADB writes (db: `out` values, one per column of D^T = row of dW).
  const Tensor target = bias_grad_target(db, accumulate_b);
  lt_gemm<T>(untracked::transpose(g, 0, 1), x, dw, accumulate_w, CUBLASLT_EPILOGUE_BGRADB, target.data<T>(), nullptr);
  finish_bias_grad<T>(db, target);
}

template <typename T>
void matmul_gelu_impl(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& pre) {
  lt_gemm<T>(x, untracked::transpose(w, 0, 1), y, false, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
             const_cast<T*>(b.data<T>()), pre.data<T>());
}

template <typename T>
void matmul_dgelu_impl(const Tensor& g, const Tensor& w, const Tensor& pre, const Tensor& dpre, const Tensor& db,
                       bool accumulate_b) {
  const Tensor target = bias_grad_target(db, accumulate_b);
  const Tensor aux = untracked::contiguous(pre);  // read with row stride `hidden`
  lt_gemm<T>(g, w, dpre, false, CUBLASLT_EPILOGUE_DGELU_BGRAD, target.data<T>(), const_cast<T*>(aux.data<T>()));
  finish_bias_grad<T>(db, target);
}

// ---- grouped GEMMs (matmul_group) -------------------------------------------------------------------
// cublasGemmGroupedBatchedEx reads its A, B and C pointer arrays on the device, when its kernel
// runs. Copying them there would cost a launch (the one grouping saves), so they live in a ring
// of pinned, mapped host memory: with unified addressing (every 64-bit CUDA platform reel runs on)
// the host pointer of a cudaHostAllocMapped allocation is valid on the device. One ring per device,
// allocated once at the first grouped call (outside the caching allocator, as last_block.cu's
// ticket) and never freed; each call takes the next slot of kRingSlots. A slot is rewritten only
// once the GPU is done with its last use: an event recorded after each grouped call on that slot
// is queried first, and only if it has not completed does the host wait for it (counted as a host
// sync, core/profile.h). With thousands of slots the GPU would have to be thousands of grouped
// calls behind the host for that to happen. Not under a CUDA graph capture: a replay would read
// the slot as it is at the replay, long rewritten, so matmul_group runs separate GEMMs then.
constexpr size_t kRingSlots = 4096;
constexpr size_t kSlotPointers = 3 * kMaxGemmGroup;  // A, B and C of each problem

struct PointerRing {
  const void** pointers = nullptr;  // kRingSlots * kSlotPointers, pinned and mapped
  std::vector<cudaEvent_t> events = std::vector<cudaEvent_t>(kRingSlots, nullptr);  // created at a slot's first use
  size_t next = 0;
  std::mutex mutex;  // held from taking a slot to recording its event
};

PointerRing& pointer_ring(Device device) {
  static std::mutex mutex;
  // Never destroyed (as the tickets): the rings live as long as the process's devices.
  static auto* const rings = new std::vector<PointerRing*>();
  const size_t key = device.is_meta() ? 0 : static_cast<size_t>(device.index) + 1;  // meta's own ring
  std::lock_guard<std::mutex> lock(mutex);
  if (rings->size() <= key) rings->resize(key + 1, nullptr);
  PointerRing*& ring = (*rings)[key];
  if (ring == nullptr) {
    auto* r = new PointerRing;
    void* p = nullptr;
    REEL_CUDA_CHECK(cudaHostAlloc(&p, kRingSlots * kSlotPointers * sizeof(void*),
                                  cudaHostAllocMapped | cudaHostAllocPortable));
    r->pointers = static_cast<const void**>(p);
    ring = r;
  }
  return *ring;
}

template <typename T>
void matmul_group_impl(const std::vector<GemmInto>& gemms, Device device) {
  const size_t count = gemms.size();
  cublasOperation_t op_first[kMaxGemmGroup], op_second[kMaxGemmGroup];
  int m[kMaxGemmGroup], n[kMaxGemmGroup], k[kMaxGemmGroup], ld_first[kMaxGemmGroup], ld_second[kMaxGemmGroup],
      ldc[kMaxGemmGroup], group_size[kMaxGemmGroup];
  acc_type_t<T> alpha[kMaxGemmGroup], beta[kMaxGemmGroup];
  std::vector<MatmulOperand> operands;  // kept alive (a copied operand) until the call is queued
  operands.reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    // gemm_batched()'s translation: C^T (N, M) = op(b) op(a), b first, m = N, n = M.
    const GemmInto& g = gemms[i];
    const MatmulOperand& A = operands.emplace_back(matmul_operand(g.a));
    const MatmulOperand& B = operands.emplace_back(matmul_operand(g.b));
    op_first[i] = B.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
    op_second[i] = A.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
    m[i] = as_int(g.out.size(1), "N"), n[i] = as_int(g.out.size(0), "M"), k[i] = as_int(g.a.size(1), "K");
    ld_first[i] = as_int(B.ld, "ldb"), ld_second[i] = as_int(A.ld, "lda"), ldc[i] = m[i];
    group_size[i] = 1;
    alpha[i] = 1, beta[i] = g.accumulate ? 1 : 0;
  }
  constexpr bool f64 = std::is_same_v<T, double>, half = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
  // As gemm_batched(): f64 in f64, 16-bit in f32, f32 in f32 (TF32 under reel::allow_tf32()).
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F : (!half && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  PointerRing& ring = pointer_ring(device);
  std::lock_guard<std::mutex> lock(ring.mutex);
  const size_t slot = ring.next;
  ring.next = (ring.next + 1) % kRingSlots;
  cudaEvent_t& done = ring.events[slot];
  if (done == nullptr) {
    REEL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else if (const cudaError_t err = cudaEventQuery(done); err == cudaErrorNotReady) {
    cudaGetLastError();  // an answer, not an error
    profile::record_host_sync(profile::HostSyncKind::EventSync, device);
    REEL_CUDA_CHECK(cudaEventSynchronize(done));
  } else {
    REEL_CUDA_CHECK(err);
  }
  const void** first = ring.pointers + slot * kSlotPointers;  // b's (cuBLAS's A), a's (its B), out's
  const void** second = first + kMaxGemmGroup;
  void** c = const_cast<void**>(second + kMaxGemmGroup);
  for (size_t i = 0; i < count; ++i) {
    first[i] = operands[2 * i + 1].t.template data<T>();
    second[i] = operands[2 * i].t.template data<T>();
    c[i] = gemms[i].out.template data<T>();
  }
  check_cublas(cublasGemmGroupedBatchedEx(handle(), op_first, op_second, m, n, k, alpha, first, cuda_type<T>(),
                                          ld_first, second, cuda_type<T>(), ld_second, beta, c, cuda_type<T>(), ldc,
                                          static_cast<int>(count), group_size, compute),
               "cublasGemmGroupedBatchedEx");
  REEL_CUDA_CHECK(cudaEventRecord(done, stream()));
}

template <typename T, typename acc_t>
void matmul_tiled_impl(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t r = out.dim();
  TiledArgs args;
  args.M = out.size(r - 2);
  args.N = out.size(r - 1);
  args.K = a.size(r - 1);
  args.a_row = a.stride(r - 2);
  args.a_col = a.stride(r - 1);
  args.b_row = b.stride(r - 2);
  args.b_col = b.stride(r - 1);
  const Shape batch_shape(out.shape().begin(), out.shape().end() - 2);
  const Shape sa(a.strides().begin(), a.strides().end() - 2), sb(b.strides().begin(), b.strides().end() - 2);
  if (!make_offset_calc<2>(batch_shape, {&sa, &sb}, args.batch)) {
    matmul_tiled_impl<T, acc_t>(untracked::contiguous(a), untracked::contiguous(b), out);
    return;
  }
  const int64_t batches = shape_numel(batch_shape);
  const int64_t gx = (args.N + kTile - 1) / kTile, gy = (args.M + kTile - 1) / kTile;
  REEL_CHECK(gy <= 65535, "matmul_tiled: M = ", args.M, " is too large for the grid");
  for (int64_t b0 = 0; b0 < batches; b0 += 65535) {
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
                    static_cast<unsigned>(std::min<int64_t>(batches - b0, 65535)));
    launch("matmul_tiled_kernel", matmul_tiled_kernel<T, acc_t>, grid, dim3(kTile, kTile), 0, a.data<T>(), b.data<T>(),
           out.data<T>(), args, b0);
  }
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, bool accumulate) {
  if (out.numel() == 0) return;
  set_device(out.device());
  if (a.size(-1) == 0) {  // an empty inner dim: the product of nothing is zero, plus the bias
    if (accumulate) return;  // out += 0
    if (bias.defined()) {
      REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "matmul", fill_bias_rows<scalar_t>(out, bias))
    } else {
      out.fill_(0.0);
    }
    return;
  }
  if (bias.defined() && !accumulate) {
    REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "matmul", matmul_bias_impl<scalar_t>(a, b, out, bias))
  } else {
    REEL_DISPATCH_FLOATING_AND_16(out.dtype(), "matmul", matmul_cublas<scalar_t>(a, b, out, bias, accumulate))
  }
}

void matmul_group(const std::vector<GemmInto>& gemms) {
  // The products grouped: those with an output. One with an empty inner dim (matmul's zeros) or a
  // capture (see the ring above) runs them as separate GEMMs; so does a group of one.
  std::vector<GemmInto> group;
  bool separate = capture_stream() != nullptr;
  for (const GemmInto& g : gemms)
    if (g.out.numel() > 0) {
      group.push_back(g);
      separate = separate || g.a.size(1) == 0;
    }
  if (separate || group.size() < 2) {
    for (const GemmInto& g : group) matmul(g.a, g.b, g.out, Tensor(), g.accumulate);
    return;
  }
  const Device device = group[0].out.device();
  set_device(device);
  REEL_DISPATCH_FLOATING_AND_16(group[0].out.dtype(), "matmul_group", matmul_group_impl<scalar_t>(group, device))
}

void matmul_bgrad(const Tensor& g, const Tensor& x, const Tensor& dw, const Tensor& db, bool accumulate_w,
                  bool accumulate_b) {
  if (dw.numel() == 0 && db.numel() == 0) return;
  set_device(dw.device());
  if (g.size(0) == 0) {  // no rows: both gradients are empty sums, zero
    if (!accumulate_w) dw.fill_(0.0);
    if (!accumulate_b) db.fill_(0.0);
    return;
  }
  REEL_DISPATCH_FLOATING_AND_16(dw.dtype(), "matmul_bgrad", matmul_bgrad_impl<scalar_t>(g, x, dw, db, accumulate_w,
                                                                                        accumulate_b))
}

void matmul_gelu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& pre) {
  if (y.numel() == 0) return;
  set_device(y.device());
  REEL_DISPATCH_FLOATING_AND_16(y.dtype(), "matmul_gelu", matmul_gelu_impl<scalar_t>(x, w, b, y, pre))
}

void matmul_dgelu(const Tensor& g, const Tensor& w, const Tensor& pre, const Tensor& dpre, const Tensor& db,
                  bool accumulate_b) {
  if (db.numel() == 0) return;
  set_device(db.device());
  if (dpre.numel() == 0) {  // no rows: the sums are empty, zero
    if (!accumulate_b) db.fill_(0.0);
    return;
  }
  REEL_DISPATCH_FLOATING_AND_16(dpre.dtype(), "matmul_dgelu",
                                matmul_dgelu_impl<scalar_t>(g, w, pre, dpre, db, accumulate_b))
}

void matmul_tiled(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  set_device(out.device());
  if (a.size(-1) == 0) {
    out.fill_(0.0);
    return;
  }
  REEL_DISPATCH_FLOATING(out.dtype(), "matmul_tiled", matmul_tiled_impl<scalar_t, acc_t>(a, b, out))
}

}  // namespace reel::kernels::cuda
