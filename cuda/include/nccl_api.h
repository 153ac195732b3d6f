/* nccl_api.h — the part of NCCL that cddp's "nccl" backend calls, declared by hand: no NCCL
 * header exists at build time (libnccl.so.2 is loaded at first use, runtime/libs.c).
 *
 * Source: written from NVIDIA's NCCL 2.27 API documentation ("NCCL API": communicator
 * creation, collective operations, group calls, types), whose C ABI is unchanged through the
 * 2.32 of nvidia-nccl-cu13: ncclUniqueId is 128 opaque bytes, enums are ints. ncclTimeout (8)
 * exists from 2.29 on; older libraries never return it.
 *
 * The "nccl" process group (phase 2) uses: ncclGetUniqueId on rank 0, the id through the store,
 * ncclCommInitRank per group, collectives on a communication stream ordered after the compute
 * stream by events, ncclGroupStart/End around a DDP bucket's calls, and a watchdog polling
 * ncclCommGetAsyncError that calls ncclCommAbort on error or timeout.
 */
#ifndef CDDP_NCCL_API_H
#define CDDP_NCCL_API_H

#include <stddef.h>

#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cddp_nccl_stream_t;   /* == cudaStream_t */

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef struct cddp_nccl_api {
    ncclResult_t (*ncclGetVersion)(int *version);   /* 2.32.3 -> 23203 */
    ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
    ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
    ncclResult_t (*ncclCommAbort)(ncclComm_t comm);
    ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t *async_error);
    const char *(*ncclGetErrorString)(ncclResult_t result);
    ncclResult_t (*ncclCommCount)(const ncclComm_t comm, int *count);
    ncclResult_t (*ncclCommUserRank)(const ncclComm_t comm, int *rank);
    ncclResult_t (*ncclAllReduce)(const void *send, void *recv, size_t count, ncclDataType_t dt,
                                  ncclRedOp_t op, ncclComm_t comm, cddp_nccl_stream_t stream);
    ncclResult_t (*ncclBroadcast)(const void *send, void *recv, size_t count, ncclDataType_t dt,
                                  int root, ncclComm_t comm, cddp_nccl_stream_t stream);
    ncclResult_t (*ncclReduce)(const void *send, void *recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, int root, ncclComm_t comm,
                               cddp_nccl_stream_t stream);
    ncclResult_t (*ncclAllGather)(const void *send, void *recv, size_t send_count,
                                  ncclDataType_t dt, ncclComm_t comm, cddp_nccl_stream_t stream);
    ncclResult_t (*ncclReduceScatter)(const void *send, void *recv, size_t recv_count,
                                      ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                      cddp_nccl_stream_t stream);
    ncclResult_t (*ncclSend)(const void *send, size_t count, ncclDataType_t dt, int peer,
                             ncclComm_t comm, cddp_nccl_stream_t stream);
    ncclResult_t (*ncclRecv)(void *recv, size_t count, ncclDataType_t dt, int peer,
                             ncclComm_t comm, cddp_nccl_stream_t stream);
    ncclResult_t (*ncclGroupStart)(void);
    ncclResult_t (*ncclGroupEnd)(void);
    /* optional (newer NCCL) */
    ncclResult_t (*ncclCommFinalize)(ncclComm_t comm);
    const char *(*ncclGetLastError)(ncclComm_t comm);
} cddp_nccl_api;

extern const cddp_lib_spec cddp_nccl_spec;

#ifdef __cplusplus
}
#endif
#endif
