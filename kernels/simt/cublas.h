// kernels/simt/cublas.h: the cuBLAS and cuBLASLt subset the project uses. Under nvcc (or any build
// without SIMT_EMULATE) this is the real <cublas_v2.h> and <cublasLt.h>; in the emulated build it
// declares the same API,
// implemented on the host with Eigen in cublas_emu.cpp, including the mixed-precision GemmEx calls
// (16-bit inputs and outputs, f32 compute, TF32) with cuBLAS's rounding, and the grouped GEMM
// (cublasGemmGroupedBatchedEx: one piece of work). Same contract as cuBLAS: column-major
// matrices, op flags, leading dimensions, strides, alpha/beta read through pointers (host or
// "device": both are host memory here), beta == 0 means C is not read, and invalid arguments
// return CUBLAS_STATUS_INVALID_VALUE without touching C.
#pragma once

#if !defined(SIMT_EMULATE)
#include <cublasLt.h>
#include <cublas_v2.h>
#else
#include <cstddef>
#include <cstdint>

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

// library_types.h's element types (the values of CUDA 12/13), the ones GemmEx takes here.
typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14
} cudaDataType;

// How GemmEx computes. CUBLAS_COMPUTE_32F: f32 products and sums (16-bit inputs are exact in f32);
// CUBLAS_COMPUTE_32F_FAST_TF32: both inputs rounded to TF32 (10 fraction bits) first, f32 sums.
typedef enum {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

// CUBLAS_TF32_TENSOR_OP_MATH lets cublasSgemm* (and GemmEx with CUBLAS_COMPUTE_32F on f32 data)
// round their inputs to TF32, as CUBLAS_COMPUTE_32F_FAST_TF32 does.
typedef enum {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;

const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream);
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t* mode);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode);

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

// C = alpha * op(A) * op(B) + beta * C with the element types and compute type given: A and B both
// CUDA_R_16BF (C CUDA_R_16BF or CUDA_R_32F), both CUDA_R_16F (C CUDA_R_16F or CUDA_R_32F), or all
// CUDA_R_32F, under CUBLAS_COMPUTE_32F* (alpha, beta: float); all CUDA_R_64F under
// CUBLAS_COMPUTE_64F (double). Other combinations: CUBLAS_STATUS_NOT_SUPPORTED. The result is
// computed in f32 (f64) and rounded once, to nearest even, to C's type. All-f32 data without TF32
// (neither the compute type nor the handle's math mode asks for it) is cublasSgemm's computation.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo);

// Grouped GEMMs in one call (CUDA 12.5+): group_count groups, group i of group_size[i] problems
// that share transa_array[i], transb_array[i], m/n/k/lda/ldb/ldc_array[i], alpha_array[i] and
// beta_array[i]; problem p (counted over all groups in order) is C_p = alpha op(A_p) op(B_p) +
// beta C_p with A_p = Aarray[p], B_p = Barray[p], C_p = Carray[p]. The size, op, ld and scalar
// arrays are HOST memory, read at the call (alpha and beta: float under the 32F compute types,
// double under CUBLAS_COMPUTE_64F, whatever the handle's pointer mode); Aarray, Barray and Carray
// are DEVICE memory, read when the work runs (a GPU reads them in its kernel; here, when the call
// runs after its stream's queued work, or at each replay of a captured call): a caller must not
// rewrite them before then. Types as GemmEx's; each problem is computed exactly as GemmEx computes
// it (the same rounding), the whole call one piece of work (one launch, one node of a capture).
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void* alpha_array,
                                          const void* const Aarray[], cudaDataType Atype, const int lda_array[],
                                          const void* const Barray[], cudaDataType Btype, const int ldb_array[],
                                          const void* beta_array, void* const Carray[], cudaDataType Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t computeType);

// ---- cuBLASLt: one GEMM with a fused epilogue ---------------------------------------------------
// cublasLtMatmul: D = epilogue(alpha * op(A) op(B) + beta * C), op(A) m x k, op(B) k x n, C and D
// m x n, every matrix column-major as its layout (cublasLtMatrixLayoutCreate: type, rows, cols, ld
// of the matrix as stored, before op) says; C may be D (in place, beta = 1 accumulates). The
// epilogues emulated, with cuBLASLt's semantics (the bias and aux pointers and the aux leading
// dimension set on the descriptor):
//   DEFAULT        nothing more.
//   BIAS           + bias[i] on every row i of D (bias: m values, D's type).
//   GELU_AUX_BIAS  pre = ... + bias[i]; aux (m x n, ld EPILOGUE_AUX_LD, D's type) = pre;
//                  D = gelu(pre), the tanh approximation, computed on the f32 (f64) pre.
//   DGELU_BGRAD    D = (alpha op(A) op(B) + beta C) * gelu'(aux): aux is the pre-activation a
//                  GELU_AUX epilogue saved; bias[i] = sum over the n columns of D's row i (the
//                  bias gradient of that GELU's bias), summed in the compute type, rounded once.
//   BGRADA         bias[i] = sum over k of op(A)[i, :] (m values), written, the GEMM unchanged.
//   BGRADB         bias[j] = sum over k of op(B)[:, j] (n values), written, the GEMM unchanged.
// A bias gradient is written, never accumulated (beta applies to C alone). Compute types as
// GemmEx's (32F with 16-bit or f32 data, FAST_TF32, 64F); the scale type is the compute's (f32 or
// f64). algo: null (cuBLASLt's heuristic: one algorithm here). The workspace may be null (0 bytes).
// Batched layouts (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) are not emulated: one matrix per call.
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_st* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_st* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulAlgo_st {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

// cublasLt.h's values.
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,                // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,                // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,              // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,          // void*
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,  // void*
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12       // int64_t
} cublasLtMatmulDescAttributes_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

#endif  // SIMT_EMULATE
