/*
 * A stand-in for the CUDA run time and NCCL in host memory, for testing the logic of
 * imagebuild-nccl-bw (imagebuild/smoke/bench/nccl_bw.c) on a machine without a GPU: what it fills,
 * which buffers its in-place variants pass, how it checks every element and what its table says.
 * It proves nothing about CUDA or NCCL (the GPU tier does that on a GPU host).
 *
 * "GPUs": $FAKE_GPUS (default 4); device memory is malloc'd. Collectives are recorded between
 * ncclGroupStart and ncclGroupEnd and carried out at the outermost ncclGroupEnd, once every local
 * rank has called (one process only: the unique id is not shared across processes). $FAKE_WRONG=N
 * adds 1 to element N of rank 0's result of every collective, so the checker must count it.
 *
 * Compiled against the real headers (for the types), linked instead of libcudart and libnccl.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define MAX_RANKS 64
#define MAX_OPS 256

static int current_device = 0;

static int fake_gpus(void) {
    const char *v = getenv("FAKE_GPUS");
    return v ? atoi(v) : 4;
}

cudaError_t cudaGetDeviceCount(int *count) { *count = fake_gpus(); return cudaSuccess; }
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= fake_gpus()) return cudaErrorInvalidDevice;
    current_device = device;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **ptr, size_t size) { *ptr = malloc(size ? size : 1); return *ptr ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void *ptr) { free(ptr); return cudaSuccess; }
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    (void)kind;
    memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    (void)flags;
    *stream = (cudaStream_t)(size_t)(current_device + 1);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { (void)stream; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "Fake GPU %d", device);
    return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int device) {
    snprintf(bus, (size_t)len, "0000:%02x:00.0", device);
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake"; }

/* ---- NCCL ---------------------------------------------------------------------------------- */

struct ncclComm { int rank, nranks; };

typedef enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_BROADCAST } op_kind;
typedef struct { op_kind kind; const float *send; float *recv; size_t count; int rank, nranks, root; } op_t;

static op_t ops[MAX_OPS];
static int nops = 0, depth = 0;

ncclResult_t ncclGetVersion(int *v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { memset(id, 7, sizeof *id); return ncclSuccess; }
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    if (nranks > MAX_RANKS || rank >= nranks) return ncclInvalidArgument;
    *comm = malloc(sizeof **comm);
    (*comm)->rank = rank;
    (*comm)->nranks = nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) { free(comm); return ncclSuccess; }
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fake error"; }

static void corrupt(const op_t *o, size_t n) {
    const char *w = getenv("FAKE_WRONG");
    if (w && o->rank == 0 && (size_t)atol(w) < n) o->recv[atol(w)] += 1.0f;
}

static void run_group(void) {
    /* the ops of one collective across the ranks, in rank order */
    op_t *by_rank[MAX_RANKS];
    int n = ops[0].nranks;
    for (int i = 0; i < nops; i++) by_rank[ops[i].rank] = &ops[i];
    if (nops != n) { fprintf(stderr, "fake nccl: %d calls for %d ranks\n", nops, n); exit(9); }
    op_t *o0 = by_rank[0];
    size_t c = o0->count;
    switch (o0->kind) {
    case OP_ALL_REDUCE: {
        float *sum = calloc(c, sizeof(float));
        for (int r = 0; r < n; r++) for (size_t i = 0; i < c; i++) sum[i] += by_rank[r]->send[i];
        for (int r = 0; r < n; r++) { memcpy(by_rank[r]->recv, sum, c * sizeof(float)); corrupt(by_rank[r], c); }
        free(sum);
        break;
    }
    case OP_ALL_GATHER: {
        float *all = malloc(c * n * sizeof(float));
        for (int r = 0; r < n; r++) memcpy(all + (size_t)r * c, by_rank[r]->send, c * sizeof(float));
        for (int r = 0; r < n; r++) { memcpy(by_rank[r]->recv, all, c * n * sizeof(float)); corrupt(by_rank[r], c * n); }
        free(all);
        break;
    }
    case OP_REDUCE_SCATTER: {
        float *sum = calloc(c * n, sizeof(float));
        for (int r = 0; r < n; r++) for (size_t i = 0; i < c * n; i++) sum[i] += by_rank[r]->send[i];
        for (int r = 0; r < n; r++) { memcpy(by_rank[r]->recv, sum + (size_t)r * c, c * sizeof(float)); corrupt(by_rank[r], c); }
        free(sum);
        break;
    }
    case OP_BROADCAST: {
        float *data = malloc(c * sizeof(float));
        memcpy(data, by_rank[o0->root]->send, c * sizeof(float));
        for (int r = 0; r < n; r++) { memcpy(by_rank[r]->recv, data, c * sizeof(float)); corrupt(by_rank[r], c); }
        free(data);
        break;
    }
    }
    nops = 0;
}

ncclResult_t ncclGroupStart(void) { depth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
    if (--depth == 0 && nops) run_group();
    return ncclSuccess;
}

static ncclResult_t record(op_kind kind, const void *send, void *recv, size_t count, ncclComm_t comm, int root) {
    if (nops >= MAX_OPS) return ncclInternalError;
    ops[nops++] = (op_t){kind, send, recv, count, comm->rank, comm->nranks, root};
    if (depth == 0) run_group();
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
    (void)t; (void)op; (void)st;
    return record(OP_ALL_REDUCE, s, r, count, comm, 0);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t, ncclComm_t comm, cudaStream_t st) {
    (void)t; (void)st;
    return record(OP_ALL_GATHER, s, r, count, comm, 0);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
    (void)t; (void)op; (void)st;
    return record(OP_REDUCE_SCATTER, s, r, count, comm, 0);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st) {
    (void)t; (void)st;
    return record(OP_BROADCAST, s, r, count, comm, root);
}
