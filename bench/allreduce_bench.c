/* All-reduce benchmark in the style of nccl-tests.
 *
 *   st-allreduce-bench -n 2                 fork 2 ranks, one per CPU
 *   shmrun -n 2 -- st-allreduce-bench       ranks from the launcher
 *   mpirun -np 2 --bind-to core st-allreduce-bench-mpi
 *                                           also times MPI_Allreduce in the same
 *                                           processes, size by size
 *
 * For each size: time per op (mean over ranks of the mean over iterations),
 * algbw = bytes / time and busbw = algbw * 2(n-1)/n (decimal GB/s), for the
 * zero-copy path (buffer inside the shared segment) and the copying path
 * (ordinary buffer).  The data changes every iteration, and every op starts
 * from a barrier so ranks start together.  A memcpy probe (bytes read +
 * written, all ranks at once) gives the machine's copy bandwidth beside it.
 *
 * --dtype bf16 reduces bfloat16 payloads (summed in fp32, rounded once):
 * sizes are bytes moved, so a size holds twice the elements of fp32 and
 * busbw counts bf16 bytes.  MPI has no bf16 sum, so the MPI column then
 * times MPI_FLOAT over the same element count (twice the bytes): what the
 * same gradients cost through MPI, the exchange a bf16 payload replaces.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/bf16.h"
#include "shmtrain/coll.h"

#ifdef WITH_MPI
#include <mpi.h>
#endif

struct options {
    int ranks;          /* fork mode; 0 = from the environment / MPI */
    size_t min_bytes, max_bytes;
    double seconds;     /* target time per size and path */
    bool bind;
    bool csv;
    st_dtype dtype;     /* the payload: f32 or bf16 */
};

struct rank_ctx {
    st_group *g;
    int rank, world;
    void *zc, *priv;
    st_dtype dtype;
#ifdef WITH_MPI
    float *mpi_buf;     /* f32: MPI sums no bf16 */
#endif
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "st-allreduce-bench: %s: %s\n", what, st_last_error());
    exit(1);
}

static size_t parse_size(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    size_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1u << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1u << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1u << 30, end++;
    if (errno || *end || !(v > 0)) {
        fprintf(stderr, "st-allreduce-bench: %s: '%s' is not a size (e.g. 4, 64K, 256M)\n", flag, s);
        exit(2);
    }
    return (size_t)(v * (double)mul);
}

static void usage(int code)
{
    printf("usage: st-allreduce-bench [-n RANKS] [--min SIZE] [--max SIZE] [--seconds S]\n"
           "                          [--dtype f32|bf16] [--no-bind] [--csv]\n"
           "  -n RANKS     fork RANKS processes (default: join from SHMTRAIN_* env)\n"
           "  --min/--max  message sizes in bytes, doubling (default 4 .. 256M)\n"
           "  --seconds S  time budget per size and path (default 0.15)\n"
           "  --dtype T    the payload: f32 (default) or bf16 (summed in fp32, rounded once)\n"
           "  --no-bind    in fork mode, do not pin rank i to CPU i %% ncpu\n"
           "  --csv        machine-readable output\n");
    exit(code);
}

static struct options parse(int argc, char **argv)
{
    struct options o = {.min_bytes = 4, .max_bytes = 256u << 20, .seconds = 0.15, .bind = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(0);
        else if (!strcmp(a, "--no-bind")) o.bind = false;
        else if (!strcmp(a, "--csv")) o.csv = true;
        else if (v && !strcmp(a, "-n")) o.ranks = atoi(v), i++;
        else if (v && !strcmp(a, "--min")) o.min_bytes = parse_size(a, v), i++;
        else if (v && !strcmp(a, "--max")) o.max_bytes = parse_size(a, v), i++;
        else if (v && !strcmp(a, "--seconds")) o.seconds = atof(v), i++;
        else if (v && !strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32") || !strcmp(v, "fp32")) o.dtype = ST_DTYPE_F32;
            else if (!strcmp(v, "bf16")) o.dtype = ST_DTYPE_BF16;
            else {
                fprintf(stderr, "st-allreduce-bench: --dtype '%s': use f32 or bf16\n", v);
                exit(2);
            }
            i++;
        } else {
            fprintf(stderr, "st-allreduce-bench: unknown or incomplete option '%s'\n", a);
            usage(2);
        }
    }
    if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.seconds <= 0) {
        fprintf(stderr, "st-allreduce-bench: need 4 <= --min <= --max and --seconds > 0\n");
        exit(2);
    }
    return o;
}

static float fill_value(size_t i, int rank, int iter)
{
    return (float)((i + (size_t)rank * 3 + (size_t)iter * 7) & 1023) * 0.25f;
}

static void fill(void *buf, st_dtype t, size_t n, int rank, int iter)
{
    for (size_t i = 0; i < n; i++)
        if (t == ST_DTYPE_BF16)
            ((st_bf16 *)buf)[i] = st_bf16_from_f32(fill_value(i, rank, iter));
        else
            ((float *)buf)[i] = fill_value(i, rank, iter);
}

/* Everyone runs the same number of iterations: rank 0 decides from a probe. */
static int agree_iters(struct rank_ctx *c, double one_op_s, double budget)
{
    float iters = one_op_s > 0 ? (float)(budget / one_op_s) : 1000.0f;
    iters = iters < 3 ? 3 : iters > 2000 ? 2000 : iters;
    if (st_broadcast(c->g, &iters, sizeof iters, 0) != ST_OK)
        die("broadcast");
    return (int)iters;
}

typedef int (*reduce_fn)(struct rank_ctx *c, void *buf, size_t n);

static int shm_reduce(struct rank_ctx *c, void *buf, size_t n)
{
    return st_allreduce(c->g, buf, n, c->dtype, ST_SUM) == ST_OK ? 0 : -1;
}

#ifdef WITH_MPI
static int mpi_reduce(struct rank_ctx *c, void *buf, size_t n)
{
    (void)c;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}
#endif

/* Mean seconds per op over `n` elements of type t, averaged over ranks. */
static double time_op(struct rank_ctx *c, reduce_fn fn, void *buf, st_dtype t, size_t n, double budget)
{
    fill(buf, t, n, c->rank, 0);
    if (st_barrier(c->g) != ST_OK || fn(c, buf, n) != 0)
        die("warm-up");
    double t0 = now_s();
    if (fn(c, buf, n) != 0)
        die("probe");
    int iters = agree_iters(c, now_s() - t0, budget);
    double total = 0;
    for (int it = 0; it < iters; it++) {
        fill(buf, t, n < 64 ? n : 64, c->rank, it + 1); /* cheap change every iteration */
        if (n >= 64 && it % 8 == 0)
            fill(buf, t, n, c->rank, it + 1);            /* and a full rewrite now and then */
        if (st_barrier(c->g) != ST_OK)
            die("barrier");
        double start = now_s();
        if (fn(c, buf, n) != 0)
            die("all-reduce");
        total += now_s() - start;
    }
    float mean = (float)(total / iters);
    if (st_allreduce_f32(c->g, &mean, 1, ST_AVG) != ST_OK)
        die("reduce timings");
    return mean;
}

/* Copy bandwidth, all ranks at once, counting bytes read + written. */
static double copy_probe(struct rank_ctx *c, size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b)
        die("malloc");
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    if (st_barrier(c->g) != ST_OK)
        die("barrier");
    double t0 = now_s();
    int reps = 10;
    for (int i = 0; i < reps; i++)
        memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
    float gbs = (float)(2.0 * (double)bytes * reps / (now_s() - t0) / 1e9);
    free(a);
    free(b);
    if (st_allreduce_f32(c->g, &gbs, 1, ST_SUM) != ST_OK)
        die("reduce bandwidth");
    return gbs;
}

/* How fast one rank reads what another rank's core has just written: the
 * ceiling for any shared-memory all-reduce whose data sits in cache.  Each
 * rank in turn writes `bytes` of its zero-copy region; its right neighbour
 * then sums them. */
static double cross_read_probe(struct rank_ctx *c, size_t bytes)
{
    const size_t n = bytes / sizeof(float);
    const int left = (c->rank + c->world - 1) % c->world;
    double best = 0;
    if (c->world < 2)
        return 0;
    for (int rep = 0; rep < 20; rep++) {
        fill(c->zc, ST_DTYPE_F32, n, c->rank, rep);
        if (st_barrier(c->g) != ST_OK)
            die("barrier");
        const float *theirs = st_group_peer_buffer(c->g, left);
        if (!theirs)
            return 0;
        double t0 = now_s();
        float acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += theirs[i];
        double t = now_s() - t0;
        if (acc == -1.0f)
            printf("#");
        if (st_barrier(c->g) != ST_OK)
            die("barrier");
        double gbs = (double)bytes / t / 1e9;
        best = gbs > best ? gbs : best;
    }
    float v = (float)best;
    if (st_allreduce_f32(c->g, &v, 1, ST_AVG) != ST_OK)
        die("reduce bandwidth");
    return v;
}

static void run(struct rank_ctx *c, const struct options *o)
{
    const double bus = c->world > 1 ? 2.0 * (c->world - 1) / c->world : 1.0;
    const bool head = c->rank == 0;
    double copy_gbs = copy_probe(c, 64u << 20);
    size_t probe_bytes = o->max_bytes < (1u << 20) ? o->max_bytes : (1u << 20);
    double cross_gbs = cross_read_probe(c, probe_bytes);
    if (head) {
        printf(o->csv ? "# world=%d dtype=%s copy_GBps=%.2f cross_read_GBps=%.2f\n"
                      : "# shmtrain all-reduce, %d ranks, %s payload; memcpy bandwidth (read+write, all ranks): "
                        "%.2f GB/s; reading 1 MiB a peer core just wrote: %.2f GB/s per rank\n",
               c->world, st_dtype_name(c->dtype), copy_gbs, cross_gbs);
        if (o->csv) {
            printf("bytes,algorithm,zc_us,zc_algbw,zc_busbw,copy_us,copy_busbw");
#ifdef WITH_MPI
            printf(",mpi_us,mpi_busbw,mpi_over_zc");
#endif
            printf("\n");
        } else {
            printf("%12s %9s %11s %9s %9s %11s %9s", "bytes", "algo", "zc time/us", "algbw", "busbw",
                   "copy us", "busbw");
#ifdef WITH_MPI
            printf(" %11s %9s %8s", "mpi us", "busbw", "mpi/zc");
#endif
            printf("\n");
        }
    }
    const size_t elem = c->dtype == ST_DTYPE_BF16 ? sizeof(st_bf16) : sizeof(float);
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
        size_t n = bytes / elem;
        double zc = time_op(c, shm_reduce, c->zc, c->dtype, n, o->seconds);
        double cp = time_op(c, shm_reduce, c->priv, c->dtype, n, o->seconds);
#ifdef WITH_MPI
        double mp = time_op(c, mpi_reduce, c->mpi_buf, ST_DTYPE_F32, n, o->seconds);
        const double mpi_bytes = (double)n * sizeof(float);
#endif
        if (!head)
            continue;
        double alg = bytes / zc / 1e9;
        const char *algo = st_allreduce_algorithm(c->g, c->zc, n, c->dtype);
        if (o->csv) {
            printf("%zu,%s,%.3f,%.3f,%.3f,%.3f,%.3f", bytes, algo, zc * 1e6, alg, alg * bus,
                   cp * 1e6, bytes / cp / 1e9 * bus);
#ifdef WITH_MPI
            printf(",%.3f,%.3f,%.2f", mp * 1e6, mpi_bytes / mp / 1e9 * bus, mp / zc);
#endif
        } else {
            printf("%12zu %9s %11.2f %9.3f %9.3f %11.2f %9.3f", bytes, algo, zc * 1e6, alg, alg * bus,
                   cp * 1e6, bytes / cp / 1e9 * bus);
#ifdef WITH_MPI
            printf(" %11.2f %9.3f %8.2f", mp * 1e6, mpi_bytes / mp / 1e9 * bus, mp / zc);
#endif
        }
        printf("\n");
        fflush(stdout);
    }
}

static void rank_main(int rank, int world, const char *job, const struct options *o)
{
    struct rank_ctx c = {.rank = rank, .world = world, .dtype = o->dtype};
    st_group_config cfg = {.rank = rank, .world_size = world, .job_id = job,
                           .zero_copy_bytes = o->max_bytes};
    if (st_group_create(&c.g, &cfg) != ST_OK)
        die("join");
    c.zc = st_group_buffer(c.g, NULL);
    c.priv = malloc(o->max_bytes);
#ifdef WITH_MPI
    c.mpi_buf = malloc(o->max_bytes * (o->dtype == ST_DTYPE_BF16 ? 2 : 1)); /* the same elements in f32 */
    if (!c.mpi_buf)
        die("malloc");
#endif
    if (!c.priv)
        die("malloc");
    run(&c, o);
    st_barrier(c.g);
    st_group_destroy(c.g);
    free(c.priv);
}

#ifdef WITH_MPI
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct options o = parse(argc, argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int tag = (int)getpid();
    MPI_Bcast(&tag, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char job[64];
    snprintf(job, sizeof job, "mpibench-%d", tag);
    rank_main(rank, world, job, &o);
    MPI_Finalize();
    return 0;
}
#else
int main(int argc, char **argv)
{
    struct options o = parse(argc, argv);
    if (o.ranks <= 0) {
        const char *job = getenv("SHMTRAIN_JOB_ID");
        const char *r = getenv("SHMTRAIN_RANK"), *w = getenv("SHMTRAIN_WORLD_SIZE");
        if (!job || !r || !w) {
            fprintf(stderr, "st-allreduce-bench: give -n RANKS or run under shmrun\n");
            return 2;
        }
        rank_main(atoi(r), atoi(w), job, &o);
        return 0;
    }
    char job[64];
    snprintf(job, sizeof job, "bench-%d", (int)getpid());
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pid_t pids[256];
    fflush(NULL);
    for (int r = 0; r < o.ranks && r < 256; r++) {
        if ((pids[r] = fork()) == 0) {
            if (o.bind && ncpu > 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(r % ncpu, &set);
                if (sched_setaffinity(0, sizeof set, &set) != 0)
                    perror("st-allreduce-bench: sched_setaffinity");
            }
            rank_main(r, o.ranks, job, &o);
            fflush(NULL);
            _exit(0);
        }
    }
    int bad = 0;
    for (int r = 0; r < o.ranks && r < 256; r++) {
        int status;
        waitpid(pids[r], &status, 0);
        bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    st_segment_cleanup(job, o.ranks);
    return bad ? 1 : 0;
}
#endif
