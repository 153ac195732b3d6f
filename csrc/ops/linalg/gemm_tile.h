/* ops/linalg/gemm_tile.h — the accumulator tile that cddp's own GEMM micro-kernels share
 * (sgemm_avx512.c, bgemm_avx512.c): 12 x 32 float32 accumulators, zeroed before the
 * kernel's k loop and written to C after it:
 *
 *   C (mr x nr, row stride ldc) = alpha * acc + beta * C   (beta == 0: C is not read)
 *
 * mr <= 12 rows and nr <= 32 columns are stored, through masks where nr < 32, so edge tiles
 * never touch C outside (mr, nr). Include only from files whose kernels are compiled for
 * AVX-512 (the target attribute below); call only on AVX-512 CPUs.
 */
#ifndef CDDP_GEMM_TILE_H
#define CDDP_GEMM_TILE_H

#include <immintrin.h>
#include <stdint.h>

#define CDDP_TILE_MR 12
#define CDDP_TILE_NV 2            /* zmm vectors across a tile: 32 columns */

/* The accumulators of a tile, zeroed before its k loop. */
__attribute__((target("avx512f"), always_inline))
static inline void cddp_tile_zero(__m512 acc[CDDP_TILE_MR][CDDP_TILE_NV])
{
    for (int i = 0; i < CDDP_TILE_MR; i++)
        for (int v = 0; v < CDDP_TILE_NV; v++)
            acc[i][v] = _mm512_setzero_ps();
}

__attribute__((target("avx512f"), always_inline))
static inline void cddp_tile_store(__m512 acc[CDDP_TILE_MR][CDDP_TILE_NV], float *c, int64_t ldc,
                                   float alpha, float beta, int mr, int nr)
{
    __mmask16 mask[CDDP_TILE_NV];
    for (int v = 0; v < CDDP_TILE_NV; v++) {
        int left = nr - 16 * v;
        mask[v] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < mr; i++) {
        float *row = c + i * ldc;
        for (int v = 0; v < CDDP_TILE_NV; v++) {
            __m512 y = _mm512_mul_ps(acc[i][v], va);
            if (beta != 0.0f)
                y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], row + 16 * v), y);
            _mm512_mask_storeu_ps(row + 16 * v, mask[v], y);
        }
    }
}

#endif
