/* All-reduce benchmark in the style of nccl-tests.
 *
 *   st-allreduce-bench -n 2                 fork 2 ranks, one per CPU
 *   shmrun -n 2 -- st-allreduce-bench       ranks from the launcher
 *   mpirun -np 2 --bind-to core st-allreduce-bench-mpi
 *                                           also times MPI_Allreduce in the same
 *                                           processes, size by size
 *
 * First the machine's limits: the one-way time of a cache line between the
 * cores of ranks 0 and 1 (a ping-pong; the floor for any shared-memory
 * collective, every small-message figure is also given as a multiple of
 * it), the copy bandwidth of one core and of every core the ranks hold at
 * once (bytes read + written; each rank copies with its --threads), and
 * how fast a rank reads what a peer core just wrote.
 *
 * Per size, beside the times: the algorithm's counters for one call
 * (synchronisations, bytes read + written per rank, bytes read across
 * NUMA nodes) and the time as a multiple of the call's memory-traffic
 * bound: the bytes every rank's loops read and write, summed over the
 * ranks, over the all-core copy bandwidth (the limit is memory, not a
 * link).  --threads T gives each rank T threads (pinned to T CPUs of its
 * own in fork mode); --algorithm forces one.
 *
 * Then for each size, for the zero-copy path (buffer inside the shared
 * segment), the copying path (ordinary buffer) and MPI_Allreduce: 10
 * warm-up calls, then per iteration the buffer refilled from a pristine
 * copy (untimed; --no-refill keeps what the last call left, the warm-cache
 * figure), a barrier, and one timed call.  Per rank the median, the 99th
 * percentile and the mean over iterations, each averaged over the ranks;
 * busbw = bytes / median * 2(n-1)/n (decimal GB/s).  Every result is checked
 * against the exact sum of the pristine inputs (integer-valued, so exact in
 * any order) once per size and path.
 *
 * --dtype bf16 reduces bfloat16 payloads (summed in fp32, rounded once):
 * sizes are bytes moved, so a size holds twice the elements of fp32 and
 * busbw counts bf16 bytes.  MPI has no bf16 sum, so the MPI column then
 * times MPI_FLOAT over the same element count (twice the bytes): what the
 * same gradients cost through MPI, the exchange a bf16 payload replaces.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <omp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/bf16.h"
#include "shmtrain/clock.h"
#include "shmtrain/coll.h"
#include "shmtrain/env.h"

#include "machine_probes.h"

#ifdef WITH_MPI
#include <mpi.h>
#endif

#define MAX_ITERS 5000

struct options {
    int ranks;          /* fork mode; 0 = from the environment / MPI */
    size_t min_bytes, max_bytes;
    double seconds;     /* target time per size and path */
    bool bind;
    bool csv;
    bool refill;        /* pristine inputs before every call (default) */
    st_dtype dtype;     /* the payload: f32 or bf16 */
    int threads;        /* per rank (0: the library's default) */
    const char *algorithm;  /* forced, or NULL */
};

struct rank_ctx {
    st_group *g;
    int rank, world;
    void *zc, *priv;
    void *pristine;     /* this rank's inputs, copied in before each call */
    double *times;      /* per-iteration seconds */
    st_dtype dtype;
    st_coll_counters one_call;  /* the counters of the size's first call, this rank */
#ifdef WITH_MPI
    float *mpi_buf;     /* f32: MPI sums no bf16 */
#endif
};

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
           "                          [--dtype fp32|bf16] [--threads T] [--algorithm NAME]\n"
           "                          [--no-refill] [--no-bind] [--csv]\n"
           "  -n RANKS     fork RANKS processes (default: join from SHMTRAIN_* env)\n"
           "  --min/--max  message sizes in bytes, doubling (default 4 .. 256M)\n"
           "  --seconds S  time budget per size and path (default 0.15)\n"
           "  --dtype T    the payload: fp32 (default) or bf16 (summed in fp32, rounded once)\n"
           "  --threads T  threads per rank (default: the library's; fork mode pins each\n"
           "               rank to T CPUs of its own)\n"
           "  --algorithm A  force inline, direct, ring, rsag or two-level\n"
           "  --no-refill  time calls on what the last call left (warm cache), not on\n"
           "               inputs copied in before every call\n"
           "  --no-bind    in fork mode, do not pin rank i to CPU i %% ncpu\n"
           "  --csv        machine-readable output\n");
    exit(code);
}

static struct options parse(int argc, char **argv)
{
    struct options o = {.min_bytes = 4, .max_bytes = 256u << 20, .seconds = 0.15, .bind = true, .refill = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(0);
        else if (!strcmp(a, "--no-bind")) o.bind = false;
        else if (!strcmp(a, "--csv")) o.csv = true;
        else if (!strcmp(a, "--no-refill")) o.refill = false;
        else if (v && !strcmp(a, "-n")) o.ranks = atoi(v), i++;
        else if (v && !strcmp(a, "--min")) o.min_bytes = parse_size(a, v), i++;
        else if (v && !strcmp(a, "--max")) o.max_bytes = parse_size(a, v), i++;
        else if (v && !strcmp(a, "--seconds")) o.seconds = atof(v), i++;
        else if (v && !strcmp(a, "--threads")) o.threads = atoi(v), i++;
        else if (v && !strcmp(a, "--algorithm")) o.algorithm = v, i++;
        else if (v && !strcmp(a, "--dtype")) {
            if (!st_dtype_parse(v, &o.dtype)) {
                fprintf(stderr, "st-allreduce-bench: --dtype '%s': use fp32 or bf16\n", v);
                exit(2);
            }
            i++;
        } else {
            fprintf(stderr, "st-allreduce-bench: unknown or incomplete option '%s'\n", a);
            usage(2);
        }
    }
    if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.seconds <= 0 || o.threads < 0 || o.threads > 256) {
        fprintf(stderr, "st-allreduce-bench: need 4 <= --min <= --max, --seconds > 0 and --threads in 0..256\n");
        exit(2);
    }
    return o;
}

/* Small integers: every partial sum is exact, so the result can be checked
 * bit for bit whatever order a library adds in. */
static float fill_value(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 3) % 64);
}

static void fill(void *buf, st_dtype t, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        if (t == ST_DTYPE_BF16)
            ((st_bf16 *)buf)[i] = st_bf16_from_f32(fill_value(i, rank));
        else
            ((float *)buf)[i] = fill_value(i, rank);
}

/* Does buf hold the sum over the ranks of the pristine inputs? */
static bool sum_is_exact(const void *buf, st_dtype t, size_t n, int world)
{
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < world; q++)
            want += fill_value(i, q);
        float got = t == ST_DTYPE_BF16 ? st_bf16_to_f32(((const st_bf16 *)buf)[i]) : ((const float *)buf)[i];
        if (got != (t == ST_DTYPE_BF16 ? st_bf16_to_f32(st_bf16_from_f32(want)) : want))
            return false;
    }
    return true;
}

/* Everyone runs the same number of iterations: rank 0 decides from a probe. */
static int agree_iters(struct rank_ctx *c, double one_op_s, double budget)
{
    float iters = one_op_s > 0 ? (float)(budget / one_op_s) : MAX_ITERS;
    iters = iters < 11 ? 11 : iters > MAX_ITERS ? MAX_ITERS : iters;
    if (st_broadcast(c->g, &iters, sizeof iters, 0) != ST_OK)
        die("broadcast");
    return (int)iters;
}

typedef int (*reduce_fn)(struct rank_ctx *c, void *buf, size_t n);

static int shm_reduce(struct rank_ctx *c, void *buf, size_t n)
{
    return st_allreduce(c->g, buf, n, c->dtype, c->dtype, ST_SUM) == ST_OK ? 0 : -1;
}

#ifdef WITH_MPI
static int mpi_reduce(struct rank_ctx *c, void *buf, size_t n)
{
    (void)c;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}
#endif

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Per-iteration figures of one size and path, averaged over the ranks. */
struct timing {
    double median, p99, mean;
};

static struct timing summarise(struct rank_ctx *c, double *t, int iters)
{
    double sum = 0;
    for (int i = 0; i < iters; i++)
        sum += t[i];
    qsort(t, (size_t)iters, sizeof *t, by_value);
    float v[3] = {(float)t[iters / 2], (float)t[(iters * 99 + 99) / 100 - 1], (float)(sum / iters)};
    if (st_allreduce(c->g, v, 3, ST_DTYPE_F32, ST_DTYPE_F32, ST_AVG) != ST_OK)
        die("reduce timings");
    return (struct timing){v[0], v[1], v[2]};
}

static void load_inputs(struct rank_ctx *c, void *buf, size_t bytes)
{
    memcpy(buf, c->pristine, bytes);
}

static struct timing time_op(struct rank_ctx *c, reduce_fn fn, void *buf, st_dtype t, size_t n, const struct options *o)
{
    const size_t bytes = n * (t == ST_DTYPE_BF16 ? sizeof(st_bf16) : sizeof(float));
    fill(c->pristine, t, n, c->rank);
    load_inputs(c, buf, bytes);
    if (st_barrier(c->g) != ST_OK)
        die("barrier");
    st_coll_counters before;
    st_group_counters(c->g, &before);
    if (fn(c, buf, n) != 0)
        die("first call");
    st_group_counters(c->g, &c->one_call);
    c->one_call.syncs -= before.syncs;
    c->one_call.bytes_read -= before.bytes_read;
    c->one_call.bytes_written -= before.bytes_written;
    c->one_call.peer_bytes_read -= before.peer_bytes_read;
    c->one_call.remote_numa_bytes_read -= before.remote_numa_bytes_read;
    if (!sum_is_exact(buf, t, n, c->world)) {
        fprintf(stderr, "st-allreduce-bench: rank %d: wrong sum at %zu bytes\n", c->rank, bytes);
        exit(1);
    }
    for (int i = 0; i < 9; i++)
        if (fn(c, buf, n) != 0)
            die("warm-up");
    double t0 = st_now_s();
    if (fn(c, buf, n) != 0)
        die("probe");
    int iters = agree_iters(c, st_now_s() - t0, o->seconds);
    for (int it = 0; it < iters; it++) {
        if (o->refill)
            load_inputs(c, buf, bytes);
        if (st_barrier(c->g) != ST_OK)
            die("barrier");
        double start = st_now_s();
        if (fn(c, buf, n) != 0)
            die("all-reduce");
        c->times[it] = st_now_s() - start;
    }
    return summarise(c, c->times, iters);
}

/* The size's one call, summed over the ranks: bytes read + written, and
 * the mean per rank of the synchronisations, bytes and cross-node bytes. */
struct structure {
    double traffic, syncs, per_rank_mb, remote_mb;
};

static struct structure structure_of(struct rank_ctx *c)
{
    const st_coll_counters *k = &c->one_call;
    float v[3] = {(float)(k->bytes_read + k->bytes_written), (float)k->syncs, (float)k->remote_numa_bytes_read};
    if (st_allreduce(c->g, v, 3, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) != ST_OK)
        die("reduce counters");
    return (struct structure){v[0], v[1] / c->world, v[0] / c->world / 1e6, v[2] / c->world / 1e6};
}

struct probes {
    double oneway_ns, core_gbs, all_gbs, cross_gbs;
};

static void print_header(const struct rank_ctx *c, const struct options *o, const struct probes *p)
{
    const int threads = st_group_threads(c->g), levels = st_group_levels(c->g);
    if (o->csv) {
        printf("# world=%d threads=%d levels=%d dtype=%s refill=%d oneway_ns=%.1f copy_GBps=%.2f core_copy_GBps=%.2f "
               "cross_read_GBps=%.2f\n", c->world, threads, levels, st_dtype_name(c->dtype), o->refill, p->oneway_ns,
               p->all_gbs, p->core_gbs, p->cross_gbs);
        printf("bytes,algorithm,zc_us,zc_p99_us,zc_mean_us,zc_busbw,zc_floors,copy_us,copy_p99_us");
#ifdef WITH_MPI
        printf(",mpi_us,mpi_p99_us,mpi_mean_us,mpi_over_zc");
#endif
        printf(",copy_algorithm,zc_syncs,zc_mb_per_rank,zc_remote_mb,zc_x_bound,copy_syncs,copy_mb_per_rank,"
               "copy_x_bound,copy_busbw\n");
        return;
    }
    printf("# shmtrain all-reduce, %d ranks x %d threads, %d NUMA level(s), %s payload, %s\n"
           "# one-way cache-line time between the cores of ranks 0 and 1: %.1f ns (\"floors\": the median in those)\n"
           "# copy bandwidth (read+write): one core %.2f GB/s, every rank's threads at once %.2f GB/s;\n"
           "#   reading 1 MiB a peer core just wrote: %.2f GB/s per rank\n"
           "# times in us, per rank then averaged over ranks: median, 99th percentile, mean; per call:\n"
           "#   syncs and MB read+written per rank (counters),\n"
           "#   x bound = median / (all ranks' bytes / all-core copy bw)\n",
           c->world, threads, levels, st_dtype_name(c->dtype),
           o->refill ? "inputs refilled before every call" : "warm cache (--no-refill)", p->oneway_ns, p->core_gbs,
           p->all_gbs, p->cross_gbs);
    printf("%10s %10s %8s %8s %8s %7s %5s %7s %6s %10s %8s %5s %7s %6s", "bytes", "algo", "zc med", "p99", "busbw",
           "floors", "syncs", "MB/rank", "xbound", "copy algo", "copy med", "syncs", "MB/rank", "xbound");
#ifdef WITH_MPI
    printf(" %8s %8s %7s", "mpi med", "p99", "mpi/zc");
#endif
    printf("\n");
}

static struct probes probe(struct rank_ctx *c, const struct options *o)
{
    struct probes p;
    p.oneway_ns = probe_oneway_ns(c->g, c->zc);
    p.core_gbs = probe_copy_gbs(c->g, 64u << 20, true);
    p.all_gbs = probe_copy_gbs(c->g, 64u << 20, false);
    p.cross_gbs = probe_cross_read_gbs(c->g, c->zc, o->max_bytes < (1u << 20) ? o->max_bytes : (1u << 20));
    if (p.oneway_ns < 0 || p.core_gbs < 0 || p.all_gbs < 0 || p.cross_gbs < 0)
        die("probing the machine");
    return p;
}

/* One size's figures: each path's timing and structure, and MPI's. */
struct row {
    size_t bytes;
    struct timing zc, cp, mp;
    struct structure zs, cs;
};

static void print_row(const struct rank_ctx *c, const struct options *o, const struct probes *pr, const struct row *r)
{
    const double bus = c->world > 1 ? 2.0 * (c->world - 1) / c->world : 1.0, bw = pr->all_gbs * 1e9;
    const char *algo = st_allreduce_algorithm(c->g, c->zc, r->bytes / st_dtype_size(c->dtype), c->dtype);
    const char *copy_algo = st_allreduce_algorithm(c->g, c->priv, r->bytes / st_dtype_size(c->dtype), c->dtype);
    const double busbw = r->bytes / r->zc.median / 1e9 * bus;
    const double floors = pr->oneway_ns > 0 ? r->zc.median * 1e9 / pr->oneway_ns : 0;
    const double zx = r->zc.median / (r->zs.traffic / bw), cx = r->cp.median / (r->cs.traffic / bw);
    if (o->csv) {
        printf("%zu,%s,%.3f,%.3f,%.3f,%.3f,%.2f,%.3f,%.3f", r->bytes, algo, r->zc.median * 1e6, r->zc.p99 * 1e6,
               r->zc.mean * 1e6, busbw, floors, r->cp.median * 1e6, r->cp.p99 * 1e6);
#ifdef WITH_MPI
        printf(",%.3f,%.3f,%.3f,%.3f", r->mp.median * 1e6, r->mp.p99 * 1e6, r->mp.mean * 1e6,
               r->mp.median / r->zc.median);
#endif
        printf(",%s,%.1f,%.4f,%.4f,%.3f,%.1f,%.4f,%.3f,%.3f\n", copy_algo, r->zs.syncs, r->zs.per_rank_mb,
               r->zs.remote_mb, zx, r->cs.syncs, r->cs.per_rank_mb, cx, r->bytes / r->cp.median / 1e9 * bus);
        return;
    }
    printf("%10zu %10s %8.3f %8.3f %8.3f %7.2f %5.0f %7.3f %6.2f %10s %8.3f %5.0f %7.3f %6.2f", r->bytes, algo,
           r->zc.median * 1e6, r->zc.p99 * 1e6, busbw, floors, r->zs.syncs, r->zs.per_rank_mb, zx, copy_algo,
           r->cp.median * 1e6, r->cs.syncs, r->cs.per_rank_mb, cx);
#ifdef WITH_MPI
    printf(" %8.3f %8.3f %7.2f", r->mp.median * 1e6, r->mp.p99 * 1e6, r->mp.median / r->zc.median);
#endif
    printf("\n");
}

static void run(struct rank_ctx *c, const struct options *o)
{
    const struct probes pr = probe(c, o);
    if (c->rank == 0)
        print_header(c, o, &pr);
    const size_t elem = st_dtype_size(c->dtype);
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
        const size_t n = bytes / elem;
        struct row r = {.bytes = bytes};
        r.zc = time_op(c, shm_reduce, c->zc, c->dtype, n, o);
        r.zs = structure_of(c);
        r.cp = time_op(c, shm_reduce, c->priv, c->dtype, n, o);
        r.cs = structure_of(c);
#ifdef WITH_MPI
        r.mp = time_op(c, mpi_reduce, c->mpi_buf, ST_DTYPE_F32, n, o);
#endif
        if (c->rank == 0)
            print_row(c, o, &pr, &r);
        fflush(stdout);
    }
}

static void rank_main(int rank, int world, const char *job, const struct options *o)
{
    struct rank_ctx c = {.rank = rank, .world = world, .dtype = o->dtype};
    st_group_config cfg = {.rank = rank, .world_size = world, .job_id = job,
                           .zero_copy_bytes = o->max_bytes, .threads = o->threads, .algorithm = o->algorithm};
    if (o->threads > 0)
        omp_set_num_threads(o->threads);
    if (st_group_tuning_from_env(&cfg) != ST_OK || st_group_create(&c.g, &cfg) != ST_OK)
        die("join");
    c.zc = st_group_buffer(c.g, NULL);
    c.priv = malloc(o->max_bytes);
    c.pristine = malloc(o->max_bytes * 2);  /* bf16's elements as MPI's f32 */
    c.times = malloc(MAX_ITERS * sizeof *c.times);
    if (!c.pristine || !c.times)
        die("malloc");
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
    free(c.pristine);
    free(c.times);
#ifdef WITH_MPI
    free(c.mpi_buf);
#endif
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
        const char *job = st_env_text(ST_ENV_JOB_ID);
        int rank = -1, world = 0;
        if (!job || !st_env_int(ST_ENV_RANK, 0, &rank) || !st_env_int(ST_ENV_WORLD_SIZE, 1, &world) || rank < 0 ||
            world < 1) {
            fprintf(stderr, "st-allreduce-bench: give -n RANKS or run under shmrun\n");
            return 2;
        }
        rank_main(rank, world, job, &o);
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
                const int per = o.threads > 0 ? o.threads : 1;
                cpu_set_t set;
                CPU_ZERO(&set);
                for (int t = 0; t < per; t++)
                    CPU_SET((r * per + t) % ncpu, &set);
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
