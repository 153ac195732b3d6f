/* common.cuh — shared device helpers of cuda/kernels/*.cu: the element types of kernels.h's
 * dtype codes with their float conversions, a 16-byte vector of them, and the launch-size rule.
 */
#ifndef CDDP_CUDA_COMMON_CUH
#define CDDP_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "kernels.h"

namespace cddp_cu {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 65535;   /* grid-stride loops cover the rest */

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* 16 bytes of T: one 128-bit load/store (float4 for float, 8 halves). */
template <typename T> struct alignas(16) vec16 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};

static inline unsigned blocks_for(size_t work)
{
    size_t b = (work + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

static inline int aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* The launch's own error (bad configuration, no device), recorded as check.h does. */
static inline int launched(const char *what)
{
    int rc = 0;
    CHECK_CUDA(cudaGetLastError());
    return 0;
fail:
    (void)what;
    return rc;
}

}  // namespace cddp_cu

#define CDDP_CU_DISPATCH(dtype, T, ...)                                             \
    switch (dtype) {                                                                \
    case CDDP_CU_F32: { typedef float T; __VA_ARGS__; break; }                     \
    case CDDP_CU_F16: { typedef __half T; __VA_ARGS__; break; }                    \
    case CDDP_CU_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; break; }            \
    default: return cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown dtype code %d", dtype); \
    }

#endif
