/* common/clones.h — which instruction sets the hot loops are compiled for, in one place.
 *
 *   CDDP_CLONES          x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA), AVX2, baseline (SSE2)
 *   CDDP_CLONES_AVX512   AVX-512F, AVX2, baseline (amp/grad_scaler.c's scans: no FMA to gain)
 *   CDDP_MATH_INLINE     for the math helpers called inside cloned loops (exp, tanh, erf)
 *
 *   #pragma GCC optimize("no-trapping-math", "fp-contract=fast")   (a kernel file's first line)
 *
 * A function marked CDDP_CLONES is compiled once per set and the loader picks the best one the
 * CPU has (GCC's target_clones: an ifunc), so loops vectorize 8 or 16 floats wide without a
 * -march flag in the build. Off under sanitizers (the resolvers run before their runtime is up), with
 * clang, and when CDDP_NO_TARGET_CLONES is defined.
 *
 * Rounding. The build is ISO C (-std=c11), which turns floating-point contraction off: the v4
 * and v3 clones compute exactly what the AVX2 clone does, bit for bit (explicit lane counts,
 * no reassociation), unless their file opts in with fp-contract=fast. The files whose loops
 * are polynomial chains (exp, sigmoid, tanh, GELU, softmax, cross entropy, the RNN gates) do,
 * so there a*b+c rounds once instead of twice — with the wider vectors 1.4-1.8x faster on
 * AVX-512 and FMA machines (bench/norm.py) — and their last bits differ between CPUs with and
 * without FMA, as torch's Sleef kernels' do. Reductions and the optimizers do not opt in.
 * The pragma goes before every #include: GCC does not inline a function compiled under other
 * optimization options (cddp_exp_f32 would become a call per element), and
 * no-trapping-math keeps the clamps' float selects as selects, so the loops vectorize.
 *
 * Why "arch=x86-64-v3" and not "arch=haswell" or "fma": GCC dispatches "arch=<cpu>" by CPU
 * model (an AMD EPYC is no Haswell: it got the baseline clone) and orders a bare "fma" clone
 * below "avx2"; the ISA level is tested by feature bits (GCC 12 and later).
 */
#ifndef CDDP_COMMON_CLONES_H
#define CDDP_COMMON_CLONES_H

#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(CDDP_NO_TARGET_CLONES)
#if __GNUC__ >= 12
#define CDDP_CLONES                                                                      \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "avx2", "default")))
#define CDDP_CLONES_AVX512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CDDP_CLONES __attribute__((target_clones("avx2", "default")))
#define CDDP_CLONES_AVX512 __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#else
#define CDDP_CLONES
#define CDDP_CLONES_AVX512
#endif

/* An out-of-line copy of a helper is compiled for the baseline ISA and called once per
 * element, which keeps the caller's loop scalar: GCC declined to inline cddp_exp_f32 into
 * the AVX-512 clone of GELU's backward (5x slower) until it was forced. */
#if defined(__GNUC__)
#define CDDP_MATH_INLINE __attribute__((always_inline)) static inline
#else
#define CDDP_MATH_INLINE static inline
#endif

#endif
