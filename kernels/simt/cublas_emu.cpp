// kernels/simt/cublas_emu.cpp: host implementations of the cuBLAS subset in cublas.h for the
// emulated build. Matrices are Eigen::Maps over the caller's column-major storage, so leading
// dimensions and batch strides cost no copies; Eigen does the GEMM, at the call, after the work
// queued on the handle's stream. GemmEx (16-bit or TF32) converts its operands to f32 matrices
// first (16-bit values exactly; TF32: rounded to 10 fraction bits, to nearest even), multiplies in
// f32 and rounds the result once to C's type (to nearest even), with reel's conversions
// (core/half.h: the one source of the 16-bit bit code, which tests/test_half.cpp checks against an
// independent ldexp reference).
// cuBLASLt's cublasLtMatmul (cublas.h lists the epilogues emulated: bias, GELU with its aux output,
// the GELU gradient with the bias gradient, the bias gradients of A or B) runs the same f32 (f64)
// product and applies the epilogue to each f32 (f64) element before the one rounding to D's type.
// cublasGemmGroupedBatchedEx runs its problems one after another, each as GemmEx would, in ONE
// piece of work (one launch, one captured node).
// Under simt::DryRun (reel's meta device) each call checks its arguments as ever and computes nothing.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half.h"  // reel::bf16, reel::f16: the 16-bit conversions
#include "cublas.h"

#include <functional>
#include <vector>

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace simt {
bool dry_run();  // simt.h: the meta device's dry run (computes nothing)
}
namespace simt::detail {
// simt.h (which cublas.h does not include): the computation now, after the work queued on its
// stream, or a node of the stream's capture; false: refused by the capture rules.
bool library_call(cudaStream_t stream, std::function<void()> work);
}

namespace {

template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class T>
using ConstView = Eigen::Map<const Matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using View = Eigen::Map<Matrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// cuBLAS's argument checks for gemm: sizes >= 0, known ops, each leading dimension at least
// max(1, rows of the matrix as stored).
cublasStatus_t check_gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                          int k, int lda, int ldb, int ldc, int batch_count) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch_count < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  const int rows_a = transa == CUBLAS_OP_N ? m : k, rows_b = transb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha * op(A) * op(B) + beta * C for one matrix; the arguments are valid and m, n > 0.
template <class T>
void gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc) {
  View<T> c(C, m, n, Eigen::OuterStride<>(ldc));
  if (alpha == T(0) || k == 0) {  // A and B are not read, as in BLAS
    if (beta == T(0))
      c.setZero();
    else if (beta != T(1))
      c *= beta;
    return;
  }
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  const ConstView<T> a(A, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  const ConstView<T> b(B, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  const auto update = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {  // C is written, never read: NaN or garbage in C does not propagate
      c.noalias() = alpha * op_a * op_b;
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * op_a * op_b;
    }
  };
  if (!ta && !tb)
    update(a, b);
  else if (!ta)
    update(a, b.transpose());
  else if (!tb)
    update(a.transpose(), b);
  else
    update(a.transpose(), b.transpose());
}

// alpha or beta as a captured call sees it: a host scalar's value is taken at the call (as cuBLAS
// does, so that a graph replays it), a device scalar is read when the GEMM runs.
template <class T>
struct Scalar {
  T value;
  const T* device;
  T get() const { return device ? *device : value; }
};
template <class T>
Scalar<T> scalar(cublasHandle_t handle, const T* p) {
  return handle->pointer_mode == CUBLAS_POINTER_MODE_HOST ? Scalar<T>{*p, nullptr} : Scalar<T>{T(), p};
}

template <class T>
cublasStatus_t gemm_strided_batched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                    int n, int k, const T* alpha, const T* A, int lda, long long stride_a, const T* B,
                                    int ldb, long long stride_b, const T* beta, T* C, int ldc, long long stride_c,
                                    int batch_count) {
  const cublasStatus_t status = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc, batch_count);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const Scalar<T> a = scalar(handle, alpha), b = scalar(handle, beta);
  // The GEMM runs at once: after the work queued on its stream (or, on the legacy stream, after
  // what blocking streams have queued), a schedule a GPU could take; or it is captured.
  const bool ok = simt::detail::library_call(handle->stream, [=] {
    for (int i = 0; i < batch_count; ++i)
      gemm(transa, transb, m, n, k, a.get(), A + i * stride_a, lda, B + i * stride_b, ldb, b.get(),
           C + i * stride_c, ldc);
  });
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// ---- element conversions of GemmEx ----------------------------------------------------------------

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f32 rounded to TF32 (1 sign, 8 exponent, 10 fraction bits), to nearest even; inf and NaN unchanged.
float round_to_tf32(float f) {
  const uint32_t u = bits(f);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return f;
  return from_bits((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}

float load(const void* p, cudaDataType t, long long i, bool tf32) {
  switch (t) {
    case CUDA_R_16BF: return reel::bf16::from_bits(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16F: return reel::f16::from_bits(static_cast<const uint16_t*>(p)[i]);
    default: {
      const float v = static_cast<const float*>(p)[i];
      return tf32 ? round_to_tf32(v) : v;
    }
  }
}

void store(void* p, cudaDataType t, long long i, float v) {
  switch (t) {
    case CUDA_R_16BF: static_cast<uint16_t*>(p)[i] = reel::bf16(v).bits; break;
    case CUDA_R_16F: static_cast<uint16_t*>(p)[i] = reel::f16(v).bits; break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// op(X) of a stored column-major (rows, cols) matrix with leading dimension ld, as a dense f32
// (op_rows, op_cols) matrix.
Matrix<float> op_matrix(const void* x, cudaDataType t, long long offset, int ld, bool trans, int op_rows, int op_cols,
                        bool tf32) {
  Matrix<float> m(op_rows, op_cols);
  for (int j = 0; j < op_cols; ++j)
    for (int i = 0; i < op_rows; ++i)
      m(i, j) = load(x, t, offset + (trans ? static_cast<long long>(i) * ld + j : static_cast<long long>(j) * ld + i),
                     tf32);
  return m;
}

// GemmEx with f32 compute: every matrix of the batch in f32, rounded once into C's type.
cublasStatus_t gemm_ex_f32(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, float alpha, const void* A, cudaDataType at, int lda, long long stride_a,
                           const void* B, cudaDataType bt, int ldb, long long stride_b, float beta, void* C,
                           cudaDataType ct, int ldc, long long stride_c, int batch_count, bool tf32) {
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  for (int b = 0; b < batch_count; ++b) {
    Matrix<float> c = Matrix<float>::Zero(m, n);
    if (alpha != 0.0f && k > 0)
      c.noalias() = op_matrix(A, at, b * stride_a, lda, ta, m, k, tf32) * op_matrix(B, bt, b * stride_b, ldb, tb, k, n, tf32);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        const long long at_c = b * stride_c + static_cast<long long>(j) * ldc + i;
        float v = alpha * c(i, j);
        if (beta != 0.0f) v += beta * load(C, ct, at_c, false);  // beta == 0: C is not read
        store(C, ct, at_c, v);
      }
  }
  (void)handle;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt --------------------------------------------------------------------------------------

// cuBLASLt's GELU (the tanh approximation) and its derivative, in the compute type.
constexpr double kGeluK = 0.7978845608028654, kGeluC = 0.044715;  // sqrt(2 / pi), the cubic's factor
template <class A>
A gelu(A x) {
  return A(0.5) * x * (A(1) + std::tanh(A(kGeluK) * (x + A(kGeluC) * x * x * x)));
}
template <class A>
A gelu_derivative(A x) {
  const A x2 = x * x, t = std::tanh((x + x2 * x * A(kGeluC)) * A(kGeluK));
  return (t + A(1)) * A(0.5) + x * (A(1) - t * t) * (x2 * A(3 * kGeluC * kGeluK) + A(kGeluK)) * A(0.5);
}

template <class A>
A load_as(const void* p, cudaDataType t, long long i, bool tf32) {
  if (t == CUDA_R_64F) return static_cast<A>(static_cast<const double*>(p)[i]);
  return static_cast<A>(load(p, t, i, tf32));
}
template <class A>
void store_as(void* p, cudaDataType t, long long i, A v) {
  if (t == CUDA_R_64F) static_cast<double*>(p)[i] = static_cast<double>(v);
  else store(p, t, i, static_cast<float>(v));
}

// op(X) of a stored column-major matrix (ld) as a dense (op_rows, op_cols) matrix in A.
template <class A>
Matrix<A> lt_op_matrix(const void* x, cudaDataType t, int64_t ld, bool trans, int op_rows, int op_cols, bool tf32) {
  Matrix<A> m(op_rows, op_cols);
  for (int j = 0; j < op_cols; ++j)
    for (int i = 0; i < op_rows; ++i)
      m(i, j) = load_as<A>(x, t, trans ? static_cast<long long>(i) * ld + j : static_cast<long long>(j) * ld + i, tf32);
  return m;
}

}  // namespace

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_st {
  cublasComputeType_t compute;
  cudaDataType scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_st {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};

namespace {

// The product and its epilogue in the compute type A (float or double); the arguments are checked.
template <class A>
void lt_matmul(const cublasLtMatmulDescOpaque_st& d, A alpha, const void* a, const cublasLtMatrixLayoutOpaque_st& al,
               const void* b, const cublasLtMatrixLayoutOpaque_st& bl, A beta, const void* c,
               const cublasLtMatrixLayoutOpaque_st& cl, void* out, const cublasLtMatrixLayoutOpaque_st& dl, int k,
               bool tf32) {
  const int m = static_cast<int>(dl.rows), n = static_cast<int>(dl.cols);
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  Matrix<A> r = Matrix<A>::Zero(m, n);
  if (alpha != A(0) && k > 0)
    r.noalias() = lt_op_matrix<A>(a, al.type, al.ld, ta, m, k, tf32) * lt_op_matrix<A>(b, bl.type, bl.ld, tb, k, n, tf32);
  const cudaDataType dt = dl.type;
  // The bias gradients of the inputs: sums over k of the operands as given (not TF32-rounded).
  if (d.epilogue == CUBLASLT_EPILOGUE_BGRADA || d.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    const bool of_a = d.epilogue == CUBLASLT_EPILOGUE_BGRADA;
    const Matrix<A> x = of_a ? lt_op_matrix<A>(a, al.type, al.ld, ta, m, k, false)
                             : Matrix<A>(lt_op_matrix<A>(b, bl.type, bl.ld, tb, k, n, false).transpose());
    for (int i = 0; i < x.rows(); ++i) {  // x: (m, k) or (n, k); row i's sum, k ascending
      A sum = 0;
      for (int kk = 0; kk < k; ++kk) sum += x(i, kk);
      store_as<A>(d.bias, dt, i, sum);
    }
  }
  for (int i = 0; i < m; ++i) {
    A row_sum = 0;  // DGELU_BGRAD: row i of D summed over its columns
    for (int j = 0; j < n; ++j) {
      const long long at_d = static_cast<long long>(j) * dl.ld + i;
      A v = alpha * r(i, j);
      if (beta != A(0)) v += beta * load_as<A>(c, cl.type, static_cast<long long>(j) * cl.ld + i, false);
      switch (d.epilogue) {
        case CUBLASLT_EPILOGUE_BIAS: v += load_as<A>(d.bias, dt, i, false); break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          v += load_as<A>(d.bias, dt, i, false);
          store_as<A>(d.aux, dt, static_cast<long long>(j) * d.aux_ld + i, v);
          v = gelu(v);
          break;
        case CUBLASLT_EPILOGUE_DGELU_BGRAD:
          v *= gelu_derivative(load_as<A>(d.aux, dt, static_cast<long long>(j) * d.aux_ld + i, false));
          row_sum += v;
          break;
        default: break;
      }
      store_as<A>(out, dt, at_d, v);
    }
    if (d.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) store_as<A>(d.bias, dt, i, row_sum);
  }
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  *matmulDesc = new cublasLtMatmulDescOpaque_st{computeType, scaleType};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  const auto take = [&](auto& field) {
    if (size != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: {
      int32_t v;
      if (take(v) != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_INVALID_VALUE;
      d->compute = static_cast<cublasComputeType_t>(v);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t v;
      if (take(v) != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_INVALID_VALUE;
      if (attr == CUBLASLT_MATMUL_DESC_SCALE_TYPE) {
        d->scale = static_cast<cudaDataType>(v);
        return CUBLAS_STATUS_SUCCESS;
      }
      const auto op = static_cast<cublasOperation_t>(v);
      if (!valid_op(op)) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t v;
      if (take(v) != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_INVALID_VALUE;
      switch (v) {
        case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB:
          d->epilogue = static_cast<cublasLtEpilogue_t>(v);
          return CUBLAS_STATUS_SUCCESS;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;  // an epilogue this emulation lacks
      }
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(d->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(d->aux_ld);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout || rows > INT32_MAX || cols > INT32_MAX || ld < std::max<int64_t>(1, static_cast<int64_t>(rows)))
    return CUBLAS_STATUS_INVALID_VALUE;
  *matLayout = new cublasLtMatrixLayoutOpaque_st{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  (void)algo, (void)workspace, (void)workspaceSizeInBytes;  // one algorithm, no workspace needed here
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasLtMatmulDescOpaque_st& d = *computeDesc;
  const cublasLtMatrixLayoutOpaque_st &al = *Adesc, &bl = *Bdesc, &cl = *Cdesc, &dl = *Ddesc;
  // Types: as GemmEx's (C and D alike).
  const bool f64 = d.compute == CUBLAS_COMPUTE_64F;
  if (f64) {
    if (al.type != CUDA_R_64F || bl.type != CUDA_R_64F || cl.type != CUDA_R_64F || dl.type != CUDA_R_64F ||
        d.scale != CUDA_R_64F)
      return CUBLAS_STATUS_NOT_SUPPORTED;
  } else {
    if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
        d.compute != CUBLAS_COMPUTE_32F_FAST_TF32)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool half_in = al.type == bl.type && (al.type == CUDA_R_16BF || al.type == CUDA_R_16F) &&
                         (dl.type == al.type || dl.type == CUDA_R_32F);
    const bool f32_in = al.type == CUDA_R_32F && bl.type == CUDA_R_32F && dl.type == CUDA_R_32F;
    if ((!half_in && !f32_in) || cl.type != dl.type || d.scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Shapes: op(A) m x k, op(B) k x n, C and D m x n.
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  const uint64_t m = dl.rows, n = dl.cols, k = ta ? al.rows : al.cols;
  if ((ta ? al.cols : al.rows) != m || (tb ? bl.rows : bl.cols) != n || (tb ? bl.cols : bl.rows) != k ||
      cl.rows != m || cl.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool needs_aux = d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  if ((d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !d.bias) ||
      (needs_aux && (!d.aux || d.aux_ld < std::max<int64_t>(1, static_cast<int64_t>(m)))))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const bool tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && al.type == CUDA_R_32F;
  // The descriptors and the (host) scalars are copied: a captured call replays them after the
  // caller has destroyed its descriptors, as a graph of the real library does.
  const double a64 = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b64 = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const cublasLtMatmulDescOpaque_st dd = d;
  const cublasLtMatrixLayoutOpaque_st ac = al, bc = bl, cc = cl, dc = dl;
  const int kk = static_cast<int>(k);
  const bool ok = simt::detail::library_call(stream, [=] {
    if (f64)
      lt_matmul<double>(dd, a64, A, ac, B, bc, b64, C, cc, D, dc, kk, false);
    else  // the f32 scalars were widened exactly: narrowing gives them back
      lt_matmul<float>(dd, static_cast<float>(a64), A, ac, B, bc, static_cast<float>(b64), C, cc, D, dc, kk, tf32);
  });
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unrecognized status";
}

// The messages of cuBLAS 13.
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the function requires an architectural feature absent from the device";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the function failed to launch on the GPU";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the license check failed";
  }
  return "unrecognized status";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_PEDANTIC_MATH && mode != CUBLAS_TF32_TENSOR_OP_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;  // every algorithm gives the same values here
  if (computeType == CUBLAS_COMPUTE_64F) {
    if (Atype != CUDA_R_64F || Btype != CUDA_R_64F || Ctype != CUDA_R_64F) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_strided_batched(handle, transa, transb, m, n, k, static_cast<const double*>(alpha),
                                static_cast<const double*>(A), lda, strideA, static_cast<const double*>(B), ldb,
                                strideB, static_cast<const double*>(beta), static_cast<double*>(C), ldc, strideC,
                                batchCount);
  }
  if (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC &&
      computeType != CUBLAS_COMPUTE_32F_FAST_TF32)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool half_in = Atype == Btype && (Atype == CUDA_R_16BF || Atype == CUDA_R_16F) && (Ctype == Atype || Ctype == CUDA_R_32F);
  const bool f32_in = Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F;
  if (!half_in && !f32_in) return CUBLAS_STATUS_NOT_SUPPORTED;
  const cublasStatus_t status = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc, batchCount);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  // TF32 applies to f32 inputs only: asked by the compute type, or by the handle's math mode
  // (not under the pedantic compute type).
  const bool tf32 = f32_in && (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                               (computeType == CUBLAS_COMPUTE_32F && handle->math_mode == CUBLAS_TF32_TENSOR_OP_MATH));
  // f32 data without TF32: cublasSgemm's computation (the GEMM GemmEx is on such data).
  if (f32_in && !tf32)
    return gemm_strided_batched(handle, transa, transb, m, n, k, static_cast<const float*>(alpha),
                                static_cast<const float*>(A), lda, strideA, static_cast<const float*>(B), ldb, strideB,
                                static_cast<const float*>(beta), static_cast<float*>(C), ldc, strideC, batchCount);
  const Scalar<float> a = scalar(handle, static_cast<const float*>(alpha)), b = scalar(handle, static_cast<const float*>(beta));
  const bool ok = simt::detail::library_call(handle->stream, [=] {
    gemm_ex_f32(handle, transa, transb, m, n, k, a.get(), A, Atype, lda, strideA, B, Btype, ldb, strideB, b.get(), C,
                Ctype, ldc, strideC, batchCount, tf32);
  });
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

namespace {
// GemmEx's type rules: f64 data under CUBLAS_COMPUTE_64F; 16-bit A and B (C the same or f32) or
// all-f32 data under the 32F compute types. Sets f64 (64F) and f32_in (all-f32 data).
cublasStatus_t check_ex_types(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute, bool& f64,
                              bool& f32_in) {
  f64 = compute == CUBLAS_COMPUTE_64F;
  f32_in = at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F;
  if (f64) return at == CUDA_R_64F && bt == CUDA_R_64F && ct == CUDA_R_64F ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool half_in = at == bt && (at == CUDA_R_16BF || at == CUDA_R_16F) && (ct == at || ct == CUDA_R_32F);
  return half_in || f32_in ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

// One grouped problem as GemmEx computes it (cublasGemmStridedBatchedEx above): f64 data in f64,
// f32 data without TF32 as cublasSgemm, the rest in f32 rounded once to C's type. m, n > 0.
struct GroupedProblem {
  cublasOperation_t transa, transb;
  int m, n, k, lda, ldb, ldc;
  double alpha, beta;  // f32 scalars widened exactly
};
void grouped_problem(const GroupedProblem& p, const void* A, const void* B, void* C, cudaDataType at, cudaDataType bt,
                     cudaDataType ct, bool f64, bool f32_in, bool tf32) {
  if (f64)
    gemm<double>(p.transa, p.transb, p.m, p.n, p.k, p.alpha, static_cast<const double*>(A), p.lda,
                 static_cast<const double*>(B), p.ldb, p.beta, static_cast<double*>(C), p.ldc);
  else if (f32_in && !tf32)
    gemm<float>(p.transa, p.transb, p.m, p.n, p.k, static_cast<float>(p.alpha), static_cast<const float*>(A), p.lda,
                static_cast<const float*>(B), p.ldb, static_cast<float>(p.beta), static_cast<float*>(C), p.ldc);
  else
    gemm_ex_f32(nullptr, p.transa, p.transb, p.m, p.n, p.k, static_cast<float>(p.alpha), A, at, p.lda, 0, B, bt, p.ldb,
                0, static_cast<float>(p.beta), C, ct, p.ldc, 0, 1, tf32);
}
}  // namespace

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void* alpha_array,
                                          const void* const Aarray[], cudaDataType Atype, const int lda_array[],
                                          const void* const Barray[], cudaDataType Btype, const int ldb_array[],
                                          const void* beta_array, void* const Carray[], cudaDataType Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t computeType) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  bool f64 = false, f32_in = false;
  if (const cublasStatus_t status = check_ex_types(Atype, Btype, Ctype, computeType, f64, f32_in))
    return status;
  if (group_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (group_count == 0) return CUBLAS_STATUS_SUCCESS;
  if (!transa_array || !transb_array || !m_array || !n_array || !k_array || !alpha_array || !Aarray || !lda_array ||
      !Barray || !ldb_array || !beta_array || !Carray || !ldc_array || !group_size)
    return CUBLAS_STATUS_INVALID_VALUE;
  // The host arrays are read now (a captured call replays these values); each problem's
  // (group's) arguments checked as GemmEx checks them.
  std::vector<GroupedProblem> problems;  // one per problem, in order
  for (int g = 0; g < group_count; ++g) {
    if (const cublasStatus_t status = check_gemm(handle, transa_array[g], transb_array[g], m_array[g], n_array[g],
                                                 k_array[g], lda_array[g], ldb_array[g], ldc_array[g], group_size[g]))
      return status;
    const double alpha = f64 ? static_cast<const double*>(alpha_array)[g] : static_cast<const float*>(alpha_array)[g];
    const double beta = f64 ? static_cast<const double*>(beta_array)[g] : static_cast<const float*>(beta_array)[g];
    for (int i = 0; i < group_size[g]; ++i)
      problems.push_back({transa_array[g], transb_array[g], m_array[g], n_array[g], k_array[g], lda_array[g],
                          ldb_array[g], ldc_array[g], alpha, beta});
  }
  const bool tf32 = f32_in && (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                               (computeType == CUBLAS_COMPUTE_32F && handle->math_mode == CUBLAS_TF32_TENSOR_OP_MATH));
  // One piece of work: the pointer arrays are device memory, read when it runs.
  const bool ok = simt::detail::library_call(handle->stream, [=] {
    for (size_t p = 0; p < problems.size(); ++p)
      if (problems[p].m > 0 && problems[p].n > 0)
        grouped_problem(problems[p], Aarray[p], Barray[p], Carray[p], Atype, Btype, Ctype, f64, f32_in, tf32);
  });
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta,
                                    C, Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  if (handle && handle->math_mode == CUBLAS_TF32_TENSOR_OP_MATH)
    return cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C,
                        CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                           const double* beta, double* C, int ldc) {
  return gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC,
                                         int batchCount) {
  if (handle && handle->math_mode == CUBLAS_TF32_TENSOR_OP_MATH)
    return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, strideA, B,
                                      CUDA_R_32F, ldb, strideB, beta, C, CUDA_R_32F, ldc, strideC, batchCount,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                              strideC, batchCount);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb, long long int strideB,
                                         const double* beta, double* C, int ldc, long long int strideC,
                                         int batchCount) {
  return gemm_strided_batched(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                              strideC, batchCount);
}
