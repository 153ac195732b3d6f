/* reduce.cu — the sum of a contiguous buffer: torch.sum(x) for float32/float16/bfloat16 on
 * CUDA. Shapes: x (n,) -> out (1,), accumulated in float.
 *
 * Two launches, no atomics, so the order of additions is fixed and the result repeats exactly:
 * (1) min(ceil(n / 256), 1024) blocks each sum a grid-stride slice (16-byte loads when x is
 * aligned) into work[block]; (2) one block sums work[0:nblocks] and rounds to out's dtype.
 */
#include "common.cuh"

using namespace cddp_cu;

namespace {

constexpr unsigned kPartials = 1024;   /* most first-pass blocks: the workspace size */

/* Sum of one float per thread across the block (warp shuffles, then one warp over warps). */
__device__ float block_sum(float v)
{
    __shared__ float warp_sums[kThreads / 32];
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

template <typename T>
__global__ void sum_partial(const T *x, size_t n, int vec_ok, float *work)
{
    float acc = 0.0f;
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (vec_ok) {
        const vec16<T> *xv = (const vec16<T> *)x;
        size_t nvec = n / vec16<T>::N;
        for (size_t i = tid; i < nvec; i += stride) {
            vec16<T> r = xv[i];
#pragma unroll
            for (int k = 0; k < vec16<T>::N; k++)
                acc += to_f(r.v[k]);
        }
        done = nvec * vec16<T>::N;
    }
    for (size_t i = done + tid; i < n; i += stride)
        acc += to_f(x[i]);
    acc = block_sum(acc);
    if (threadIdx.x == 0)
        work[blockIdx.x] = acc;
}

template <typename T>
__global__ void sum_final(T *out, const float *work, unsigned nparts)
{
    float acc = 0.0f;
    for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x)
        acc += work[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0)
        *out = from_f<T>(acc);
}

}  // namespace

extern "C" size_t cddp_cu_sum_workspace(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return b < 1 ? 1 : b > kPartials ? kPartials : b;
}

extern "C" int cddp_cu_sum(void *out, const void *x, int dtype, size_t n, float *work, cddp_kstream stream)
{
    unsigned nparts = (unsigned)cddp_cu_sum_workspace(n);
    int vec_ok = aligned16(x);
    CDDP_CU_DISPATCH(dtype, T,
        sum_partial<T><<<nparts, kThreads, 0, stream>>>((const T *)x, n, vec_ok, work);
        sum_final<T><<<1, kThreads, 0, stream>>>((T *)out, work, nparts));
    return launched("sum");
}
