/* nccl_dl.h: the NCCL functions the "nccl" communicator calls, resolved at run
 * time from libnccl.so.2 (dlopen + dlsym) instead of linked, so that libringvit
 * loads, and runs its CPU and single-GPU paths, on a machine without NCCL; only
 * rv_comm_nccl_create needs the library. Internal to comm/, NCCL builds only. */
#ifndef RV_NCCL_DL_H
#define RV_NCCL_DL_H

#include <nccl.h>

#include "rv_status.h"

/* One pointer per NCCL function comm_nccl.c calls, each typed from nccl.h's own
 * declaration, so a signature that changes there fails to compile here. */
typedef struct rv_nccl_api {
    __typeof__(ncclGetUniqueId) *GetUniqueId;
    __typeof__(ncclCommInitRankConfig) *CommInitRankConfig;
    __typeof__(ncclCommSplit) *CommSplit;
    __typeof__(ncclCommFinalize) *CommFinalize;
    __typeof__(ncclCommDestroy) *CommDestroy;
    __typeof__(ncclCommAbort) *CommAbort;
    __typeof__(ncclCommGetAsyncError) *CommGetAsyncError;
    __typeof__(ncclCommCount) *CommCount;
    __typeof__(ncclCommUserRank) *CommUserRank;
    __typeof__(ncclGetErrorString) *GetErrorString;
    __typeof__(ncclGetLastError) *GetLastError;
    __typeof__(ncclAllReduce) *AllReduce;
    __typeof__(ncclAllGather) *AllGather;
    __typeof__(ncclSend) *Send;
    __typeof__(ncclRecv) *Recv;
    __typeof__(ncclGroupStart) *GroupStart;
    __typeof__(ncclGroupEnd) *GroupEnd;
} rv_nccl_api;

/* The table; every entry is set once rv_nccl_load has returned RV_OK. Read it
 * only after that (an NCCL communicator exists only after a successful load). */
extern rv_nccl_api rv_nccl __attribute__((visibility("hidden")));

/* Loads libnccl.so.2 (else libnccl.so) and fills rv_nccl on the first call, once
 * per process whatever the threads; later calls answer the first one's outcome.
 * RV_ERR_UNSUPPORTED, with the loader's message, when the library or one of its
 * functions is missing. */
rv_status rv_nccl_load(void) __attribute__((visibility("hidden")));

#endif
