/* libs.h — the process-wide registry of NVIDIA libraries loaded at first use (runtime/libs.c):
 * cuBLASLt, cuBLAS (which loads cuBLASLt first) and NCCL, each opened once by the search of
 * loader.h and kept until exit. Thread-safe (one mutex). Pure C.
 *
 *     if (cddp_libs_load(CDDP_LIB_NCCL, sys_path, n) < 0) -> error recorded (check.h)
 *     const cddp_nccl_api *nccl = cddp_libs_table(CDDP_LIB_NCCL);
 */
#ifndef CDDP_CUDA_LIBS_H
#define CDDP_CUDA_LIBS_H

#include <stddef.h>

#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CDDP_LIB_CUBLASLT, CDDP_LIB_CUBLAS, CDDP_LIB_NCCL, CDDP_LIB_COUNT };

/* The spec of library `which` (NULL when out of range); cddp_libs_find maps "nccl" -> index. */
const cddp_lib_spec *cddp_libs_spec(int which);
int cddp_libs_find(const char *key);

/* Open `which` unless open already; `dirs` are the wheel search roots (sys.path). 0, or a
 * negative code with the loader's message. A failure is not remembered: the next call
 * searches again (a wheel installed meanwhile is found). */
int cddp_libs_load(int which, const char *const *dirs, size_t ndirs);

/* The function table of an open library (cddp_cublas_api / cddp_cublaslt_api /
 * cddp_nccl_api), or NULL while it is not open. Valid until exit. */
const void *cddp_libs_table(int which);

/* 1 open (path and version filled), 0 not open, -1 bad index. */
int cddp_libs_status(int which, char *path, size_t path_cap, char *version, size_t version_cap);

/* "2.32.3" for an open table of `spec`, "?" when the library does not say. */
void cddp_libs_version(const cddp_lib_spec *spec, const void *table, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
