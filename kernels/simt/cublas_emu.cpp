// kernels/simt/cublas_emu.cpp: host implementations of the cuBLAS subset in cublas.h for the
// emulated build. Matrices are Eigen::Maps over the caller's column-major storage, so leading
// dimensions and batch strides cost no copies; Eigen does the GEMM, at the call, after the work
// queued on the handle's stream.
#include <Eigen/Dense>

#include <algorithm>

#include "cublas.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

namespace simt::detail {
void before_host_work(cudaStream_t stream);  // simt.h (which cublas.h does not include)
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

template <class T>
cublasStatus_t gemm_strided_batched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                    int n, int k, const T* alpha, const T* A, int lda, long long stride_a, const T* B,
                                    int ldb, long long stride_b, const T* beta, T* C, int ldc, long long stride_c,
                                    int batch_count) {
  const cublasStatus_t status = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc, batch_count);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  // The GEMM runs at once: after the work queued on its stream (or, on the legacy stream, after
  // what blocking streams have queued), a schedule a GPU could take.
  simt::detail::before_host_work(handle->stream);
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batch_count; ++i)
    gemm(transa, transb, m, n, k, *alpha, A + i * stride_a, lda, B + i * stride_b, ldb, *beta, C + i * stride_c,
         ldc);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

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

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
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
