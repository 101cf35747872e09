// kernels/simt/cublas.h: the cuBLAS subset the project uses. Under nvcc (or any build without
// SIMT_EMULATE) this is the real <cublas_v2.h>; in the emulated build it declares the same API,
// implemented on the host with Eigen in cublas_emu.cpp. Same contract as cuBLAS: column-major
// matrices, op flags, leading dimensions, strides, alpha/beta read through pointers (host or
// "device": both are host memory here), beta == 0 means C is not read, and invalid arguments
// return CUBLAS_STATUS_INVALID_VALUE without touching C.
#pragma once

#if !defined(SIMT_EMULATE)
#include <cublas_v2.h>
#else

typedef struct CUstream_st* cudaStream_t;  // the same declaration as in simt.h
typedef struct cublasContext* cublasHandle_t;

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_OP_C = 2,  // conjugate transpose: the same as CUBLAS_OP_T for real types
  CUBLAS_OP_HERMITAN = 2,
  CUBLAS_OP_CONJG = 3  // not supported by cuBLAS either: INVALID_VALUE
} cublasOperation_t;

typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;

const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream);
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t* mode);

// C = alpha * op(A) * op(B) + beta * C, with op(A) m x k, op(B) k x n, C m x n.
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc);
cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                           const double* beta, double* C, int ldc);
// The same for batchCount matrices: the i-th uses A + i * strideA, B + i * strideB, C + i * strideC.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC,
                                         int batchCount);
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb, long long int strideB,
                                         const double* beta, double* C, int ldc, long long int strideC,
                                         int batchCount);

#endif  // SIMT_EMULATE
