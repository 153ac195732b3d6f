/* libs.c — which NVIDIA libraries cddp loads at first use, where each is looked for, which of
 * their symbols it needs (the specs of loader.h), and the process-wide registry of the ones
 * opened so far (one mutex; a library stays open until exit, as CuPy and torch keep theirs).
 * Pure C: the registry takes the wheel search roots (sys.path) from its caller.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cublas_api.h"
#include "libs.h"
#include "nccl_api.h"

#define SYM(T, f, req) { #f, offsetof(T, f), req }

/* ---- the specs ---------------------------------------------------------------------------- */

static const char *const cublas_sonames[] = { "libcublas.so.13", "libcublas.so.12", NULL };
static const char *const cublaslt_sonames[] = { "libcublasLt.so.13", "libcublasLt.so.12", NULL };
/* nvidia-cublas 13.x installs into nvidia/cu13/lib; the 12.x wheels used nvidia/cublas/lib */
static const char *const cublas_dirs[] = { "nvidia/cu13/lib", "nvidia/cublas/lib", NULL };
static const char *const nccl_sonames[] = { "libnccl.so.2", NULL };
static const char *const nccl_dirs[] = { "nvidia/nccl/lib", "nvidia/cu13/lib", NULL };

static const cddp_lib_symbol cublas_syms[] = {
    SYM(cddp_cublas_api, cublasCreate_v2, 1),
    SYM(cddp_cublas_api, cublasDestroy_v2, 1),
    SYM(cddp_cublas_api, cublasSetStream_v2, 1),
    SYM(cddp_cublas_api, cublasSetMathMode, 1),
    SYM(cddp_cublas_api, cublasSetWorkspace_v2, 1),
    SYM(cddp_cublas_api, cublasGetProperty, 1),
    SYM(cddp_cublas_api, cublasGemmEx, 1),
    SYM(cddp_cublas_api, cublasGemmStridedBatchedEx, 1),
    SYM(cddp_cublas_api, cublasGetStatusString, 0),
};

static const cddp_lib_symbol cublaslt_syms[] = {
    SYM(cddp_cublaslt_api, cublasLtCreate, 1),
    SYM(cddp_cublaslt_api, cublasLtDestroy, 1),
    SYM(cddp_cublaslt_api, cublasLtGetVersion, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmul, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulDescCreate, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulDescDestroy, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulDescSetAttribute, 1),
    SYM(cddp_cublaslt_api, cublasLtMatrixLayoutCreate, 1),
    SYM(cddp_cublaslt_api, cublasLtMatrixLayoutDestroy, 1),
    SYM(cddp_cublaslt_api, cublasLtMatrixLayoutSetAttribute, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulPreferenceCreate, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulPreferenceDestroy, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulPreferenceSetAttribute, 1),
    SYM(cddp_cublaslt_api, cublasLtMatmulAlgoGetHeuristic, 1),
    SYM(cddp_cublaslt_api, cublasLtGetStatusString, 0),
};

static const cddp_lib_symbol nccl_syms[] = {
    SYM(cddp_nccl_api, ncclGetVersion, 1),
    SYM(cddp_nccl_api, ncclGetUniqueId, 1),
    SYM(cddp_nccl_api, ncclCommInitRank, 1),
    SYM(cddp_nccl_api, ncclCommDestroy, 1),
    SYM(cddp_nccl_api, ncclCommAbort, 1),
    SYM(cddp_nccl_api, ncclCommGetAsyncError, 1),
    SYM(cddp_nccl_api, ncclGetErrorString, 1),
    SYM(cddp_nccl_api, ncclCommCount, 1),
    SYM(cddp_nccl_api, ncclCommUserRank, 1),
    SYM(cddp_nccl_api, ncclAllReduce, 1),
    SYM(cddp_nccl_api, ncclBroadcast, 1),
    SYM(cddp_nccl_api, ncclReduce, 1),
    SYM(cddp_nccl_api, ncclAllGather, 1),
    SYM(cddp_nccl_api, ncclReduceScatter, 1),
    SYM(cddp_nccl_api, ncclSend, 1),
    SYM(cddp_nccl_api, ncclRecv, 1),
    SYM(cddp_nccl_api, ncclGroupStart, 1),
    SYM(cddp_nccl_api, ncclGroupEnd, 1),
    SYM(cddp_nccl_api, ncclCommFinalize, 0),
    SYM(cddp_nccl_api, ncclGetLastError, 0),
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

const cddp_lib_spec cddp_cublas_spec = {
    "cublas", "cuBLAS", "CDDP_CUBLAS_LIB", NULL, cublas_sonames, cublas_dirs,
    cublas_syms, N(cublas_syms), sizeof(cddp_cublas_api),
    "pip install 'cddp[cuda]' (nvidia-cublas) or set CDDP_CUBLAS_LIB",
};
const cddp_lib_spec cddp_cublaslt_spec = {
    "cublasLt", "cuBLASLt", "CDDP_CUBLASLT_LIB", "CDDP_CUBLAS_LIB", cublaslt_sonames,
    cublas_dirs, cublaslt_syms, N(cublaslt_syms), sizeof(cddp_cublaslt_api),
    "pip install 'cddp[cuda]' (nvidia-cublas) or set CDDP_CUBLASLT_LIB",
};
const cddp_lib_spec cddp_nccl_spec = {
    "nccl", "NCCL", "CDDP_NCCL_LIB", NULL, nccl_sonames, nccl_dirs,
    nccl_syms, N(nccl_syms), sizeof(cddp_nccl_api),
    "pip install 'cddp[cuda]' (nvidia-nccl-cu13) or set CDDP_NCCL_LIB",
};

/* ---- versions ----------------------------------------------------------------------------- */

void cddp_libs_version(const cddp_lib_spec *spec, const void *table, char *buf, size_t cap)
{
    snprintf(buf, cap, "?");
    if (spec == &cddp_nccl_spec) {
        const cddp_nccl_api *t = table;
        int v = 0;
        if (t->ncclGetVersion && t->ncclGetVersion(&v) == ncclSuccess && v > 0) {
            if (v >= 10000)          /* NCCL >= 2.9: X*10000 + Y*100 + Z */
                snprintf(buf, cap, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
            else                     /* older: X*1000 + Y*100 + Z */
                snprintf(buf, cap, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
        }
    } else if (spec == &cddp_cublaslt_spec) {
        const cddp_cublaslt_api *t = table;
        size_t v = t->cublasLtGetVersion ? t->cublasLtGetVersion() : 0;
        if (v)
            snprintf(buf, cap, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    } else if (spec == &cddp_cublas_spec) {
        const cddp_cublas_api *t = table;
        int major = 0, minor = 0, patch = 0;
        if (t->cublasGetProperty && t->cublasGetProperty(MAJOR_VERSION, &major) == 0 &&
            t->cublasGetProperty(MINOR_VERSION, &minor) == 0 &&
            t->cublasGetProperty(PATCH_LEVEL, &patch) == 0)
            snprintf(buf, cap, "%d.%d.%d", major, minor, patch);
    }
}

/* ---- the registry ------------------------------------------------------------------------- */

typedef struct lib_entry {
    const cddp_lib_spec *spec;
    cddp_lib lib;
    union { cddp_cublas_api cublas; cddp_cublaslt_api cublaslt; cddp_nccl_api nccl; } table;
    int loaded;
    char version[32];
} lib_entry;

static lib_entry entries[CDDP_LIB_COUNT] = {
    [CDDP_LIB_CUBLASLT] = { .spec = &cddp_cublaslt_spec },
    [CDDP_LIB_CUBLAS] = { .spec = &cddp_cublas_spec },
    [CDDP_LIB_NCCL] = { .spec = &cddp_nccl_spec },
};
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;

const cddp_lib_spec *cddp_libs_spec(int which)
{
    return which >= 0 && which < CDDP_LIB_COUNT ? entries[which].spec : NULL;
}

int cddp_libs_find(const char *key)
{
    for (int i = 0; i < CDDP_LIB_COUNT; i++)
        if (strcmp(entries[i].spec->key, key) == 0)
            return i;
    return -1;
}

static int load_locked(int which, const char *const *dirs, size_t ndirs)
{
    lib_entry *e = &entries[which];
    int rc;
    if (e->loaded)
        return 0;
    /* libcublas.so.N needs libcublasLt.so.N: open Lt first (by its own search), so cuBLAS's
     * dependency resolves to the copy already in the process whichever folder it came from */
    if (which == CDDP_LIB_CUBLAS && (rc = load_locked(CDDP_LIB_CUBLASLT, dirs, ndirs)) < 0)
        return rc;
    rc = cddp_lib_open(e->spec, dirs, ndirs, &e->lib, &e->table);
    if (rc < 0)
        return rc;
    cddp_libs_version(e->spec, &e->table, e->version, sizeof e->version);
    e->loaded = 1;
    return 0;
}

int cddp_libs_load(int which, const char *const *dirs, size_t ndirs)
{
    int rc;
    if (!cddp_libs_spec(which))
        return cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown library index %d", which);
    pthread_mutex_lock(&registry_mu);
    rc = load_locked(which, dirs, ndirs);
    pthread_mutex_unlock(&registry_mu);
    return rc;
}

const void *cddp_libs_table(int which)
{
    const void *t = NULL;
    if (!cddp_libs_spec(which))
        return NULL;
    pthread_mutex_lock(&registry_mu);
    if (entries[which].loaded)
        t = &entries[which].table;
    pthread_mutex_unlock(&registry_mu);
    return t;
}

int cddp_libs_status(int which, char *path, size_t path_cap, char *version, size_t version_cap)
{
    int loaded;
    if (!cddp_libs_spec(which))
        return -1;
    pthread_mutex_lock(&registry_mu);
    loaded = entries[which].loaded;
    snprintf(path, path_cap, "%s", loaded ? entries[which].lib.path : "");
    snprintf(version, version_cap, "%s", loaded ? entries[which].version : "");
    pthread_mutex_unlock(&registry_mu);
    return loaded;
}
