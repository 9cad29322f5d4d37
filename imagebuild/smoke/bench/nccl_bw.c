/*
 * imagebuild-nccl-bw: NCCL collective bandwidth, every element checked.
 *
 * imagebuild's own benchmark for images built from the package registries alone, where no
 * registry serves nccl-tests. It is compiled in the image's build stage against the CUDA run-time
 * and NCCL headers of NVIDIA's wheels, with the C compiler and MPI of the image's OS (no nvcc: the
 * buffers are filled and read back through cudaMemcpy), and the smoke suite's GPU tier runs it.
 *
 * What it measures is defined as nccl-tests defines it (nccl-tests' doc/PERFORMANCE.md), and the
 * table it prints has nccl-tests' columns, so one parser reads both:
 *
 *   t       the time of one collective: the wall time of ITERS back-to-back launches on every
 *           local GPU, streams synchronised after the last, divided by ITERS, then averaged over
 *           the processes;
 *   S       the size column, in bytes: all_reduce and broadcast the buffer of each rank;
 *           all_gather the gathered result (n times what each rank sends); reduce_scatter each
 *           rank's input (n times what each rank receives);
 *   algbw   S / t;
 *   busbw   algbw times the share of S each rank must move over the slowest link:
 *           all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1;
 *           comparable with the hardware's peak whatever the number of ranks n.
 *
 * Checking: before each timed run the buffers are filled with small integers (element i of rank r
 * is ((13 i + 7 r) mod 61) + 1, exact in float for any sum over up to 2^18 ranks), one collective
 * runs, and every element of every rank's result is read back and compared with the exact
 * expected value; #wrong is the number that differ, summed over the ranks.
 *
 * Ranks: one per GPU. Under mpirun (Open MPI, PMIx or a PMI launcher's environment) each process
 * takes one GPU (its node-local rank, modulo the GPUs it sees) and NCCL's unique id travels by
 * MPI_Bcast; without a launcher one process drives -g GPUs (default: all it sees).
 *
 * Exit codes: 0 every element right; 1 wrong elements; 2 a usage error; 3 no CUDA driver or
 * device; 4 a CUDA, NCCL or MPI call failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>
#ifdef IMAGEBUILD_WITH_MPI
#include <mpi.h>
#endif

#define BENCH_VERSION "1"
#define MAX_LOCAL_GPUS 64
#define HOST_LEN 64
#define NAME_LEN 96
#define LINE_LEN 512

enum { EXIT_WRONG = 1, EXIT_USAGE = 2, EXIT_NO_GPU = 3, EXIT_CALL = 4 };

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST } coll_t;
static const char *COLL_NAMES[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"};

static int g_mpi = 0;        /* launched by an MPI launcher, MPI initialised */
static int g_proc = 0;       /* this process among nprocs */
static int g_nprocs = 1;

static void finish(int code) {
#ifdef IMAGEBUILD_WITH_MPI
    if (g_mpi) {
        if (code != 0 && code != EXIT_WRONG) MPI_Abort(MPI_COMM_WORLD, code);
        MPI_Finalize();
    }
#endif
    exit(code);
}

/* one line on stderr, written at once (the processes of one job share the terminal), then exit */
static void die(int code, const char *fmt, ...) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "imagebuild-nccl-bw: ");
    if (g_nprocs > 1) n += snprintf(msg + n, sizeof msg - (size_t)n, "process %d: ", g_proc);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    finish(code);
}

#define CUDA_OK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    die(EXIT_CALL, "%s failed: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); } while (0)
#define NCCL_OK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
    die(EXIT_CALL, "%s failed: %s", #call, ncclGetErrorString(r_)); } while (0)

typedef struct {
    coll_t coll;
    size_t min_bytes, max_bytes;
    unsigned factor;
    int iters, warmup, check, gpus;
} options_t;

typedef struct {
    int device;
    int rank;
    ncclComm_t comm;
    cudaStream_t stream;
    float *send, *recv;
    char line[LINE_LEN];  /* this rank's "# Rank" line */
} local_t;

static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                 "MV2_COMM_WORLD_SIZE", "SLURM_PMIX_MAPPING_SERV", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static int local_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "PMI_LOCAL_RANK", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return g_proc;
}

static int parse_size(const char *text, size_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text) return -1;
    unsigned long long mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1ULL << 10, end++;
    else if (*end == 'M' || *end == 'm') mult = 1ULL << 20, end++;
    else if (*end == 'G' || *end == 'g') mult = 1ULL << 30, end++;
    if (*end != '\0' || v == 0 || v > (1ULL << 40) / mult) return -1;
    *out = (size_t)(v * mult);
    return 0;
}

static int parse_int(const char *text, int lo, int hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static void usage(FILE *to) {
    fprintf(to,
        "usage: imagebuild-nccl-bw [-C all_reduce|all_gather|reduce_scatter|broadcast] [-b MIN] [-e MAX]\n"
        "                          [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-g GPUS] [--version]\n"
        "  sizes MIN..MAX bytes (suffix K, M or G), each FACTOR times the one before (default 8..256M by 2);\n"
        "  ITERS timed and WARMUP untimed collectives per size (default 20 and 5); -c 1 checks every\n"
        "  element (default); -g: GPUs this process drives without an MPI launcher (default: all it sees;\n"
        "  under mpirun one per process). Columns and bandwidths as nccl-tests defines them.\n");
}

static void parse_args(int argc, char **argv, options_t *o) {
    static const struct option longopts[] = {
        {"collective", required_argument, NULL, 'C'}, {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'}, {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'}, {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'}, {"ngpus", required_argument, NULL, 'g'},
        {"version", no_argument, NULL, 'V'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c, f;
    while ((c = getopt_long(argc, argv, "C:b:e:f:n:w:c:g:Vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'C': {
            int found = 0;
            for (int i = 0; i < 4; i++)
                if (strcmp(optarg, COLL_NAMES[i]) == 0) o->coll = (coll_t)i, found = 1;
            if (!found) die(EXIT_USAGE, "-C %s: unknown collective (all_reduce, all_gather, reduce_scatter, broadcast)", optarg);
            break;
        }
        case 'b': if (parse_size(optarg, &o->min_bytes)) die(EXIT_USAGE, "-b %s: not a size", optarg); break;
        case 'e': if (parse_size(optarg, &o->max_bytes)) die(EXIT_USAGE, "-e %s: not a size", optarg); break;
        case 'f': if (parse_int(optarg, 2, 1024, &f)) die(EXIT_USAGE, "-f %s: not a factor from 2 to 1024", optarg);
                  o->factor = (unsigned)f; break;
        case 'n': if (parse_int(optarg, 1, 1000000, &o->iters)) die(EXIT_USAGE, "-n %s: not 1..1000000", optarg); break;
        case 'w': if (parse_int(optarg, 0, 1000000, &o->warmup)) die(EXIT_USAGE, "-w %s: not 0..1000000", optarg); break;
        case 'c': if (parse_int(optarg, 0, 1, &o->check)) die(EXIT_USAGE, "-c %s: not 0 or 1", optarg); break;
        case 'g': if (parse_int(optarg, 1, MAX_LOCAL_GPUS, &o->gpus)) die(EXIT_USAGE, "-g %s: not 1..%d", optarg, MAX_LOCAL_GPUS); break;
        case 'V': {
            int nccl = 0, rt = 0, drv = 0;
            NCCL_OK(ncclGetVersion(&nccl));
            CUDA_OK(cudaRuntimeGetVersion(&rt));
            if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
            printf("imagebuild-nccl-bw %s nccl-headers=%d nccl-library=%d cudart-headers=%d cudart-library=%d driver=%d mpi=%s\n",
                   BENCH_VERSION, NCCL_VERSION_CODE, nccl, CUDART_VERSION, rt, drv,
#ifdef IMAGEBUILD_WITH_MPI
                   "yes"
#else
                   "no"
#endif
            );
            exit(0);
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(EXIT_USAGE);
        }
    }
    if (optind < argc) die(EXIT_USAGE, "unexpected argument %s", argv[optind]);
    if (o->min_bytes > o->max_bytes) die(EXIT_USAGE, "-b is larger than -e");
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* element i of rank r's input: a small integer, so any sum over the ranks is exact in float */
static float value(int rank, size_t i) {
    return (float)(((i % 61) * 13 + (size_t)rank * 7) % 61 + 1);
}

/* per-rank counts for a size: what each rank sends and receives, and the size the table shows */
typedef struct { size_t send, recv, shown; } counts_t;

static counts_t counts_for(coll_t coll, size_t bytes, int nranks) {
    counts_t c;
    size_t elems = bytes / sizeof(float);
    if (elems == 0) elems = 1;
    switch (coll) {
    case ALL_GATHER:
        c.send = elems / (size_t)nranks ? elems / (size_t)nranks : 1;
        c.recv = c.send * (size_t)nranks;
        c.shown = c.recv;
        break;
    case REDUCE_SCATTER:
        c.recv = elems / (size_t)nranks ? elems / (size_t)nranks : 1;
        c.send = c.recv * (size_t)nranks;
        c.shown = c.send;
        break;
    default:
        c.send = c.recv = c.shown = elems;
    }
    return c;
}

static double bus_factor(coll_t coll, int n) {
    switch (coll) {
    case ALL_REDUCE: return 2.0 * (n - 1) / n;
    case ALL_GATHER: case REDUCE_SCATTER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

static void launch(coll_t coll, local_t *l, counts_t c, int in_place, int nlocal) {
    NCCL_OK(ncclGroupStart());
    for (int g = 0; g < nlocal; g++) {
        local_t *x = &l[g];
        float *recv = x->recv;
        const float *send = x->send;
        if (in_place) {
            send = x->recv;
            if (coll == ALL_GATHER) send = x->recv + (size_t)x->rank * c.send;
            if (coll == REDUCE_SCATTER) { send = x->send; recv = x->send + (size_t)x->rank * c.recv; }
        }
        switch (coll) {
        case ALL_REDUCE: NCCL_OK(ncclAllReduce(send, recv, c.send, ncclFloat, ncclSum, x->comm, x->stream)); break;
        case ALL_GATHER: NCCL_OK(ncclAllGather(send, recv, c.send, ncclFloat, x->comm, x->stream)); break;
        case REDUCE_SCATTER: NCCL_OK(ncclReduceScatter(send, recv, c.recv, ncclFloat, ncclSum, x->comm, x->stream)); break;
        case BROADCAST: NCCL_OK(ncclBroadcast(send, recv, c.send, ncclFloat, 0, x->comm, x->stream)); break;
        }
    }
    NCCL_OK(ncclGroupEnd());
}

static void sync_all(local_t *l, int nlocal) {
    for (int g = 0; g < nlocal; g++) {
        CUDA_OK(cudaSetDevice(l[g].device));
        CUDA_OK(cudaStreamSynchronize(l[g].stream));
    }
}

/* fill every local rank's input (and, in place, the buffer the collective reads) */
static void fill(coll_t coll, local_t *l, int nlocal, counts_t c, int in_place, float *host) {
    for (int g = 0; g < nlocal; g++) {
        local_t *x = &l[g];
        CUDA_OK(cudaSetDevice(x->device));
        size_t n = c.send;
        for (size_t i = 0; i < n; i++) host[i] = value(x->rank, i);
        float *dst = x->send;
        if (in_place && coll == ALL_GATHER) dst = x->recv + (size_t)x->rank * c.send;
        else if (in_place && coll != REDUCE_SCATTER) dst = x->recv;
        CUDA_OK(cudaMemcpy(dst, host, n * sizeof(float), cudaMemcpyHostToDevice));
    }
}

/* wrong elements of every local rank's result */
static uint64_t count_wrong(coll_t coll, local_t *l, int nlocal, counts_t c, int in_place, int nranks, float *host) {
    uint64_t wrong = 0;
    for (int g = 0; g < nlocal; g++) {
        local_t *x = &l[g];
        CUDA_OK(cudaSetDevice(x->device));
        const float *src = x->recv;
        if (in_place && coll == REDUCE_SCATTER) src = x->send + (size_t)x->rank * c.recv;
        CUDA_OK(cudaMemcpy(host, src, c.recv * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < c.recv; i++) {
            float want = 0.0f;
            switch (coll) {
            case ALL_REDUCE:
                for (int r = 0; r < nranks; r++) want += value(r, i);
                break;
            case ALL_GATHER: want = value((int)(i / c.send), i % c.send); break;
            case REDUCE_SCATTER:
                for (int r = 0; r < nranks; r++) want += value(r, (size_t)x->rank * c.recv + i);
                break;
            case BROADCAST: want = value(0, i); break;
            }
            if (host[i] != want) wrong++;
        }
    }
    return wrong;
}

static double reduce_sum_double(double v) {
#ifdef IMAGEBUILD_WITH_MPI
    if (g_mpi) {
        double out = 0;
        if (MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            die(EXIT_CALL, "MPI_Allreduce failed");
        return out;
    }
#endif
    return v;
}

static uint64_t reduce_sum_u64(uint64_t v) {
#ifdef IMAGEBUILD_WITH_MPI
    if (g_mpi) {
        uint64_t out = 0;
        if (MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            die(EXIT_CALL, "MPI_Allreduce failed");
        return out;
    }
#endif
    return v;
}

static void barrier(void) {
#ifdef IMAGEBUILD_WITH_MPI
    if (g_mpi && MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) die(EXIT_CALL, "MPI_Barrier failed");
#endif
}

/* one side (out-of-place or in-place) of one size: (time in seconds, wrong elements) */
static void run_side(const options_t *o, local_t *l, int nlocal, counts_t c, int in_place, int nranks,
                     float *host, double *seconds, uint64_t *wrong) {
    *wrong = 0;
    if (o->check) {
        fill(o->coll, l, nlocal, c, in_place, host);
        launch(o->coll, l, c, in_place, nlocal);
        sync_all(l, nlocal);
        *wrong = reduce_sum_u64(count_wrong(o->coll, l, nlocal, c, in_place, nranks, host));
    }
    for (int i = 0; i < o->warmup; i++) launch(o->coll, l, c, in_place, nlocal);
    sync_all(l, nlocal);
    barrier();
    double t0 = now();
    for (int i = 0; i < o->iters; i++) launch(o->coll, l, c, in_place, nlocal);
    sync_all(l, nlocal);
    double mine = (now() - t0) / o->iters;
    *seconds = reduce_sum_double(mine) / g_nprocs;
}

int main(int argc, char **argv) {
    options_t o = {ALL_REDUCE, 8, 256u << 20, 2, 20, 5, 1, 0};
    parse_args(argc, argv, &o);

    if (launched_by_mpi()) {
#ifdef IMAGEBUILD_WITH_MPI
        if (MPI_Init(&argc, &argv) != MPI_SUCCESS) die(EXIT_CALL, "MPI_Init failed");
        g_mpi = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &g_proc);
        MPI_Comm_size(MPI_COMM_WORLD, &g_nprocs);
        if (o.gpus > 1) die(EXIT_USAGE, "-g %d under an MPI launcher: one GPU per process (start one rank per GPU)", o.gpus);
#else
        die(EXIT_USAGE, "started by an MPI launcher, but built without MPI: run one process, -g GPUS");
#endif
    }

    int visible = 0;
    cudaError_t e = cudaGetDeviceCount(&visible);
    if (e != cudaSuccess || visible == 0)
        die(EXIT_NO_GPU, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    int nlocal = g_mpi ? 1 : (o.gpus ? o.gpus : visible);
    if (nlocal > visible) die(EXIT_USAGE, "-g %d but only %d GPU(s) visible", nlocal, visible);
    if (nlocal > MAX_LOCAL_GPUS) nlocal = MAX_LOCAL_GPUS;
    int nranks = g_nprocs * nlocal;

    ncclUniqueId id;
    if (g_proc == 0) NCCL_OK(ncclGetUniqueId(&id));
#ifdef IMAGEBUILD_WITH_MPI
    if (g_mpi && MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        die(EXIT_CALL, "MPI_Bcast of the NCCL id failed");
#endif

    /* the largest buffers any size needs: the table's size, rounded up to whole elements per rank */
    counts_t biggest = counts_for(o.coll, o.max_bytes, nranks);
    size_t elems = biggest.send > biggest.recv ? biggest.send : biggest.recv;
    float *host = malloc(elems * sizeof(float));
    if (!host) die(EXIT_CALL, "cannot allocate %zu bytes of host memory", elems * sizeof(float));

    local_t l[MAX_LOCAL_GPUS];
    memset(l, 0, sizeof l);
    char hostname[HOST_LEN] = "";
    gethostname(hostname, sizeof hostname - 1);
    NCCL_OK(ncclGroupStart());
    for (int g = 0; g < nlocal; g++) {
        l[g].device = g_mpi ? local_rank() % visible : g;
        l[g].rank = g_proc * nlocal + g;
        CUDA_OK(cudaSetDevice(l[g].device));
        NCCL_OK(ncclCommInitRank(&l[g].comm, nranks, id, l[g].rank));
    }
    NCCL_OK(ncclGroupEnd());
    for (int g = 0; g < nlocal; g++) {
        CUDA_OK(cudaSetDevice(l[g].device));
        CUDA_OK(cudaStreamCreateWithFlags(&l[g].stream, cudaStreamNonBlocking));
        CUDA_OK(cudaMalloc((void **)&l[g].send, elems * sizeof(float)));
        CUDA_OK(cudaMalloc((void **)&l[g].recv, elems * sizeof(float)));
        struct cudaDeviceProp prop;
        CUDA_OK(cudaGetDeviceProperties(&prop, l[g].device));
        char bus[32] = "";
        if (cudaDeviceGetPCIBusId(bus, sizeof bus, l[g].device) != cudaSuccess) strcpy(bus, "?");
        char name[NAME_LEN];
        snprintf(name, sizeof name, "%.*s", NAME_LEN - 1, prop.name);
        snprintf(l[g].line, sizeof l[g].line, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s",
                 l[g].rank, (int)getpid(), hostname, l[g].device, bus, name);
    }

    int nccl_version = 0;
    NCCL_OK(ncclGetVersion(&nccl_version));
    if (g_proc == 0) {
        printf("# imagebuild-nccl-bw %s: nccl-headers=%d nccl-library=%d cudart=%d\n", BENCH_VERSION,
               NCCL_VERSION_CODE, nccl_version, CUDART_VERSION);
        printf("# Collective %s, float, %s; sizes %zu..%zu B by %u; warmup %d, iterations %d, check %d\n",
               COLL_NAMES[o.coll], (o.coll == ALL_REDUCE || o.coll == REDUCE_SCATTER) ? "sum" : "none",
               o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, o.check);
        printf("#\n# Using devices\n");
    }
    /* every rank's device line, printed by process 0 in rank order */
    for (int p = 0; p < g_nprocs; p++) {
        for (int g = 0; g < nlocal; g++) {
            char line[LINE_LEN];
            memcpy(line, l[g].line, sizeof line);
#ifdef IMAGEBUILD_WITH_MPI
            if (g_mpi && p > 0) {
                if (g_proc == p) MPI_Send(line, sizeof line, MPI_CHAR, 0, 7, MPI_COMM_WORLD);
                else if (g_proc == 0) MPI_Recv(line, sizeof line, MPI_CHAR, p, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
#endif
            if (g_proc == 0) printf("%s\n", line);
        }
    }
    if (g_proc == 0) {
        printf("#\n#%87s%48s\n", "out-of-place", "in-place");
        printf("#%11s %13s %9s %7s %7s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        printf("#%11s %13s %9s %7s %7s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "",
               "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }

    uint64_t total_wrong = 0;
    double bus_sum = 0;
    int rows = 0;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
        counts_t c = counts_for(o.coll, bytes, nranks);
        double t[2];
        uint64_t w[2];
        for (int side = 0; side < 2; side++) run_side(&o, l, nlocal, c, side, nranks, host, &t[side], &w[side]);
        size_t shown = c.shown * sizeof(float);
        double alg[2], bus[2];
        for (int side = 0; side < 2; side++) {
            alg[side] = (double)shown / 1e9 / t[side];
            bus[side] = alg[side] * bus_factor(o.coll, nranks);
        }
        total_wrong += w[0] + w[1];
        bus_sum += bus[0];
        rows++;
        if (g_proc == 0) {
            const char *op = (o.coll == ALL_REDUCE || o.coll == REDUCE_SCATTER) ? "sum" : "none";
            int root = o.coll == BROADCAST ? 0 : -1;
            char wrong0[24], wrong1[24];
            if (o.check) {
                snprintf(wrong0, sizeof wrong0, "%" PRIu64, w[0]);
                snprintf(wrong1, sizeof wrong1, "%" PRIu64, w[1]);
            } else {
                strcpy(wrong0, "N/A");
                strcpy(wrong1, "N/A");
            }
            printf(" %11zu %13zu %9s %7s %7d %9.2f %8.2f %8.2f %6s %9.2f %8.2f %8.2f %6s\n", shown,
                   c.shown, "float", op, root, t[0] * 1e6, alg[0], bus[0], wrong0, t[1] * 1e6, alg[1],
                   bus[1], wrong1);
            fflush(stdout);
        }
        if (bytes > o.max_bytes / o.factor) break;   /* the next size would pass -e (or overflow) */
    }
    if (g_proc == 0) {
        printf("# Out of bounds values : %" PRIu64 " %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n#\n", rows ? bus_sum / rows : 0.0);
    }

    for (int g = 0; g < nlocal; g++) {
        CUDA_OK(cudaSetDevice(l[g].device));
        CUDA_OK(cudaFree(l[g].send));
        CUDA_OK(cudaFree(l[g].recv));
        NCCL_OK(ncclCommDestroy(l[g].comm));
    }
    free(host);
    finish(total_wrong ? EXIT_WRONG : 0);
    return 0;
}
