/* ops/linalg/blas.h — the linear-algebra layer's internal API: the one GEMM entry point of the C core
 * (ops/linalg/blas.c, over whatever BLAS it found at import) and the batched-product engine
 * (ops/linalg/linalg_engine.c) that ops/linalg/linalg.c calls.
 *
 * Mirrors: at::native::cpublas::gemm (row-major view of it). Dimension legend:
 * C(M,N) = alpha * A(M,K) @ B(K,N) + beta * C.
 *
 * Operands are addressed by ELEMENT strides, so any strided view can be passed:
 *   A(i,k) = A[i*ars + k*acs],  B(k,j) = B[k*brs + j*bcs],  C(i,j) = C[i*ldc + j].
 * float32/float64 go to the BLAS library when one was loaded and both operands are
 * BLAS-addressable (cddp_blas_addressable: one unit stride, the other a leading dimension —
 * transposed views become TransA/TransB instead of copies); every other case runs the portable
 * blocked kernel in ops/linalg/blas.c, which takes any strides and also serves int64/int32 (wrapping
 * arithmetic, as torch's integer matmul on CPU).
 */
#ifndef CDDP_BLAS_H
#define CDDP_BLAS_H

#include "core/cddp.h"

/* Whether a BLAS library with float32/float64 GEMM was loaded (else the portable kernel). */
int cddp_blas_available(void);

/* Whether BLAS reads a (rows, cols) dtype-dt matrix with element strides (rs, cs) in place:
 * true for float32/float64 with a loaded library when the matrix is row-major (unit column
 * stride) or column-major (unit row stride) with a leading dimension that fits the library's
 * integer width. False means: make it contiguous first (the copy is O(n^2), the GEMM O(n^3)). */
int cddp_blas_addressable(cddp_dtype dt, int64_t rows, int64_t cols, int64_t rs, int64_t cs);

/* Operands matmul made contiguous because BLAS could not read them in place (a diagnostic
 * reported by _blas_info(); tests use it to prove transposed views are not copied). */
extern int64_t cddp_blas_operand_copies;

/* C = alpha * A @ B + beta * C (beta == 0: C is overwritten, NaNs in it are not propagated).
 * dt is float32, float64, int64 or int32 (alpha/beta are truncated to integers for the latter;
 * callers validate integrality). C is row-major with unit column stride, ldc >= N, and must not
 * overlap A or B. M, N or K may be 0. Pure C: safe to call with the GIL released; cannot fail. */
void cddp_gemm(cddp_dtype dt, int64_t M, int64_t N, int64_t K, double alpha,
               const void *A, int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs,
               double beta, void *C, int64_t ldc);

/* ---- cddp's own float32 GEMM for AVX-512 CPUs (ops/linalg/sgemm_avx512.c) ------------------- */

/* Whether this CPU runs the kernel below (cpuid: AVX-512F). */
int cddp_sgemm_avx512_supported(void);

/* C = alpha * A @ B + beta * C in float32, with cddp_gemm's operand conventions (any element
 * strides for A and B; C row-major, ldc >= N, not overlapping A or B; beta == 0 does not read
 * C); M, N, K >= 1 and alpha != 0. Single-threaded; call only when
 * cddp_sgemm_avx512_supported(). 0 done; -1 when the packing buffers could not be allocated
 * (C untouched). cddp_gemm calls it for float32 products big enough to pay for the packing
 * (see blas.c) when the loaded library runs pre-AVX-512 kernels, or under CDDP_GEMM=own. */
int cddp_sgemm_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t ars,
                      int64_t acs, const float *B, int64_t brs, int64_t bcs, float beta,
                      float *C, int64_t ldc);

/* The same product with B packed once for many A's (a recurrence's W_hh^T, one product per
 * time step): _pack returns B (K, N)'s panels (aligned_alloc'd: free() them), NULL when out of
 * memory; _packed computes C = alpha A @ B + beta C with them (M, N, K as packed, M >= 1,
 * alpha != 0), 0 done or -1 (no scratch; C untouched). */
float *cddp_sgemm_avx512_pack(int64_t K, int64_t N, const float *B, int64_t brs, int64_t bcs);
int cddp_sgemm_avx512_packed(int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                             int64_t ars, int64_t acs, const float *pb, float beta, float *C,
                             int64_t ldc);

/* ---- bfloat16 products on AVX512-BF16 CPUs (ops/linalg/bgemm_avx512.c) ------------------- */

/* Whether this CPU runs the kernel below (cpuid: AVX512-BF16 and AVX512-BW). */
int cddp_bgemm_avx512_supported(void);

/* C (M, N) float32 = alpha * A @ B + beta * C where A and B hold bfloat16 values, stored as st:
 * CDDP_BFLOAT16, or CDDP_FLOAT32 holding bf16 values (rounded to nearest even when packed).
 * cddp_gemm's operand conventions otherwise (any element strides for A and B; C row-major,
 * ldc >= N, not overlapping A or B; beta == 0 does not read C); M, N, K >= 1. Float32
 * accumulation; subnormals count as zero. Up to `threads` threads (the caller's and started
 * ones, joined before return) share a large product by rows or columns of C. Call only when
 * cddp_bgemm_avx512_supported(). The number of threads that shared it (>= 1); -1 when the
 * packing buffers could not be allocated (C untouched). Callers go through cddp_gemm_bf16
 * (blas.c), which counts the calls and the threads. */
int cddp_bgemm_avx512(cddp_dtype st, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs,
                      float beta, float *C, int64_t ldc, int threads);

/* Whether bf16 products run the kernel above here: an AVX512-BF16 CPU and CDDP_GEMM not
 * "blas". When false, callers keep their float32 route (float32 copies, cddp_gemm). */
int cddp_gemm_bf16_wanted(void);

/* cddp_bgemm_avx512 on the GEMM threads (set_num_threads), its calls and threads counted
 * (_blas_info()["own_bgemm_calls"], ["own_bgemm_threads"]); M or N of 0 is a no-op and K of 0
 * scales C by beta. Call only when cddp_gemm_bf16_wanted(). 0, or -1 when out of memory (C
 * untouched, no Python error set). */
int cddp_gemm_bf16(cddp_dtype st, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                   int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs, double beta,
                   float *C, int64_t ldc);

/* The GEMM of a caller that multiplies bf16 operands in place when it can: cddp_gemm_bf16 with
 * operands stored as dt when bf16 != 0 (float32 C), else cddp_gemm in dt. 0, or -1 when the
 * bf16 kernel had no memory (C untouched, no Python error set). */
int cddp_gemm_either(int bf16, cddp_dtype dt, int64_t M, int64_t N, int64_t K, double alpha,
                     const void *A, int64_t ars, int64_t acs, const void *B, int64_t brs,
                     int64_t bcs, double beta, void *C, int64_t ldc);

/* A right operand used by many products (cddp_gemm_fixed_*): packed once where cddp's own
 * kernel may run (float32, an AVX-512 CPU, CDDP_GEMM not "blas"), else plain cddp_gemm. */
typedef struct {
    float *packed;            /* B's panels, or NULL: cddp_gemm with the operand below */
    const void *B;
    int64_t brs, bcs, K, N;
} cddp_gemm_fixed;

/* Prepare B (K, N) for repeated products; never fails (without memory it stays unpacked). */
void cddp_gemm_fixed_init(cddp_gemm_fixed *f, cddp_dtype dt, int64_t K, int64_t N,
                          const void *B, int64_t brs, int64_t bcs);
/* C (M, N) = alpha A (M, K) @ B + beta C, as cddp_gemm. */
void cddp_gemm_fixed_run(const cddp_gemm_fixed *f, cddp_dtype dt, int64_t M, double alpha,
                         const void *A, int64_t ars, int64_t acs, double beta, void *C,
                         int64_t ldc);
void cddp_gemm_fixed_free(cddp_gemm_fixed *f);

/* Products cddp_gemm handed to cddp_sgemm_avx512 so far (reported by _blas_info(); tests use
 * it to prove the kernel runs). */
extern int64_t cddp_sgemm_avx512_calls;

/* ---- the batched-product engine (ops/linalg/linalg_engine.c) -------------------------------- */

/* How two operands become matrices: as torch.matmul does (1-D a -> (1,K), 1-D b -> (K,1)),
 * or as outer (a column (N,1) times a row (1,M)). */
enum { CDDP_VIEW_MATMUL = 0, CDDP_VIEW_OUTER = 1 };

/* t with its last two dims swapped (same memory, no history). New reference. */
TensorObject *cddp_transposed(TensorObject *t);

/* out(bshape..., M, N) = alpha * a(..., M, K) @ b(..., K, N) [+ beta * out]; a, b >= 2-D, same
 * dtype (not bool), matching K, broadcastable batch dims. out: NULL to allocate (beta
 * ignored), else a contiguous tensor of the result shape (addmm). No autograd. New ref. */
TensorObject *cddp_bmm_raw(TensorObject *a, TensorObject *b, double alpha, TensorObject *out,
                           double beta);

/* a @ b viewed per `how` (shapes and dtypes validated by the caller), recorded as node `name`
 * with edges to ea, eb (the caller's tensors; a, b may be dtype-cast copies of them). */
PyObject *cddp_product_with_grad(int how, TensorObject *a, TensorObject *b, const char *name,
                                 TensorObject *ea, TensorObject *eb);

/* AddmmBackward0: saved (m1, m2), d[0] = alpha, d[1] = beta; edges (input, m1, m2). */
int cddp_addmm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin);

#endif
