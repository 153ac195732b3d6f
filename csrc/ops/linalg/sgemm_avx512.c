/* ops/linalg/sgemm_avx512.c — cddp's own float32 GEMM for AVX-512 CPUs (contract in blas.h).
 *
 * Why: cddp's GEMMs go to NumPy's OpenBLAS, whose kernels are chosen when it loads, from cpuid
 * or from OPENBLAS_CORETYPE. Where that pins the AVX2 (Haswell) kernels on an AVX-512 CPU,
 * as this project's machines do, single-threaded sgemm stays at ~115-120 GFLOP/s while this
 * kernel does ~165-230 on the shapes of ResNet-18's convolutions (im2col GEMMs: M = 64..512
 * output channels, K = 576..4608, N = a chunk of output pixels) and of Linear layers; torch's
 * oneDNN uses AVX-512 there. Single-threaded: blas.c calls it only when the GEMM pool has one
 * thread (a DDP rank, or set_num_threads(1)), so OpenBLAS keeps multithreaded products.
 *
 * Mirrors: the BLIS/GotoBLAS loop structure. C (M, N) = alpha A (M, K) @ B (K, N) + beta C:
 *   for each NC-wide column block jc, each KC-deep slice pc:
 *     pack B (kc, nc) into NR-wide micro-panels, each (kc, NR) contiguous (stays in L1)
 *     for each MC-tall row block ic: pack A (mc, kc) into MR-tall micro-panels (kc, MR) (L2)
 *       for each micro-panel pair: the MR x NR micro-kernel, kc rank-1 updates in 24 zmm
 *       accumulators, then C tile = alpha acc + beta' C (beta' = beta on the first slice, 1 on
 *       the others; beta == 0 never reads C)
 * Packing reads along whichever operand stride is 1 and zero-fills the ragged edges, so the
 * micro-kernel has one shape; edge tiles store through masks. Sums run in k order per slice,
 * so results match a float64 reference to float32 rounding, not OpenBLAS's bits.
 *
 * The packing buffers come from malloc per call (a few hundred KiB for conv shapes; the GEMM
 * is ~1000x the work); -1 when there is none, and blas.c falls back to BLAS. A right operand
 * used by many products (a recurrence's W_hh^T, one small product per time step, where
 * packing it cost as much as the product) is packed once by cddp_sgemm_avx512_pack and reused
 * by cddp_sgemm_avx512_packed: the same blocks in the same order, only A packed per call. Only the
 * micro-kernel is compiled for AVX-512 (target attribute); cddp_sgemm_avx512_supported asks
 * cpuid, so valgrind's virtual CPU (no AVX-512) and older CPUs never run it.
 */
#include "ops/linalg/blas.h"
#include "ops/linalg/gemm_tile.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define MR CDDP_TILE_MR  /* rows of a micro-tile: 12 x 2 accumulators + 2 B vectors + 1 A value */
#define NV CDDP_TILE_NV  /* zmm vectors across a micro-tile */
#define NR (16 * NV)    /* columns of a micro-tile */
#define KC 256          /* depth of a slice: a B micro-panel is KC * NR * 4 = 32 KiB (L1) */
#define MC 192          /* rows of an A block: MC * KC * 4 = 192 KiB (L2) */
#define NC 4096         /* columns of a B block */

#define ROUND_UP(n, m) (((n) + (m) - 1) / (m) * (m))

int cddp_sgemm_avx512_supported(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* c (mr x nr, row stride ldc) = alpha * a_panel @ b_panel + beta * c over kc steps;
 * a: (kc, MR) packed, b: (kc, NR) packed, 64-byte aligned. */
__attribute__((target("avx512f")))
static void micro_kernel(int64_t kc, const float *restrict a, const float *restrict b,
                         float *restrict c, int64_t ldc, float alpha, float beta, int mr, int nr)
{
    __m512 acc[MR][NV];
    cddp_tile_zero(acc);
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
        __m512 bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
        }
    }
    cddp_tile_store(acc, c, ldc, alpha, beta, mr, nr);
}

/* A (mc, kc) at element strides (rs, cs) -> micro-panels p[t][k][i] of MR rows, zero-padded. */
static void pack_a(int64_t mc, int64_t kc, const float *A, int64_t rs, int64_t cs, float *p)
{
    for (int64_t i0 = 0; i0 < mc; i0 += MR, p += kc * MR) {
        int64_t mr = mc - i0 < MR ? mc - i0 : MR;
        for (int64_t i = 0; i < MR; i++) {
            const float *s = A + (i0 + i) * rs;
            if (i >= mr)
                for (int64_t k = 0; k < kc; k++)
                    p[k * MR + i] = 0.0f;
            else if (cs == 1)               /* a row is contiguous: read along it */
                for (int64_t k = 0; k < kc; k++)
                    p[k * MR + i] = s[k];
            else
                for (int64_t k = 0; k < kc; k++)
                    p[k * MR + i] = s[k * cs];
        }
    }
}

/* B (kc, nc) at element strides (rs, cs) -> micro-panels p[t][k][j] of NR columns, zero-padded. */
static void pack_b(int64_t kc, int64_t nc, const float *B, int64_t rs, int64_t cs, float *p)
{
    for (int64_t j0 = 0; j0 < nc; j0 += NR, p += kc * NR) {
        int64_t nr = nc - j0 < NR ? nc - j0 : NR;
        if (cs == 1) {                      /* rows contiguous: NR-wide row pieces */
            for (int64_t k = 0; k < kc; k++) {
                memcpy(p + k * NR, B + k * rs + j0, (size_t)nr * sizeof(float));
                memset(p + k * NR + nr, 0, (size_t)(NR - nr) * sizeof(float));
            }
            continue;
        }
        for (int64_t j = 0; j < NR; j++) {  /* columns (contiguous when rs == 1) */
            const float *s = B + (j0 + j) * cs;
            for (int64_t k = 0; k < kc; k++)
                p[k * NR + j] = j < nr ? s[k * rs] : 0.0f;
        }
    }
}

/* Floats the packed panels of a (K, N) right operand take: each (NC, KC) block rounded up to
 * whole NR-wide micro-panels, in the order cddp_sgemm_avx512 visits them. */
static size_t packed_floats(int64_t K, int64_t N)
{
    size_t total = 0;
    for (int64_t jc = 0; jc < N; jc += NC)
        total += (size_t)ROUND_UP(N - jc < NC ? N - jc : NC, NR) * (size_t)K;
    return total;
}

float *cddp_sgemm_avx512_pack(int64_t K, int64_t N, const float *B, int64_t brs, int64_t bcs)
{
    float *pb = aligned_alloc(64, ROUND_UP(packed_floats(K, N) * sizeof(float), 64));
    float *p = pb;
    if (!pb)
        return NULL;
    for (int64_t jc = 0; jc < N; jc += NC) {
        int64_t nc = N - jc < NC ? N - jc : NC;
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = K - pc < KC ? K - pc : KC;
            pack_b(kc, nc, B + pc * brs + jc * bcs, brs, bcs, p);
            p += ROUND_UP(nc, NR) * kc;
        }
    }
    return pb;
}

/* The loops of cddp_sgemm_avx512 over B's panels: packed once (pb, from _pack) or per slice
 * from B into the scratch pb. pa: scratch for A's block. */
static void sgemm_blocks(int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t ars, int64_t acs, const float *B, int64_t brs, int64_t bcs,
                         float *pb, int prepacked, float beta, float *C, int64_t ldc, float *pa)
{
    for (int64_t jc = 0; jc < N; jc += NC) {
        int64_t nc = N - jc < NC ? N - jc : NC;
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = K - pc < KC ? K - pc : KC;
            float bt = pc == 0 ? beta : 1.0f;
            if (!prepacked)
                pack_b(kc, nc, B + pc * brs + jc * bcs, brs, bcs, pb);
            for (int64_t ic = 0; ic < M; ic += MC) {
                int64_t mc = M - ic < MC ? M - ic : MC;
                pack_a(mc, kc, A + ic * ars + pc * acs, ars, acs, pa);
                for (int64_t jr = 0; jr < nc; jr += NR)
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        micro_kernel(kc, pa + ir * kc, pb + jr * kc,
                                     C + (ic + ir) * ldc + jc + jr, ldc, alpha, bt,
                                     (int)(mc - ir < MR ? mc - ir : MR),
                                     (int)(nc - jr < NR ? nc - jr : NR));
            }
            if (prepacked)
                pb += ROUND_UP(nc, NR) * kc;
        }
    }
}

int cddp_sgemm_avx512_packed(int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                             int64_t ars, int64_t acs, const float *pb, float beta, float *C,
                             int64_t ldc)
{
    int64_t mcap = ROUND_UP(M < MC ? M : MC, MR), kcap = K < KC ? K : KC;
    float *pa = aligned_alloc(64, ROUND_UP((size_t)(mcap * kcap) * sizeof(float), 64));
    if (!pa)
        return -1;
    sgemm_blocks(M, N, K, alpha, A, ars, acs, NULL, 0, 0, (float *)pb, 1, beta, C, ldc, pa);
    free(pa);
    return 0;
}

int cddp_sgemm_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t ars,
                      int64_t acs, const float *B, int64_t brs, int64_t bcs, float beta,
                      float *C, int64_t ldc)
{
    int64_t ncap = N < NC ? ROUND_UP(N, NR) : NC, mcap = ROUND_UP(M < MC ? M : MC, MR);
    int64_t kcap = K < KC ? K : KC;
    float *pa = aligned_alloc(64, ROUND_UP((size_t)(mcap * kcap) * sizeof(float), 64));
    float *pb = aligned_alloc(64, ROUND_UP((size_t)(ncap * kcap) * sizeof(float), 64));
    int rc = -1;
    if (!pa || !pb)
        goto done;
    sgemm_blocks(M, N, K, alpha, A, ars, acs, B, brs, bcs, pb, 0, beta, C, ldc, pa);
    rc = 0;
done:
    free(pa);
    free(pb);
    return rc;
}
