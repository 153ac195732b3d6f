/* check.c — the thread-local error message behind check.h, and names for cuBLAS / NCCL status
 * codes (the libraries' own *GetErrorString may be unloaded, or be what failed).
 * Pure C: no CUDA header needed.
 */
#include <stdarg.h>
#include <stdio.h>

#include "check.h"

static __thread char errmsg[1024];
static __thread int errcode;

int cddp_cuda_seterr(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    errcode = code;
    return code;
}

const char *cddp_cuda_errmsg(void)
{
    return errmsg;
}

int cddp_cuda_errcode(void)
{
    return errcode;
}

void cddp_cuda_clearerr(void)
{
    errmsg[0] = '\0';
    errcode = 0;
}

int cddp_cuda_check_failed(int code, const char *call, const char *file, int line,
                           const char *what)
{
    return cddp_cuda_seterr(code, "%s failed at %s:%d: %s", call, file, line, what);
}

/* cublasStatus_t values (cuBLAS 11-13; stable since cuBLAS 10). */
const char *cddp_cublas_status_name(int status)
{
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED (cuBLAS could not start: no device or driver?)";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED (cuBLAS could not allocate device memory)";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE (an argument out of range)";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH (the device lacks a feature this call needs)";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED (a cuBLAS kernel failed to launch or run)";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED (this combination of types/layouts)";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

/* ncclResult_t values (NCCL 2.x; ncclTimeout from 2.29). */
const char *cddp_nccl_result_name(int result)
{
    switch (result) {
    case 0: return "ncclSuccess";
    case 1: return "ncclUnhandledCudaError (a CUDA call inside NCCL failed)";
    case 2: return "ncclSystemError (a system call failed: network, shared memory, or a peer died)";
    case 3: return "ncclInternalError";
    case 4: return "ncclInvalidArgument";
    case 5: return "ncclInvalidUsage (e.g. ranks called different collectives)";
    case 6: return "ncclRemoteError (a remote process exited or the network failed)";
    case 7: return "ncclInProgress";
    case 8: return "ncclTimeout";
    default: return "unknown NCCL result";
    }
}
