/* device.h — what cddp._cuda asks the CUDA runtime about the machine (runtime/device.c).
 * Pure C over cuda_runtime_api.h; no call here initializes anything a machine without a GPU
 * lacks: with no device or no driver, counts are 0 and nothing is printed.
 */
#ifndef CDDP_CUDA_DEVICE_H
#define CDDP_CUDA_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices; 0 when cudaGetDeviceCount fails (no device: error 35/100). The
 * runtime's error code lands in *err when err is not NULL (0 when it succeeded). */
int cddp_cuda_device_count(int *err);

/* The CUDA runtime version this extension was compiled against (CUDART_VERSION, 13000 for
 * 13.0) and the driver's (0 without a driver). */
int cddp_cuda_runtime_version(void);
int cddp_cuda_driver_version(void);

#ifdef __cplusplus
}
#endif
#endif
