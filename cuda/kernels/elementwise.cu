/* elementwise.cu — fill, cast/copy (float32 <-> float16 <-> bfloat16) and add/mul over
 * contiguous buffers: torch's fill_, Tensor.to(dtype) and torch.add/torch.mul on CUDA.
 * Shapes: x (n,) for every buffer.
 *
 * add/mul read and write 16 bytes per thread per step (float4, or 8 halves) when every pointer
 * is 16-byte aligned, then finish the n % width tail element by element; otherwise the scalar
 * kernel runs. Half-precision math is done in float and rounded once, as torch's kernels do.
 */
#include "common.cuh"

using namespace cddp_cu;

namespace {

template <typename T>
__global__ void fill_kernel(T *dst, size_t n, float value)
{
    T v = from_f<T>(value);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

template <typename D, typename S>
__global__ void cast_kernel(D *dst, const S *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_f<D>(to_f(src[i]));
}

template <int OP> __device__ __forceinline__ float apply(float a, float b)
{
    return OP == CDDP_CU_ADD ? a + b : a * b;
}

/* out[i] = a[i] op b[i] for i in [start, n), one element per thread step. */
template <typename T, int OP>
__global__ void binary_scalar(T *out, const T *a, const T *b, size_t start, size_t n)
{
    for (size_t i = start + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(apply<OP>(to_f(a[i]), to_f(b[i])));
}

/* nvec 16-byte vectors: out, a, b 16-byte aligned. */
template <typename T, int OP>
__global__ void binary_vec(vec16<T> *out, const vec16<T> *a, const vec16<T> *b, size_t nvec)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
        vec16<T> x = a[i], y = b[i], r;
#pragma unroll
        for (int k = 0; k < vec16<T>::N; k++)
            r.v[k] = from_f<T>(apply<OP>(to_f(x.v[k]), to_f(y.v[k])));
        out[i] = r;
    }
}

template <typename T, int OP>
void binary_launch(T *out, const T *a, const T *b, size_t n, cudaStream_t s)
{
    size_t done = 0;
    if (aligned16(out) && aligned16(a) && aligned16(b)) {
        size_t nvec = n / vec16<T>::N;
        if (nvec)
            binary_vec<T, OP><<<blocks_for(nvec), kThreads, 0, s>>>(
                (vec16<T> *)out, (const vec16<T> *)a, (const vec16<T> *)b, nvec);
        done = nvec * vec16<T>::N;
    }
    if (done < n)
        binary_scalar<T, OP><<<blocks_for(n - done), kThreads, 0, s>>>(out, a, b, done, n);
}

template <typename D>
int cast_from(D *dst, const void *src, int src_dtype, size_t n, cudaStream_t s)
{
    CDDP_CU_DISPATCH(src_dtype, S, cast_kernel<D, S><<<blocks_for(n), kThreads, 0, s>>>(dst, (const S *)src, n));
    return 0;
}

}  // namespace

extern "C" size_t cddp_cu_itemsize(int dtype)
{
    return dtype == CDDP_CU_F32 ? 4 : dtype == CDDP_CU_F16 || dtype == CDDP_CU_BF16 ? 2 : 0;
}

extern "C" int cddp_cu_fill(void *dst, int dtype, size_t n, double value, cddp_kstream stream)
{
    if (n == 0)
        return cddp_cu_itemsize(dtype) ? 0 : cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown dtype code %d", dtype);
    CDDP_CU_DISPATCH(dtype, T, fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>((T *)dst, n, (float)value));
    return launched("fill");
}

extern "C" int cddp_cu_cast(void *dst, int dst_dtype, const void *src, int src_dtype, size_t n,
                            cddp_kstream stream)
{
    int rc = 0;
    if (!cddp_cu_itemsize(dst_dtype) || !cddp_cu_itemsize(src_dtype))
        return cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown dtype code %d -> %d", src_dtype, dst_dtype);
    if (n == 0)
        return 0;
    if (dst_dtype == src_dtype) {   /* a plain copy: the copy engine, no kernel */
        CHECK_CUDA(cudaMemcpyAsync(dst, src, n * cddp_cu_itemsize(dst_dtype), cudaMemcpyDeviceToDevice, stream));
        return 0;
    }
    CDDP_CU_DISPATCH(dst_dtype, D, rc = cast_from<D>((D *)dst, src, src_dtype, n, stream));
    if (rc < 0)
        return rc;
    return launched("cast");
fail:
    return rc;
}

extern "C" int cddp_cu_binary(int op, void *out, const void *a, const void *b, int dtype, size_t n,
                              cddp_kstream stream)
{
    if (op != CDDP_CU_ADD && op != CDDP_CU_MUL)
        return cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown elementwise op %d", op);
    if (!cddp_cu_itemsize(dtype))
        return cddp_cuda_seterr(CDDP_CUDA_EARG, "unknown dtype code %d", dtype);
    if (n == 0)
        return 0;
    if (op == CDDP_CU_ADD) {
        CDDP_CU_DISPATCH(dtype, T, binary_launch<T, CDDP_CU_ADD>((T *)out, (const T *)a, (const T *)b, n, stream));
    } else {
        CDDP_CU_DISPATCH(dtype, T, binary_launch<T, CDDP_CU_MUL>((T *)out, (const T *)a, (const T *)b, n, stream));
    }
    return launched("binary");
}
