/* ops/linalg/blas.c — find a BLAS at import, and the GEMM every matmul in cddp goes through.
 *
 * Mirrors: torch's CPU BLAS dispatch (at::native::cpublas::gemm) and torch.set_num_threads /
 * torch.get_num_threads; cddp._C._blas_info() says what was found.
 *
 * Where the BLAS comes from: NumPy's wheels ship OpenBLAS (numpy.libs/libscipy_openblas64_-*.so
 * for NumPy 2, libopenblas64_-*.so for NumPy 1.x) and NumPy is imported before this runs, so the
 * library is already mapped: we walk the loaded objects (dl_iterate_phdr) for one whose name
 * says BLAS, then look in numpy.libs, then try common system names. Symbols carry a
 * prefix/suffix that also tells the integer width:
 *     scipy_cblas_sgemm64_ / cblas_sgemm64_      ILP64 (64-bit ints)
 *     scipy_cblas_sgemm    / cblas_sgemm         LP64 (32-bit ints), unless openblas_get_config
 *                                                says USE64BITINT
 * CDDP_BLAS=<path> forces a library, CDDP_BLAS=none the portable kernel (tests use it).
 *
 * Large single-threaded float32 products on AVX-512 CPUs run cddp's own kernel
 * (sgemm_avx512.c) when the library's kernels are older than the CPU (own_sgemm_wanted);
 * CDDP_GEMM=blas or =own overrides the choice.
 *
 * The library is process-global (one OpenBLAS, shared with NumPy), so its handles live in a
 * static, not in module state; cddp._C loads once per process anyway.
 *
 * Without a library (or for integer dtypes, or operands BLAS cannot address) the portable
 * kernel below runs: row-major C += A @ B over K x N panels of B packed contiguous, so the inner
 * loop is a unit-stride axpy the compiler vectorizes.
 */
#include "ops/linalg/blas.h"
#include "module.h"
#include <dlfcn.h>
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef __linux__
#include <link.h>
#endif

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };   /* CBLAS enum values */

typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                           int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*dgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, double, const double *,
                           int64_t, const double *, int64_t, double, double *, int64_t);
typedef void (*sgemm32_fn)(int, int, int, int, int, int, float, const float *, int,
                           const float *, int, float, float *, int);
typedef void (*dgemm32_fn)(int, int, int, int, int, int, double, const double *, int,
                           const double *, int, double, double *, int);
/* gemv: y = alpha * op(A) @ x + beta * y;  dot: sum x[i*incx] * y[i*incy] */
typedef void (*sgemv64_fn)(int, int, int64_t, int64_t, float, const float *, int64_t,
                           const float *, int64_t, float, float *, int64_t);
typedef void (*dgemv64_fn)(int, int, int64_t, int64_t, double, const double *, int64_t,
                           const double *, int64_t, double, double *, int64_t);
typedef void (*sgemv32_fn)(int, int, int, int, float, const float *, int, const float *, int,
                           float, float *, int);
typedef void (*dgemv32_fn)(int, int, int, int, double, const double *, int, const double *, int,
                           double, double *, int);
typedef float (*sdot64_fn)(int64_t, const float *, int64_t, const float *, int64_t);
typedef double (*ddot64_fn)(int64_t, const double *, int64_t, const double *, int64_t);
typedef float (*sdot32_fn)(int, const float *, int, const float *, int);
typedef double (*ddot32_fn)(int, const double *, int, const double *, int);
typedef void (*set_threads_fn)(int);
typedef int (*get_threads_fn)(void);
typedef char *(*get_config_fn)(void);

static struct {
    void *sgemm, *dgemm;              /* NULL: no library, portable kernel only */
    void *sgemv, *dgemv, *sdot, *ddot;  /* optional: GEMM with N or M of 1 is slow in OpenBLAS */
    int ilp64;
    set_threads_fn set_threads;       /* optional */
    get_threads_fn get_threads;       /* optional */
    int threads;                      /* last set_num_threads value (used without the calls) */
    char path[1024];
    char sgemm_name[64], dgemm_name[64];
    char core[32];                    /* OpenBLAS's kernel family ("Haswell", "SkylakeX"), or "" */
    int own_sgemm;                    /* cddp_sgemm_avx512 may run: see own_sgemm_wanted */
    int own_bgemm;                    /* cddp_bgemm_avx512 may run: an AVX512-BF16 CPU and
                                         CDDP_GEMM not "blas" */
} g_blas = {.threads = 1};

int64_t cddp_blas_operand_copies;
int64_t cddp_sgemm_avx512_calls;
static int64_t g_bgemm_calls, g_bgemm_threads;

/* ---- portable kernel ------------------------------------------------------------------ */

#define REF_KB 128   /* panel of B: REF_KB x REF_NB elements, 256 KiB for 8-byte types */
#define REF_NB 256

/* C = beta*C + alpha*A@B for one element type T computed in U (unsigned for integers, so
 * overflow wraps as torch's does instead of being undefined behaviour). */
#define DEFINE_REF_GEMM(NAME, T, U)                                                            \
    static void NAME(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars,        \
                     int64_t acs, const T *B, int64_t brs, int64_t bcs, T beta, T *C,          \
                     int64_t ldc)                                                              \
    {                                                                                          \
        T *pack = NULL;                                                                        \
        for (int64_t i = 0; i < M; i++) {                                                      \
            T *c = C + i * ldc;                                                                \
            if (beta == 0)                                                                     \
                for (int64_t j = 0; j < N; j++) c[j] = 0;                                      \
            else if (beta != 1)                                                                \
                for (int64_t j = 0; j < N; j++) c[j] = (T)((U)beta * (U)c[j]);                 \
        }                                                                                      \
        if (K == 0 || alpha == 0)                                                              \
            return;                                                                            \
        if (bcs != 1 && N > 1)                                                                 \
            pack = malloc(sizeof(T) * REF_KB * REF_NB);   /* NULL: strided loop below */       \
        for (int64_t k0 = 0; k0 < K; k0 += REF_KB) {                                           \
            int64_t kb = K - k0 < REF_KB ? K - k0 : REF_KB;                                    \
            for (int64_t j0 = 0; j0 < N; j0 += REF_NB) {                                       \
                int64_t nb = N - j0 < REF_NB ? N - j0 : REF_NB;                                \
                const T *bp = NULL;                 /* unit-stride panel rows, bld apart */    \
                int64_t bld = 0;                                                               \
                if (bcs == 1 || N == 1) {                                                      \
                    bp = B + k0 * brs + j0 * bcs;                                              \
                    bld = brs;                                                                 \
                } else if (pack) {                                                             \
                    for (int64_t kk = 0; kk < kb; kk++)                                        \
                        for (int64_t jj = 0; jj < nb; jj++)                                    \
                            pack[kk * nb + jj] = B[(k0 + kk) * brs + (j0 + jj) * bcs];         \
                    bp = pack;                                                                 \
                    bld = nb;                                                                  \
                }                                                                              \
                for (int64_t i = 0; i < M; i++) {                                              \
                    T *c = C + i * ldc + j0;                                                   \
                    const T *a = A + i * ars + k0 * acs;                                       \
                    for (int64_t kk = 0; kk < kb; kk++) {                                      \
                        U av = (U)alpha * (U)a[kk * acs];                                      \
                        if (bp) {                                                              \
                            const T *b = bp + kk * bld;                                        \
                            for (int64_t jj = 0; jj < nb; jj++)                                \
                                c[jj] = (T)((U)c[jj] + av * (U)b[jj]);                         \
                        } else {                                                               \
                            const T *b = B + (k0 + kk) * brs + j0 * bcs;                       \
                            for (int64_t jj = 0; jj < nb; jj++)                                \
                                c[jj] = (T)((U)c[jj] + av * (U)b[jj * bcs]);                   \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        free(pack);                                                                            \
    }

DEFINE_REF_GEMM(ref_gemm_f32, float, float)
DEFINE_REF_GEMM(ref_gemm_f64, double, double)
DEFINE_REF_GEMM(ref_gemm_i64, int64_t, uint64_t)
DEFINE_REF_GEMM(ref_gemm_i32, int32_t, uint32_t)

/* ---- BLAS dispatch -------------------------------------------------------------------- */

int cddp_blas_available(void)
{
    return g_blas.sgemm != NULL;
}

/* How BLAS reads a (rows, cols) matrix with strides (rs, cs): row-major -> NoTrans with
 * ld = rs; column-major (a transposed view) -> Trans with ld = cs. Size-1 dims have arbitrary
 * strides, so they never disqualify a layout. 0 when neither applies. */
static int blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int *trans,
                       int64_t *ld)
{
    int64_t need;
    if (cs == 1 || cols == 1) {
        need = cols > 1 ? cols : 1;
        *ld = rows == 1 ? need : rs;
        if (*ld >= need) {
            *trans = NO_TRANS;
            return 1;
        }
    }
    if (rs == 1 || rows == 1) {
        need = rows > 1 ? rows : 1;
        *ld = cols == 1 ? need : cs;
        if (*ld >= need) {
            *trans = TRANS;
            return 1;
        }
    }
    return 0;
}

static int fits_blas_int(int64_t v)
{
    return g_blas.ilp64 || v <= INT_MAX;
}

int cddp_blas_addressable(cddp_dtype dt, int64_t rows, int64_t cols, int64_t rs, int64_t cs)
{
    int trans;
    int64_t ld;
    if (!g_blas.sgemm || (dt != CDDP_FLOAT32 && dt != CDDP_FLOAT64))
        return 0;
    return blas_layout(rows, cols, rs, cs, &trans, &ld) && fits_blas_int(ld) &&
           fits_blas_int(rows) && fits_blas_int(cols);
}

/* Vector strides for BLAS: positive and within the integer width (a size-1 vector's stride
 * never matters). 0 when BLAS cannot take it. */
static int64_t vec_inc(int64_t len, int64_t inc)
{
    if (len <= 1)
        return 1;
    return inc >= 1 && fits_blas_int(inc) ? inc : 0;
}

/* y(len_y, stride incy) = alpha * op(A) @ x + beta * y through gemv, where op(A) is the
 * (len_y, len_x) matrix with strides (rs, cs). 1 when BLAS took it. */
static int try_gemv(cddp_dtype dt, int64_t len_y, int64_t len_x, double alpha, const void *A,
                    int64_t rs, int64_t cs, const void *x, int64_t incx, double beta, void *y,
                    int64_t incy)
{
    int trans;
    int64_t ld, rows, cols;
    void *fn = dt == CDDP_FLOAT32 ? g_blas.sgemv : g_blas.dgemv;
    incx = vec_inc(len_x, incx);
    incy = vec_inc(len_y, incy);
    if (!fn || !incx || !incy || !blas_layout(len_y, len_x, rs, cs, &trans, &ld) ||
        !fits_blas_int(ld) || !fits_blas_int(len_x) || !fits_blas_int(len_y))
        return 0;
    /* gemv reads a row-major (rows, cols) matrix: op(A) itself, or its transpose stored
     * row-major when op(A) is column-major */
    rows = trans == NO_TRANS ? len_y : len_x;
    cols = trans == NO_TRANS ? len_x : len_y;
    if (beta == 0) {
        /* y may be uninitialized: some OpenBLAS versions scale it by 0 (NaN stays NaN) */
        for (int64_t i = 0; i < len_y; i++) {
            if (dt == CDDP_FLOAT32)
                ((float *)y)[i * incy] = 0;
            else
                ((double *)y)[i * incy] = 0;
        }
    }
    if (dt == CDDP_FLOAT32 && g_blas.ilp64)
        ((sgemv64_fn)fn)(ROW_MAJOR, trans, rows, cols, (float)alpha, A, ld, x, incx,
                         (float)beta, y, incy);
    else if (dt == CDDP_FLOAT32)
        ((sgemv32_fn)fn)(ROW_MAJOR, trans, (int)rows, (int)cols, (float)alpha, A, (int)ld, x,
                         (int)incx, (float)beta, y, (int)incy);
    else if (g_blas.ilp64)
        ((dgemv64_fn)fn)(ROW_MAJOR, trans, rows, cols, alpha, A, ld, x, incx, beta, y, incy);
    else
        ((dgemv32_fn)fn)(ROW_MAJOR, trans, (int)rows, (int)cols, alpha, A, (int)ld, x,
                         (int)incx, beta, y, (int)incy);
    return 1;
}

/* c = alpha * dot(x, y) + beta * c. 1 when BLAS took it. */
static int try_dot(cddp_dtype dt, int64_t K, double alpha, const void *x, int64_t incx,
                   const void *y, int64_t incy, double beta, void *c)
{
    void *fn = dt == CDDP_FLOAT32 ? g_blas.sdot : g_blas.ddot;
    incx = vec_inc(K, incx);
    incy = vec_inc(K, incy);
    if (!fn || !incx || !incy || !fits_blas_int(K))
        return 0;
    if (dt == CDDP_FLOAT32) {
        float d = g_blas.ilp64 ? ((sdot64_fn)fn)(K, x, incx, y, incy)
                               : ((sdot32_fn)fn)((int)K, x, (int)incx, y, (int)incy);
        float *cp = c;
        *cp = (float)alpha * d + (beta == 0 ? 0.0f : (float)beta * *cp);
    } else {
        double d = g_blas.ilp64 ? ((ddot64_fn)fn)(K, x, incx, y, incy)
                                : ((ddot32_fn)fn)((int)K, x, (int)incx, y, (int)incy);
        double *cp = c;
        *cp = alpha * d + (beta == 0 ? 0.0 : beta * *cp);
    }
    return 1;
}

/* float32/float64 through the library: dot for 1x1 results, gemv for a single row or column
 * (OpenBLAS's GEMM is several times slower there), GEMM otherwise. 1 when BLAS took it. */
static int try_blas(cddp_dtype dt, int64_t M, int64_t N, int64_t K, double alpha,
                    const void *A, int64_t ars, int64_t acs, const void *B, int64_t brs,
                    int64_t bcs, double beta, void *C, int64_t ldc)
{
    int ta, tb;
    int64_t lda, ldb;
    if (!g_blas.sgemm || (dt != CDDP_FLOAT32 && dt != CDDP_FLOAT64) || K == 0)
        return 0;
    if (M == 1 && N == 1 && try_dot(dt, K, alpha, A, acs, B, brs, beta, C))
        return 1;
    if (N == 1 && try_gemv(dt, M, K, alpha, A, ars, acs, B, brs, beta, C, ldc))
        return 1;       /* C(M,1) = A @ b */
    if (M == 1 && try_gemv(dt, N, K, alpha, B, bcs, brs, A, acs, beta, C, 1))
        return 1;       /* C(1,N) = (B^T @ a)^T */
    if (!blas_layout(M, K, ars, acs, &ta, &lda) || !blas_layout(K, N, brs, bcs, &tb, &ldb) ||
        !fits_blas_int(M) || !fits_blas_int(N) || !fits_blas_int(K) || !fits_blas_int(lda) ||
        !fits_blas_int(ldb) || !fits_blas_int(ldc))
        return 0;
    if (dt == CDDP_FLOAT32 && g_blas.ilp64)
        ((sgemm64_fn)g_blas.sgemm)(ROW_MAJOR, ta, tb, M, N, K, (float)alpha, A, lda, B, ldb,
                                   (float)beta, C, ldc);
    else if (dt == CDDP_FLOAT32)
        ((sgemm32_fn)g_blas.sgemm)(ROW_MAJOR, ta, tb, (int)M, (int)N, (int)K, (float)alpha, A,
                                   (int)lda, B, (int)ldb, (float)beta, C, (int)ldc);
    else if (g_blas.ilp64)
        ((dgemm64_fn)g_blas.dgemm)(ROW_MAJOR, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                   ldc);
    else
        ((dgemm32_fn)g_blas.dgemm)(ROW_MAJOR, ta, tb, (int)M, (int)N, (int)K, alpha, A,
                                   (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return 1;
}

static int current_threads(void);

/* Whether cddp's own kernel may run at all: cddp_gemm's choice (own_sgemm) or, for products
 * with a prepacked operand (which the library cannot reuse), any AVX-512 CPU unless
 * CDDP_GEMM=blas asks for the library alone. */
static int own_sgemm_allowed(void)
{
    const char *gemm = getenv("CDDP_GEMM");
    return g_blas.sgemm && (g_blas.own_sgemm ||
                             (cddp_sgemm_avx512_supported() && !(gemm && !strcmp(gemm, "blas"))));
}

void cddp_gemm_fixed_init(cddp_gemm_fixed *f, cddp_dtype dt, int64_t K, int64_t N,
                          const void *B, int64_t brs, int64_t bcs)
{
    *f = (cddp_gemm_fixed){.B = B, .brs = brs, .bcs = bcs, .K = K, .N = N};
    if (dt == CDDP_FLOAT32 && K > 0 && N > 0 && own_sgemm_allowed())
        f->packed = cddp_sgemm_avx512_pack(K, N, B, brs, bcs);
}

void cddp_gemm_fixed_run(const cddp_gemm_fixed *f, cddp_dtype dt, int64_t M, double alpha,
                         const void *A, int64_t ars, int64_t acs, double beta, void *C,
                         int64_t ldc)
{
    if (f->packed && M > 0 && alpha != 0.0 &&
        cddp_sgemm_avx512_packed(M, f->N, f->K, (float)alpha, A, ars, acs, f->packed,
                                 (float)beta, C, ldc) == 0) {
        cddp_sgemm_avx512_calls++;
        return;
    }
    cddp_gemm(dt, M, f->N, f->K, alpha, A, ars, acs, f->B, f->brs, f->bcs, beta, C, ldc);
}

void cddp_gemm_fixed_free(cddp_gemm_fixed *f)
{
    free(f->packed);
    f->packed = NULL;
}

/* float32 products with a BLAS loaded (CDDP_BLAS=none keeps the portable kernel under test),
 * one GEMM thread (the kernel is single-threaded; OpenBLAS keeps multithreaded products), and
 * every side long enough to fill micro-tiles and pay for the packing: below these the BLAS
 * call is as fast (N < 48 wastes over a third of the 32-wide tiles). */
static int use_own_sgemm(cddp_dtype dt, int64_t M, int64_t N, int64_t K, double alpha)
{
    return dt == CDDP_FLOAT32 && g_blas.own_sgemm && g_blas.sgemm && alpha != 0.0 &&
           M >= 16 && N >= 48 && K >= 32 && current_threads() == 1;
}

int cddp_gemm_bf16_wanted(void)
{
    return g_blas.own_bgemm;
}

int cddp_gemm_bf16(cddp_dtype st, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                   int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs, double beta,
                   float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0 || alpha == 0.0) {           /* C = beta C (beta == 0: zeros, C not read) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0 ? 0.0f : (float)beta * C[i * ldc + j];
        return 0;
    }
    int jobs = cddp_bgemm_avx512(st, M, N, K, (float)alpha, A, ars, acs, B, brs, bcs,
                                 (float)beta, C, ldc, current_threads());
    if (jobs < 0)
        return -1;
    g_bgemm_calls++;
    g_bgemm_threads += jobs;
    return 0;
}

int cddp_gemm_either(int bf16, cddp_dtype dt, int64_t M, int64_t N, int64_t K, double alpha,
                     const void *A, int64_t ars, int64_t acs, const void *B, int64_t brs,
                     int64_t bcs, double beta, void *C, int64_t ldc)
{
    if (bf16)
        return cddp_gemm_bf16(dt, M, N, K, alpha, A, ars, acs, B, brs, bcs, beta, C, ldc);
    cddp_gemm(dt, M, N, K, alpha, A, ars, acs, B, brs, bcs, beta, C, ldc);
    return 0;
}

void cddp_gemm(cddp_dtype dt, int64_t M, int64_t N, int64_t K, double alpha,
               const void *A, int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs,
               double beta, void *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (use_own_sgemm(dt, M, N, K, alpha) &&
        cddp_sgemm_avx512(M, N, K, (float)alpha, A, ars, acs, B, brs, bcs, (float)beta, C,
                          ldc) == 0) {
        cddp_sgemm_avx512_calls++;
        return;
    }
    if (try_blas(dt, M, N, K, alpha, A, ars, acs, B, brs, bcs, beta, C, ldc))
        return;
    switch (dt) {
    case CDDP_FLOAT32:
        ref_gemm_f32(M, N, K, (float)alpha, A, ars, acs, B, brs, bcs, (float)beta, C, ldc);
        break;
    case CDDP_FLOAT64:
        ref_gemm_f64(M, N, K, alpha, A, ars, acs, B, brs, bcs, beta, C, ldc);
        break;
    case CDDP_INT64:
        ref_gemm_i64(M, N, K, (int64_t)alpha, A, ars, acs, B, brs, bcs, (int64_t)beta, C, ldc);
        break;
    case CDDP_INT32:
        ref_gemm_i32(M, N, K, (int32_t)alpha, A, ars, acs, B, brs, bcs, (int32_t)beta, C, ldc);
        break;
    default:
        break;      /* bool: callers refuse it before getting here */
    }
}

/* ---- finding the library -------------------------------------------------------------- */

/* Symbol naming schemes, most specific first; `ilp64` is what the suffix promises. */
static const struct { const char *prefix, *suffix; int ilp64; } schemes[] = {
    {"scipy_", "64_", 1},    /* NumPy >= 2 wheels: scipy-openblas64 */
    {"", "64_", 1},          /* NumPy 1.x wheels: openblas64_ */
    {"scipy_", "", 0},       /* scipy-openblas32 */
    {"", "", 0},             /* system / conda BLAS */
};

static void *sym(void *h, const char *prefix, const char *base, const char *suffix, char *name,
                 size_t cap)
{
    snprintf(name, cap, "%s%s%s", prefix, base, suffix);
    return dlsym(h, name);
}

/* Take GEMM (and the optional thread calls) from handle h; 1 when found. */
static int try_handle(void *h, const char *path)
{
    char name[64];
    for (size_t s = 0; s < sizeof schemes / sizeof schemes[0]; s++) {
        const char *pre = schemes[s].prefix, *suf = schemes[s].suffix;
        void *sg = sym(h, pre, "cblas_sgemm", suf, g_blas.sgemm_name, sizeof g_blas.sgemm_name);
        void *dg = sym(h, pre, "cblas_dgemm", suf, g_blas.dgemm_name, sizeof g_blas.dgemm_name);
        if (!sg || !dg)
            continue;
        get_config_fn cfg = (get_config_fn)sym(h, pre, "openblas_get_config", suf, name,
                                               sizeof name);
        get_config_fn core = (get_config_fn)sym(h, pre, "openblas_get_corename", suf, name,
                                                sizeof name);
        const char *conf = cfg ? cfg() : NULL;
        snprintf(g_blas.core, sizeof g_blas.core, "%s", core && core() ? core() : "");
        g_blas.ilp64 = schemes[s].ilp64 || (conf && strstr(conf, "USE64BITINT"));
        g_blas.set_threads = (set_threads_fn)sym(h, pre, "openblas_set_num_threads", suf, name,
                                                 sizeof name);
        g_blas.get_threads = (get_threads_fn)sym(h, pre, "openblas_get_num_threads", suf, name,
                                                 sizeof name);
        g_blas.sgemv = sym(h, pre, "cblas_sgemv", suf, name, sizeof name);
        g_blas.dgemv = sym(h, pre, "cblas_dgemv", suf, name, sizeof name);
        g_blas.sdot = sym(h, pre, "cblas_sdot", suf, name, sizeof name);
        g_blas.ddot = sym(h, pre, "cblas_ddot", suf, name, sizeof name);
        g_blas.sgemm = sg;
        g_blas.dgemm = dg;
        if (!realpath(path, g_blas.path))
            snprintf(g_blas.path, sizeof g_blas.path, "%s", path);
        return 1;
    }
    g_blas.sgemm_name[0] = g_blas.dgemm_name[0] = g_blas.core[0] = 0;
    return 0;
}

static int try_path(const char *path, int flags)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | flags);
    if (!h)
        return 0;
    if (try_handle(h, path))
        return 1;           /* never dlclose'd: the GEMM pointers live as long as the process */
    dlclose(h);
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

#ifdef __linux__
typedef struct { const char *needle; int found; } phdr_ctx;

static int phdr_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    phdr_ctx *c = arg;
    if (!info->dlpi_name || !info->dlpi_name[0] || !strstr(base_name(info->dlpi_name), c->needle))
        return 0;
    /* RTLD_NOLOAD: a handle on the copy NumPy already uses, never a second load */
    c->found = try_path(info->dlpi_name, RTLD_NOLOAD);
    return c->found;
}
#endif

/* Libraries in dir whose name contains needle. */
static int try_dir(const char *dir, const char *needle)
{
    char path[1024];
    struct dirent *e;
    DIR *d = opendir(dir);
    int found = 0;
    if (!d)
        return 0;
    while (!found && (e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, needle) || !strstr(e->d_name, ".so"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        found = try_path(path, 0);
    }
    closedir(d);
    return found;
}

/* numpy.libs (auditwheel) beside the numpy package, or numpy/.libs. Clears Python errors:
 * a missing directory is not an error, only a place not to look. */
static int try_numpy_dirs(void)
{
    char dir[1024];
    int found = 0;
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *file = np ? PyObject_GetAttrString(np, "__file__") : NULL;
    const char *f = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    if (f) {
        const char *slash = strrchr(f, '/');            /* .../site-packages/numpy/__init__.py */
        int pkg = slash ? (int)(slash - f) : 0;
        snprintf(dir, sizeof dir, "%.*s/.libs", pkg, f);
        found = try_dir(dir, "openblas");
        const char *up = pkg ? f + pkg : NULL;
        while (!found && up && up > f && *--up != '/')
            ;
        if (!found && up && up > f) {
            snprintf(dir, sizeof dir, "%.*s/numpy.libs", (int)(up - f), f);
            found = try_dir(dir, "openblas");
        }
    }
    Py_XDECREF(file);
    Py_XDECREF(np);
    PyErr_Clear();
    return found;
}

static void blas_find(void)
{
    static const char *system_names[] = {
        "libopenblas64_.so.0", "libopenblas.so.0", "libopenblas.so", "libmkl_rt.so",
        "libflexiblas.so.3", "libcblas.so.3", "libblas.so.3",
    };
    const char *env = getenv("CDDP_BLAS");
    if (env && env[0]) {
        if (strcmp(env, "none") && strcmp(env, "0"))
            try_path(env, 0);
        return;
    }
#ifdef __linux__
    phdr_ctx c = {"openblas", 0};
    dl_iterate_phdr(phdr_visit, &c);
    if (!c.found) {
        c.needle = "blas";
        dl_iterate_phdr(phdr_visit, &c);
    }
    if (c.found)
        return;
#endif
    if (try_numpy_dirs())
        return;
    for (size_t i = 0; i < sizeof system_names / sizeof system_names[0]; i++)
        if (try_path(system_names[i], 0))
            return;
}

/* ---- module functions ----------------------------------------------------------------- */

static int current_threads(void)
{
    return g_blas.get_threads ? g_blas.get_threads() : g_blas.threads;
}

/* set_num_threads(n): BLAS threads for GEMM (process-wide: NumPy shares the library). */
static PyObject *py_set_num_threads(PyObject *m, PyObject *arg)
{
    long long n;
    int overflow;
    if (!PyLong_Check(arg) || PyBool_Check(arg)) {
        PyErr_Format(PyExc_RuntimeError, "set_num_threads expects an int, but got %s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    n = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (overflow)
        n = overflow > 0 ? INT_MAX : 0;
    if (n <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "set_num_threads expects a positive integer");
        return NULL;
    }
    g_blas.threads = n > INT_MAX ? INT_MAX : (int)n;
    if (g_blas.set_threads)
        g_blas.set_threads(g_blas.threads);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *m, PyObject *unused)
{
    return PyLong_FromLong(current_threads());
}

/* {"library", "sgemm", "dgemm", "ilp64", "threads", "backend", "operand_copies", "core",
 * "sgemm_kernel", "own_sgemm_calls", "fixed_operand_packed", "bgemm_kernel",
 * "own_bgemm_calls", "own_bgemm_threads"}: what blas_find settled on, how many operands matmul
 * had to copy so far, the library's kernel family (OpenBLAS only, else None), whether (and how
 * often) float32 products ran cddp's AVX-512 kernel, whether cddp_gemm_fixed packs its operand
 * for it, and whether (how often, on how many threads in all) bfloat16 products ran cddp's
 * AVX512-BF16 kernel. */
static PyObject *py_blas_info(PyObject *m, PyObject *unused)
{
    int have = g_blas.sgemm != NULL;
    return Py_BuildValue("{s:z,s:z,s:z,s:O,s:i,s:s,s:L,s:z,s:s,s:L,s:O,s:s,s:L,s:L}",
                         "library", have ? g_blas.path : NULL,
                         "sgemm", have ? g_blas.sgemm_name : NULL,
                         "dgemm", have ? g_blas.dgemm_name : NULL,
                         "ilp64", have && g_blas.ilp64 ? Py_True : Py_False,
                         "threads", current_threads(),
                         "backend", have ? "blas" : "fallback (portable blocked C GEMM)",
                         "operand_copies", (long long)cddp_blas_operand_copies,
                         "core", have && g_blas.core[0] ? g_blas.core : NULL,
                         "sgemm_kernel", have && g_blas.own_sgemm ?
                             "cddp avx512 (one GEMM thread, large products), else the library" :
                             have ? "the library" : "portable",
                         "own_sgemm_calls", (long long)cddp_sgemm_avx512_calls,
                         "fixed_operand_packed", own_sgemm_allowed() ? Py_True : Py_False,
                         "bgemm_kernel", g_blas.own_bgemm ?
                             "cddp avx512-bf16 on the GEMM threads" :
                             "float32 copies",
                         "own_bgemm_calls", (long long)g_bgemm_calls,
                         "own_bgemm_threads", (long long)g_bgemm_threads);
}

static PyMethodDef blas_methods[] = {
    {"set_num_threads", py_set_num_threads, METH_O,
     "set_num_threads(int) -> None: threads used by matrix products (the BLAS pool)"},
    {"get_num_threads", py_get_num_threads, METH_NOARGS,
     "get_num_threads() -> int: threads used by matrix products"},
    {"_blas_info", py_blas_info, METH_NOARGS,
     "_blas_info() -> dict: the BLAS library and GEMM symbols in use"},
    {NULL},
};

/* CDDP_GEMM=blas: the library only; =own: the own kernel on every AVX-512 CPU; unset (auto):
 * the own kernel unless the library runs AVX-512 kernels itself. OpenBLAS fixes its kernel
 * family when it loads (cpuid, or OPENBLAS_CORETYPE where set); its AVX-512 families are as
 * fast as the own kernel on these shapes (docs/benchmarks.md), its AVX2 ones half as fast. */
static int own_sgemm_wanted(void)
{
    static const char *avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    const char *gemm = getenv("CDDP_GEMM");
    if (!cddp_sgemm_avx512_supported() || (gemm && !strcmp(gemm, "blas")))
        return 0;
    if (gemm && !strcmp(gemm, "own"))
        return 1;
    for (size_t i = 0; i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
        if (!strcasecmp(g_blas.core, avx512_cores[i]))
            return 0;
    return 1;
}

int cddp_blas_init(PyObject *m, cddp_state_t *st)
{
    blas_find();
    g_blas.own_sgemm = own_sgemm_wanted();
    {
        const char *gemm = getenv("CDDP_GEMM");
        g_blas.own_bgemm = cddp_bgemm_avx512_supported() && !(gemm && !strcmp(gemm, "blas"));
    }
    return PyModule_AddFunctions(m, blas_methods);
}
