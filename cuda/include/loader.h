/* loader.h — finding and opening NVIDIA's shared libraries (cuBLAS, cuBLASLt, NCCL) at first
 * use, so the build needs none of them (CuPy's approach). Pure C over dlopen/dlsym.
 *
 * Search order for one library (first hit wins):
 *   1. its environment override (CDDP_CUBLAS_LIB, CDDP_CUBLASLT_LIB, CDDP_NCCL_LIB): a file,
 *      or a directory holding one of the library's sonames. Authoritative: when set, nothing
 *      else is tried, and a bad value is an error naming the variable. A library may also look
 *      in the directory of a sibling's override (cuBLASLt beside CDDP_CUBLAS_LIB).
 *   2. the NVIDIA wheels: for each directory the caller passes (sys.path, in order), each of
 *      the library's sub-folders (nvidia/cu13/lib, nvidia/cublas/lib, nvidia/nccl/lib), each
 *      soname (libcublas.so.13 before .12): the wheels ship no unversioned .so.
 *   3. the system loader, by soname (LD_LIBRARY_PATH, ld.so.cache).
 * A candidate that exists but does not open (not a library, wrong architecture, missing
 * dependency) or lacks a required symbol is noted in the search report and skipped.
 *
 * Symbols resolve into a caller-provided function table (a struct of function pointers) by
 * the offsets listed in the spec; optional symbols may stay NULL.
 */
#ifndef CDDP_CUDA_LOADER_H
#define CDDP_CUDA_LOADER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cddp_lib_symbol {
    const char *name;      /* the exported C name, e.g. "ncclAllReduce" */
    size_t offset;         /* offsetof(table struct, its pointer) */
    int required;          /* 0: may be absent (older library) and stays NULL */
} cddp_lib_symbol;

typedef struct cddp_lib_spec {
    const char *key;                 /* "cublas", "cublasLt", "nccl": the Python-facing name */
    const char *display;             /* "cuBLAS": used in messages */
    const char *env;                 /* the override variable */
    const char *sibling_env;         /* another override whose directory to look in, or NULL */
    const char *const *sonames;      /* NULL-terminated, preferred first */
    const char *const *subdirs;      /* NULL-terminated, relative to each search directory */
    const cddp_lib_symbol *symbols;  /* nsymbols entries */
    size_t nsymbols;
    size_t table_size;               /* sizeof the function table */
    const char *hint;                /* how to get it: "pip install 'cddp[cuda]' or set ..." */
} cddp_lib_spec;

/* An opened library. `report` says what was searched (for status and errors). */
typedef struct cddp_lib {
    void *handle;          /* dlopen handle, NULL when not open */
    char path[4096];       /* the file opened, or the soname the system loader resolved */
    char report[4096];     /* "; "-separated search notes */
} cddp_lib;

/* Search for `spec`'s library (order above), open it and fill `table` (spec->table_size bytes,
 * zeroed first) with its symbols. `dirs` are the wheel search roots (sys.path), `ndirs` of
 * them; NULL entries are skipped. 0 on success (lib->handle open: the caller owns it and
 * closes it with cddp_lib_close); CDDP_CUDA_ELIB with the message "<display> not found: <hint>
 * (searched: ...)" otherwise, or one naming the override when that is set but unusable. */
int cddp_lib_open(const cddp_lib_spec *spec, const char *const *dirs, size_t ndirs,
                  cddp_lib *lib, void *table);

/* dlclose and reset; safe on a never-opened or already closed lib. */
void cddp_lib_close(cddp_lib *lib);

#ifdef __cplusplus
}
#endif
#endif
