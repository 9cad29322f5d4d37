/* CUDA-aware MPI_Allreduce on device buffers, every element checked.
 *
 * Built on the GPU machine with the image's own mpicc against the host's CUDA run time, run with
 * the image's own mpirun (benchmarks/gpu_proof.sh). Each rank fills device memory, the reduction
 * is handed device pointers only, and the result is copied back and compared element by element
 * with the value the ranks' inputs imply. Exit 0 only when every element of every case is right.
 */
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_OK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_)); \
    MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)

static int rank, size;

/* value of element i on rank r, and what the reduction over all ranks must give */
static double d_in(long i, int r) { return (double)((i % 1000) * (r + 1)); }
static double d_sum(long i) { return (double)((i % 1000) * ((long)size * (size + 1) / 2)); }
static int32_t i_in(long i, int r) { return (int32_t)((i % 997) + r); }
static int32_t i_max(long i) { return (int32_t)((i % 997) + size - 1); }

static long run_case(const char *what, MPI_Datatype type, MPI_Op op, long count, int in_place,
                     int *failed) {
    size_t esz = type == MPI_DOUBLE ? sizeof(double) : sizeof(int32_t);
    size_t bytes = (size_t)count * esz;
    void *host = malloc(bytes), *send = NULL, *recv = NULL;
    if (!host) { fprintf(stderr, "rank %d: out of host memory\n", rank); MPI_Abort(MPI_COMM_WORLD, 3); }
    for (long i = 0; i < count; i++) {
        if (type == MPI_DOUBLE) ((double *)host)[i] = d_in(i, rank);
        else ((int32_t *)host)[i] = i_in(i, rank);
    }
    CUDA_OK(cudaMalloc(&recv, bytes));
    if (!in_place) CUDA_OK(cudaMalloc(&send, bytes));
    CUDA_OK(cudaMemcpy(in_place ? recv : send, host, bytes, cudaMemcpyHostToDevice));
    if (!in_place) CUDA_OK(cudaMemset(recv, 0xff, bytes));
    struct cudaPointerAttributes attr;
    CUDA_OK(cudaPointerGetAttributes(&attr, recv));
    if (attr.type != cudaMemoryTypeDevice) {
        fprintf(stderr, "rank %d: the receive buffer is not device memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    memset(host, 0, bytes);
    int rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, (int)count, type, op, MPI_COMM_WORLD);
    CUDA_OK(cudaMemcpy(host, recv, bytes, cudaMemcpyDeviceToHost));
    long wrong = 0, first = -1;
    for (long i = 0; i < count; i++) {
        int ok = type == MPI_DOUBLE ? ((double *)host)[i] == d_sum(i) : ((int32_t *)host)[i] == i_max(i);
        if (!ok) { wrong++; if (first < 0) first = i; }
    }
    long all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("case %-10s count=%-9ld %-11s rc=%d wrong=%ld%s\n", what, count,
               in_place ? "in-place" : "two-buffer", rc, all_wrong, all_wrong || rc ? "  FAIL" : "  ok");
    if (wrong && first >= 0)
        fprintf(stderr, "rank %d: %s count=%ld: first wrong element %ld\n", rank, what, count, first);
    if (all_wrong || rc != MPI_SUCCESS) *failed = 1;
    cudaFree(recv);
    if (send) cudaFree(send);
    free(host);
    return count;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int devices = 0;
    CUDA_OK(cudaGetDeviceCount(&devices));
    CUDA_OK(cudaSetDevice(rank % devices));
    int aware_compile = -1, aware_run = -1;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    aware_compile = MPIX_CUDA_AWARE_SUPPORT;
    aware_run = MPIX_Query_cuda_support();
#endif
    if (rank == 0)
        printf("ranks=%d gpus=%d cuda-aware: compile-time %d, run-time %d\n", size, devices,
               aware_compile, aware_run);
    int failed = 0;
    long counts[] = {1, 1000, 1L << 20, 1L << 24};
    long checked = 0;
    for (int k = 0; k < 4; k++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            checked += run_case("double+sum", MPI_DOUBLE, MPI_SUM, counts[k], in_place, &failed);
            checked += run_case("int32+max", MPI_INT32_T, MPI_MAX, counts[k], in_place, &failed);
        }
    }
    /* time the largest double case, device buffers, 5 repetitions after one warm-up */
    long n = 1L << 24;
    double *buf = NULL;
    CUDA_OK(cudaMalloc((void **)&buf, n * sizeof(double)));
    CUDA_OK(cudaMemset(buf, 0, n * sizeof(double)));
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < 5; i++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / 5;
    cudaFree(buf);
    if (rank == 0) {
        printf("time 128 MiB double in-place allreduce: %.3f ms, algbw %.2f GB/s\n", t * 1e3,
               n * sizeof(double) / t / 1e9);
        printf("%s: %ld elements checked on each rank, device buffers\n",
               failed ? "FAILED" : "ALL OK", checked);
    }
    MPI_Finalize();
    return failed || aware_run == 0 ? 1 : 0;
}
