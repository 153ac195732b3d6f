/* kernels.h — host launch wrappers of cddp._cuda's first kernels (the .cu files of cuda/kernels/): fill,
 * cast/copy between float32, float16 and bfloat16, elementwise add/mul with 16-byte vector
 * loads, and a sum reduction. Mirrors the CUDA kernels behind torch's fill_, Tensor.to(dtype),
 * torch.add / torch.mul and torch.sum for contiguous tensors.
 *
 * Shapes: every buffer is contiguous with n elements of its dtype (`x (n,)`); sum writes one
 * element. Pointers are device pointers; work is queued on `stream` (NULL: the legacy default
 * stream) and nothing here synchronizes. Each wrapper returns 0, or a negative CDDP_CUDA_E*
 * code with the message recorded (check.h): a bad dtype or op, or the launch's CUDA error.
 *
 * Accumulation: add/mul compute in float and round once to the output dtype (as torch's
 * half kernels do); sum accumulates in float (block partials, then one block over them: a fixed
 * order, so the result is deterministic run to run).
 */
#ifndef CDDP_CUDA_KERNELS_H
#define CDDP_CUDA_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CDDP_CU_F32 = 0, CDDP_CU_F16 = 1, CDDP_CU_BF16 = 2, CDDP_CU_NDTYPES = 3 };
enum { CDDP_CU_ADD = 0, CDDP_CU_MUL = 1 };

typedef struct CUstream_st *cddp_kstream;   /* == cudaStream_t */

/* Bytes per element of `dtype`, 0 when unknown. */
size_t cddp_cu_itemsize(int dtype);

/* dst (n,) = value, rounded to dst's dtype. */
int cddp_cu_fill(void *dst, int dtype, size_t n, double value, cddp_kstream stream);

/* dst (n,) = src (n,) converted (round to nearest even); same dtypes: a device copy. */
int cddp_cu_cast(void *dst, int dst_dtype, const void *src, int src_dtype, size_t n,
                 cddp_kstream stream);

/* out (n,) = a (n,) op b (n,), all of `dtype`; op is CDDP_CU_ADD or CDDP_CU_MUL. */
int cddp_cu_binary(int op, void *out, const void *a, const void *b, int dtype, size_t n,
                   cddp_kstream stream);

/* Float slots of device workspace cddp_cu_sum needs for n elements. */
size_t cddp_cu_sum_workspace(size_t n);

/* out (1,) = sum of x (n,), dtype `dtype`; `work` holds cddp_cu_sum_workspace(n) floats. */
int cddp_cu_sum(void *out, const void *x, int dtype, size_t n, float *work, cddp_kstream stream);

#ifdef __cplusplus
}
#endif
#endif
