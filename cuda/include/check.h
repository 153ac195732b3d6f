/* check.h — error codes and the one error-check macro shape of cddp._cuda (llm.c's cudaCheck,
 * minus the exit): every CUDA, cuBLAS, NCCL and malloc call goes through a CHECK_* macro that,
 * on failure, records a message naming the call, the library's error name and text, and the
 * file:line, sets `rc` and jumps to the function's `fail:` label.
 *
 *     int f(...)
 *     {
 *         int rc = 0;
 *         CHECK_CUDA(cudaMalloc(&p, n));
 *         CHECK_ALLOC(buf = malloc(k));
 *         ...
 *     fail:
 *         free(buf);
 *         return rc;
 *     }
 *
 * Core functions return 0 or a negative CDDP_CUDA_E* code; the message lives in a thread-local
 * buffer (cddp_cuda_errmsg) until the binding turns it into a Python exception exactly once
 * (binding/module.c, cddp_cuda_raise). Nothing here exits or aborts.
 *
 * Plain C (included by .c files compiled by the host compiler and by .cu files compiled by
 * nvcc); the CUDA macros need <cuda_runtime_api.h> included first, the cuBLAS/NCCL ones the
 * hand-written API headers (cublas_api.h, nccl_api.h) and a loaded library table.
 */
#ifndef CDDP_CUDA_CHECK_H
#define CDDP_CUDA_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CDDP_CUDA_OK = 0,
    CDDP_CUDA_ERR = -1,      /* a CUDA / cuBLAS / NCCL call failed (RuntimeError) */
    CDDP_CUDA_EOOM = -2,     /* the device allocator is out of memory (OutOfMemoryError) */
    CDDP_CUDA_ENODEV = -3,   /* no CUDA device, or an ordinal out of range (RuntimeError) */
    CDDP_CUDA_ELIB = -4,     /* a library could not be loaded or lacks symbols (RuntimeError) */
    CDDP_CUDA_EARG = -5,     /* an argument out of its domain (ValueError) */
    CDDP_CUDA_ENOMEM = -6,   /* host malloc failed (MemoryError) */
};

/* Record `fmt` (printf-style) as this thread's last error with code `code`; returns `code` so
 * callers can write `return cddp_cuda_seterr(...)`. Truncates at 1 KiB. */
int cddp_cuda_seterr(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* This thread's last message ("" when none) and code (0 when none); cddp_cuda_clearerr resets. */
const char *cddp_cuda_errmsg(void);
int cddp_cuda_errcode(void);
void cddp_cuda_clearerr(void);

/* Names for library status codes that have no loaded library to ask (cuBLAS's and NCCL's
 * GetErrorString live in libraries that may be absent, or be the one that failed). */
const char *cddp_cublas_status_name(int status);
const char *cddp_nccl_result_name(int result);

/* Shared body of the CHECK_* macros: record "<call> failed at file:line: <what>". */
int cddp_cuda_check_failed(int code, const char *call, const char *file, int line,
                           const char *what);

#define CDDP_CHECK_(ok, code, call_text, what)                                          \
    do {                                                                                \
        if (!(ok)) {                                                                    \
            rc = cddp_cuda_check_failed((code), (call_text), __FILE__, __LINE__, (what)); \
            goto fail;                                                                  \
        }                                                                               \
    } while (0)

/* A cudaError_t-returning call. cudaErrorMemoryAllocation maps to CDDP_CUDA_EOOM. */
#define CHECK_CUDA(call)                                                                \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            char w_[192];                                                               \
            snprintf(w_, sizeof w_, "%s (%s)", cudaGetErrorString(e_), cudaGetErrorName(e_)); \
            (void)cudaGetLastError();   /* clear a non-sticky error so later calls start clean */ \
            CDDP_CHECK_(0, e_ == cudaErrorMemoryAllocation ? CDDP_CUDA_EOOM : CDDP_CUDA_ERR, \
                        #call, w_);                                                     \
        }                                                                               \
    } while (0)

/* A cublasStatus_t-returning call (cuBLAS or cuBLASLt). */
#define CHECK_CUBLAS(call)                                                              \
    do {                                                                                \
        int s_ = (int)(call);                                                           \
        CDDP_CHECK_(s_ == 0, s_ == 3 ? CDDP_CUDA_EOOM : CDDP_CUDA_ERR, #call,          \
                    cddp_cublas_status_name(s_));                                       \
    } while (0)

/* An ncclResult_t-returning call. */
#define CHECK_NCCL(call)                                                                \
    do {                                                                                \
        int r_ = (int)(call);                                                           \
        CDDP_CHECK_(r_ == 0, CDDP_CUDA_ERR, #call, cddp_nccl_result_name(r_));          \
    } while (0)

/* A host allocation: `CHECK_ALLOC(p = malloc(n))`. */
#define CHECK_ALLOC(expr)                                                               \
    CDDP_CHECK_((expr) != NULL, CDDP_CUDA_ENOMEM, #expr, "host out of memory")

/* A cddp_cuda_* call that already recorded its own message: propagate its code. */
#define CHECK_RC(call)                                                                  \
    do {                                                                                \
        int c_ = (call);                                                                \
        if (c_ < 0) {                                                                   \
            rc = c_;                                                                    \
            goto fail;                                                                  \
        }                                                                               \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
