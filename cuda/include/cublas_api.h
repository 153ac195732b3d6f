/* cublas_api.h — the part of cuBLAS and cuBLASLt that cddp calls, declared by hand: the build
 * machine has no cuBLAS headers (the libraries are loaded at first use from NVIDIA's wheels,
 * runtime/libs.c), and the C ABI below is stable across cuBLAS 11.x-13.x.
 *
 * Source: written from NVIDIA's cuBLAS documentation for CUDA 13.0 (cuBLAS 13.0, the
 * "cuBLAS API" and "cuBLASLt API" chapters: cublasStatus_t, cublasOperation_t, cublasMath_t,
 * cublasComputeType_t, cublasGemmEx, cublasLtMatmul and its descriptor attributes), with the
 * enum values as they appear there. Data types (cudaDataType: CUDA_R_32F, CUDA_R_16F,
 * CUDA_R_16BF) come from CUDA's own library_types.h, which the toolkit ships.
 *
 * Only pointer types to these functions are declared (no prototypes), so nothing here can
 * bind to a symbol at link time: every call goes through the table that the loader filled.
 * Matrices in cuBLAS are column-major: cddp's row-major (M, K) @ (K, N) is computed as the
 * column-major (N, K) @ (K, M) = C^T (the usual trick; phase 2's linear code does it).
 */
#ifndef CDDP_CUBLAS_API_H
#define CDDP_CUBLAS_API_H

#include <stddef.h>
#include <stdint.h>
#include <library_types.h>    /* cudaDataType, libraryPropertyType (CUDA toolkit header) */

#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cddp_cudaStream_t;   /* == cudaStream_t, without cuda_runtime_api.h */

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
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,        /* allow TF32 for float32 (torch: allow_tf32) */
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

/* ---- cuBLASLt ---------------------------------------------------------------------------- */

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cddp_cublasLtMatmulDesc *cublasLtMatmulDesc_t;          /* opaque to us */
typedef struct cddp_cublasLtMatrixLayout *cublasLtMatrixLayout_t;
typedef struct cddp_cublasLtMatmulPreference *cublasLtMatmulPreference_t;

typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
    CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
    CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
    CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
    CUBLASLT_MATRIX_LAYOUT_COLS = 3,
    CUBLASLT_MATRIX_LAYOUT_LD = 4,
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,             /* int32_t */
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,    /* int64_t, elements */
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
    CUBLASLT_MATMUL_DESC_TRANSA = 3,                    /* int32_t cublasOperation_t */
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,                  /* uint32_t cublasLtEpilogue_t */
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,              /* const void * (device) */
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,           /* int32_t cudaDataType */
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_BIAS = 4,                         /* D = A B + bias (bias per row of D) */
    CUBLASLT_EPILOGUE_RELU_BIAS = 6,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
    CUBLASLT_EPILOGUE_BGRADA = 256,                     /* bias gradient from A's rows */
    CUBLASLT_EPILOGUE_BGRADB = 512,                     /* bias gradient from B's columns */
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,       /* uint64_t */
} cublasLtMatmulPreferenceAttributes_t;

/* ---- the function tables the loader fills (runtime/libs.c lists the symbols) -------------- */

typedef struct cddp_cublas_api {
    cublasStatus_t (*cublasCreate_v2)(cublasHandle_t *handle);
    cublasStatus_t (*cublasDestroy_v2)(cublasHandle_t handle);
    cublasStatus_t (*cublasSetStream_v2)(cublasHandle_t handle, cddp_cudaStream_t stream);
    cublasStatus_t (*cublasSetMathMode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*cublasSetWorkspace_v2)(cublasHandle_t handle, void *workspace, size_t bytes);
    cublasStatus_t (*cublasGetProperty)(libraryPropertyType type, int *value);
    cublasStatus_t (*cublasGemmEx)(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType Atype, int lda,
                                   const void *B, cudaDataType Btype, int ldb, const void *beta,
                                   void *C, cudaDataType Ctype, int ldc,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo);
    cublasStatus_t (*cublasGemmStridedBatchedEx)(
        cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
        int k, const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA,
        const void *B, cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C,
        cudaDataType Ctype, int ldc, long long strideC, int batchCount,
        cublasComputeType_t computeType, cublasGemmAlgo_t algo);
    /* optional */
    const char *(*cublasGetStatusString)(cublasStatus_t status);
} cddp_cublas_api;

typedef struct cddp_cublaslt_api {
    cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t *handle);
    cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t handle);
    size_t (*cublasLtGetVersion)(void);
    cublasStatus_t (*cublasLtMatmul)(
        cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
        cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
        const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
        cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
        size_t workspaceBytes, cddp_cudaStream_t stream);
    cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *desc,
                                               cublasComputeType_t computeType,
                                               cudaDataType scaleType);
    cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t desc);
    cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t desc,
                                                     cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t bytes);
    cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                                 uint64_t rows, uint64_t cols, int64_t ld);
    cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t layout);
    cublasStatus_t (*cublasLtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t layout,
                                                       cublasLtMatrixLayoutAttribute_t attr,
                                                       const void *buf, size_t bytes);
    cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *pref);
    cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t pref);
    cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(
        cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
        const void *buf, size_t bytes);
    cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(
        cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
        cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
        cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *results,
        int *returned);
    /* optional */
    const char *(*cublasLtGetStatusString)(cublasStatus_t status);
} cddp_cublaslt_api;

extern const cddp_lib_spec cddp_cublas_spec;
extern const cddp_lib_spec cddp_cublaslt_spec;

#ifdef __cplusplus
}
#endif
#endif
