/* ops/linalg/bgemm_avx512.c — cddp's bfloat16 GEMM for CPUs with AVX512-BF16 (contract in
 * blas.h).
 *
 * Why: bfloat16 products (autocast on the CPU, bf16 models) used to run as float32 GEMMs on
 * float32 copies of their operands: two casts, then the float32 rate. AVX512-BF16's
 * vdpbf16ps multiplies 32 bf16 pairs and adds them into 16 float32 lanes per instruction —
 * twice the multiply-adds of a float32 FMA — which is where torch's oneDNN gets its 2.1-2.3x
 * for bf16 matmuls and convolutions on these machines (docs/benchmarks.md).
 *
 * Mirrors: sgemm_avx512.c's BLIS/GotoBLAS loops, with k taken two at a time:
 *   for each NC-wide column block jc, each KC-deep slice pc:
 *     pack B (kc, nc) into NR-wide micro-panels of k-pairs: word [kp][j] holds B(2kp, j) in its
 *     low half and B(2kp+1, j) in its high half — one zmm is 16 columns x 2 k's
 *     for each MC-tall row block ic: pack A (mc, kc) the same way, MR rows per k-pair
 *       micro-kernel: per k-pair, 2 B vectors, MR broadcast A pairs, MR x 2 vdpbf16ps into 24
 *       float32 accumulators; then C tile = alpha acc + beta' C (beta' = beta on the first
 *       slice, 1 after; beta == 0 never reads C)
 * An odd kc gets a zero partner, ragged rows and columns are zero-filled, edge tiles store
 * through masks — as in the float32 kernel. With `threads` > 1 a product of enough work is cut
 * into that many jobs along C's longer side, in whole micro-tiles; each job packs for itself
 * and runs these loops on a thread started for it (joined before return). No job shares a
 * C element with another and each element sees the same operations, so the bits do not
 * depend on the thread count.
 *
 * Numerics: a product of two bf16 values is exact in float32, so the result is the float32
 * GEMM of the same values up to summation order (pairs, then k order), with float32
 * accumulation like torch's. vdpbf16ps and vcvtneps2bf16 treat subnormal inputs as zero and
 * flush subnormal results: magnitudes below 2^-126 (1.2e-38) count as zero, as in oneDNN.
 *
 * Operands are bf16 (st == CDDP_BFLOAT16: the bits are copied) or float32 holding bf16 values
 * (st == CDDP_FLOAT32: the convolution engine's float32 copies of bf16 tensors; rounded to
 * nearest even when packed, which leaves such values unchanged). Only the kernels that need
 * AVX512-BF16 / AVX512-BW carry the target attribute; cddp_bgemm_avx512_supported asks cpuid.
 */
#include "ops/linalg/blas.h"
#include "ops/linalg/gemm_tile.h"
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MR CDDP_TILE_MR  /* rows of a micro-tile: 12 x 2 accumulators + 2 B vectors + 1 A pair */
#define NV CDDP_TILE_NV  /* zmm vectors across a micro-tile */
#define NR (16 * NV)    /* columns of a micro-tile */
#define KPC 256         /* k-pairs of a slice: a B micro-panel is KPC * NR * 4 = 32 KiB (L1) */
#define MC 192          /* rows of an A block: MC * KPC * 4 = 192 KiB (L2) */
#define NC 4096         /* columns of a B block */

#define ROUND_UP(n, m) (((n) + (m) - 1) / (m) * (m))

int cddp_bgemm_avx512_supported(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

/* Element `off` of an operand stored as st, as bf16 bits. */
static inline uint32_t ld(cddp_dtype st, const void *p, int64_t off)
{
    return st == CDDP_BFLOAT16 ? ((const uint16_t *)p)[off]
                               : cddp_f32_to_bf16(((const float *)p)[off]);
}

/* c (mr x nr, row stride ldc) = alpha * a_panel @ b_panel + beta * c over kp k-pairs;
 * a: (kp, MR) pairs, b: (kp, NR) pairs, 64-byte aligned. */
__attribute__((target("avx512f,avx512bf16")))
static void micro_kernel(int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b,
                         float *restrict c, int64_t ldc, float alpha, float beta, int mr, int nr)
{
    __m512 acc[MR][NV];
    cddp_tile_zero(acc);
    for (int64_t k = 0; k < kp; k++, a += MR, b += NR) {
        __m512bh bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = (__m512bh)_mm512_load_si512(b + 16 * v);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
        }
    }
    cddp_tile_store(acc, c, ldc, alpha, beta, mr, nr);
}

/* Up to 32 consecutive elements of an operand (bf16, or float32 rounded) as bf16 bits in one
 * zmm, in order: 16 pair words; zeros past n. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static inline __m512i load32(cddp_dtype st, const void *src, int64_t n)
{
    if (n <= 0)
        return _mm512_setzero_si512();
    if (st == CDDP_BFLOAT16)
        return _mm512_maskz_loadu_epi16(n >= 32 ? ~0u : (__mmask32)((1u << n) - 1), src);
    const float *f = src;
    __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    __mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
    __m512 a = _mm512_maskz_loadu_ps(m0, f), b = _mm512_maskz_loadu_ps(m1, f + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(b, a);    /* a's 16 in the low half, b's in the high */
}

/* Two lines of n <= 32 elements (k and k+1 of a panel whose other index runs along memory)
 * -> n pair words at p: word j = (r0[j], r1[j]). */
__attribute__((target("avx512f,avx512bw")))
static inline void interleave(__m512i r0, __m512i r1, uint32_t *p, int64_t n)
{
    /* word j of the low half takes 16-bit element j of r0 and element j of r1 (index 32 + j) */
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                        40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
                                        32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    _mm512_mask_storeu_epi32(p, m0, _mm512_permutex2var_epi16(r0, lo, r1));
    if (n > 16)
        _mm512_mask_storeu_epi32(p + 16, n >= 32 ? 0xffff : (__mmask16)((1u << (n - 16)) - 1),
                                 _mm512_permutex2var_epi16(r0, hi, r1));
}

/* r[l] = word l of every input vector: the 16 x 16 transpose of 32-bit words (interleave
 * words, then 64-bit pairs, then 128-bit lanes twice). */
__attribute__((target("avx512f")))
static inline void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {     /* u[i + c]: lines i..i+3, words c, c+4, c+8, c+12 */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
        __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
        __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
        __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[c + 8] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[c + 4] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[c + 12] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* nl <= 16 lines whose k runs along memory (line l at src + l * ls bytes), each n <= 32
 * elements from the slice's k-pair kp0 on: pair q of every line -> out + q * ostride (lanes
 * of `keep` only; lanes of lines past nl are zeros), for q < (n + 1) / 2. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void pack_lines(cddp_dtype st, const char *src, int64_t ls, int nl, int64_t n,
                       uint32_t *out, int64_t ostride, __mmask16 keep)
{
    __m512i r[16];
    int np = (int)((n + 1) / 2);
    for (int l = 0; l < 16; l++)
        r[l] = l < nl ? load32(st, src + l * ls, n) : _mm512_setzero_si512();
    transpose16(r);
    for (int q = 0; q < np; q++)
        _mm512_mask_storeu_epi32(out + q * ostride, keep, r[q]);
}

/* An operand panel of `lanes` (MR or NR) rows (A) or columns (B) by kc k's, from element
 * strides: along the panel (ls, between its rows or columns) and along k (ks). w valid lanes
 * (the rest zeros), kc k's -> p[kp][lane] pair words, an odd kc's partner zero. Unit-stride
 * cases use vector loads: k along memory (ks == 1) transposes 16 lines at a time; lanes along
 * memory (ls == 1) interleaves two k's; anything else goes word by word. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static void pack_panel(cddp_dtype st, const void *src, int64_t ls, int64_t ks, int64_t w,
                       int64_t kc, int lanes, uint32_t *p)
{
    int64_t isz = st == CDDP_BFLOAT16 ? 2 : 4, kp = (kc + 1) / 2;
    const char *s = src;
    if (ks == 1) {
        for (int g = 0; g < lanes; g += 16) {
            int nl = (int)(w - g < 0 ? 0 : w - g < 16 ? w - g : 16), left = lanes - g;
            __mmask16 keep = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            for (int64_t k0 = 0; k0 < kc; k0 += 32)
                pack_lines(st, s + (g * ls + k0) * isz, ls * isz, nl,
                           kc - k0 < 32 ? kc - k0 : 32, p + k0 / 2 * lanes + g, lanes, keep);
        }
    } else if (ls == 1) {
        for (int64_t k = 0; k < kp; k++) {
            __m512i r0 = load32(st, s + 2 * k * ks * isz, w);
            __m512i r1 = 2 * k + 1 < kc ? load32(st, s + (2 * k + 1) * ks * isz, w)
                                        : _mm512_setzero_si512();
            interleave(r0, r1, p + k * lanes, lanes);
        }
    } else {
        for (int64_t l = 0; l < lanes; l++)
            for (int64_t k = 0; k < kp; k++) {       /* lanes past w stay zeros */
                int64_t o = l * ls + 2 * k * ks;
                p[k * lanes + l] = l >= w ? 0
                                   : ld(st, src, o) |
                                         (2 * k + 1 < kc ? ld(st, src, o + ks) << 16 : 0);
            }
    }
}

/* A (mc, kc) at element strides (rs, cs) -> micro-panels p[t][kp][i] of MR rows. */
static void pack_a(cddp_dtype st, int64_t mc, int64_t kc, const void *A, int64_t rs, int64_t cs,
                   uint32_t *p)
{
    int64_t isz = st == CDDP_BFLOAT16 ? 2 : 4, kp = (kc + 1) / 2;
    for (int64_t i0 = 0; i0 < mc; i0 += MR, p += kp * MR)
        pack_panel(st, (const char *)A + i0 * rs * isz, rs, cs, mc - i0, kc, MR, p);
}

/* B (kc, nc) at element strides (rs, cs) -> micro-panels p[t][kp][j] of NR columns. */
static void pack_b(cddp_dtype st, int64_t kc, int64_t nc, const void *B, int64_t rs, int64_t cs,
                   uint32_t *p)
{
    int64_t isz = st == CDDP_BFLOAT16 ? 2 : 4, kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nc; j0 += NR, p += kp * NR)
        pack_panel(st, (const char *)B + j0 * cs * isz, cs, rs, nc - j0, kc, NR, p);
}

/* One thread's share of a product: C's rows [i0, i0 + m) or columns [j0, j0 + n), each with its
 * own packing buffers (allocated before any thread starts, so running out of memory leaves C
 * untouched). */
typedef struct {
    cddp_dtype st;
    int64_t M, N, K, ars, acs, brs, bcs, ldc;
    float alpha, beta;
    const char *a, *b;
    float *c;
    uint32_t *pa, *pb;
} bgemm_job;

/* The blocked loops of one job (see the file comment). */
static void *run_job(void *arg)
{
    const bgemm_job *j = arg;
    int64_t isz = j->st == CDDP_BFLOAT16 ? 2 : 4;
    for (int64_t jc = 0; jc < j->N; jc += NC) {
        int64_t nc = j->N - jc < NC ? j->N - jc : NC;
        for (int64_t pc = 0; pc < j->K; pc += 2 * KPC) {
            int64_t kc = j->K - pc < 2 * KPC ? j->K - pc : 2 * KPC, kp = (kc + 1) / 2;
            float bt = pc == 0 ? j->beta : 1.0f;
            pack_b(j->st, kc, nc, j->b + (pc * j->brs + jc * j->bcs) * isz, j->brs, j->bcs, j->pb);
            for (int64_t ic = 0; ic < j->M; ic += MC) {
                int64_t mc = j->M - ic < MC ? j->M - ic : MC;
                pack_a(j->st, mc, kc, j->a + (ic * j->ars + pc * j->acs) * isz, j->ars, j->acs,
                       j->pa);
                for (int64_t jr = 0; jr < nc; jr += NR)
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        micro_kernel(kp, j->pa + ir * kp, j->pb + jr * kp,
                                     j->c + (ic + ir) * j->ldc + jc + jr, j->ldc, j->alpha, bt,
                                     (int)(mc - ir < MR ? mc - ir : MR),
                                     (int)(nc - jr < NR ? nc - jr : NR));
            }
        }
    }
    return NULL;
}

/* Work (multiply-adds) per thread below which more threads do not pay for their start
 * (~20-50 us each against ~5 ms of products at this size). */
#define WORK_PER_THREAD (1 << 24)
#define MAX_JOBS 64

int cddp_bgemm_avx512(cddp_dtype st, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs,
                      float beta, float *C, int64_t ldc, int threads)
{
    bgemm_job job[MAX_JOBS];
    pthread_t tid[MAX_JOBS];
    int started[MAX_JOBS] = {0};
    int64_t isz = st == CDDP_BFLOAT16 ? 2 : 4, kpcap = (K + 1) / 2 < KPC ? (K + 1) / 2 : KPC;
    double work = (double)M * N * K;
    int rows = M >= N;                     /* split the longer side, in whole micro-tiles */
    int64_t tile = rows ? MR : NR, len = rows ? M : N, tiles = (len + tile - 1) / tile;
    int n = threads < 1 ? 1 : threads > MAX_JOBS ? MAX_JOBS : threads, rc = -1;
    if (n > work / WORK_PER_THREAD)
        n = work / WORK_PER_THREAD < 1 ? 1 : (int)(work / WORK_PER_THREAD);
    if (n > tiles)
        n = (int)tiles;
    for (int t = 0; t < n; t++) {
        int64_t lo = tiles * t / n * tile, hi = tiles * (t + 1) / n * tile;
        hi = hi < len ? hi : len;
        bgemm_job *j = &job[t];
        *j = (bgemm_job){.st = st, .M = rows ? hi - lo : M, .N = rows ? N : hi - lo, .K = K,
                         .ars = ars, .acs = acs, .brs = brs, .bcs = bcs, .ldc = ldc,
                         .alpha = alpha, .beta = beta,
                         .a = (const char *)A + (rows ? lo * ars * isz : 0),
                         .b = (const char *)B + (rows ? 0 : lo * bcs * isz),
                         .c = C + (rows ? lo * ldc : lo)};
        int64_t ncap = j->N < NC ? ROUND_UP(j->N, NR) : NC;
        int64_t mcap = ROUND_UP(j->M < MC ? j->M : MC, MR);
        j->pa = aligned_alloc(64, ROUND_UP((size_t)(mcap * kpcap) * 4, 64));
        j->pb = aligned_alloc(64, ROUND_UP((size_t)(ncap * kpcap) * 4, 64));
        if (!j->pa || !j->pb) {
            n = t + 1;                      /* free what was taken, C untouched */
            goto done;
        }
    }
    for (int t = 1; t < n; t++)             /* a thread that cannot start runs here below */
        started[t] = pthread_create(&tid[t], NULL, run_job, &job[t]) == 0;
    run_job(&job[0]);
    for (int t = 1; t < n; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            run_job(&job[t]);
    }
    rc = n;
done:
    for (int t = 0; t < n; t++) {
        free(job[t].pa);
        free(job[t].pb);
    }
    return rc;
}
