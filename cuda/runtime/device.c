/* device.c — device count and versions for cddp._cuda (device.h): torch.cuda.device_count,
 * torch.version.cuda. Pure C over the CUDA runtime API (cudart is linked statically).
 */
#include <cuda_runtime_api.h>

#include "device.h"

int cddp_cuda_device_count(int *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (err)
        *err = (int)e;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   /* clear it: no device is an answer, not a failure */
        return 0;
    }
    return n;
}

int cddp_cuda_runtime_version(void)
{
    return CUDART_VERSION;
}

int cddp_cuda_driver_version(void)
{
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess)
        return 0;
    return v;
}
