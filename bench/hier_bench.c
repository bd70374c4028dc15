/* The all-reduce across (simulated) nodes, three ways in the same
 * processes, size by size:
 *
 *   hier       st_hallreduce:     shared memory in the node, MPI across
 *   flat-shm   one shared-memory group of every rank (possible here, where
 *              the "nodes" share a machine; the reference for what the
 *              MPI stage costs)
 *   flat-mpi   MPI_Allreduce over MPI_COMM_WORLD
 *
 *   mpirun -np 4 -x SHMTRAIN_NODE_SIZE=2 st-hier-bench [--min B] [--max B] [--seconds S] [--csv]
 *
 * Time per op: the mean over ranks of the mean over iterations, each op
 * after an MPI barrier; busbw = bytes * 2(n-1)/n / time (nccl-tests). */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmtrain/coll_mpi.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct ways {
    st_hgroup *h;
    st_group *flat;
};

enum { HIER, FLAT_SHM, FLAT_MPI, NWAYS };
static const char *const NAMES[NWAYS] = {"hier", "flat-shm", "flat-mpi"};

static int reduce(struct ways *w, int way, float *buf, size_t n)
{
    switch (way) {
    case HIER: return st_hallreduce(w->h, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK ? 0 : -1;
    case FLAT_SHM: return st_allreduce(w->flat, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK ? 0 : -1;
    default: return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    }
}

/* Mean seconds per op over ranks; the iteration count is rank 0's. */
static double time_way(struct ways *w, int way, float *buf, size_t n, double budget)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = 1.0f;
    MPI_Barrier(MPI_COMM_WORLD);
    if (reduce(w, way, buf, n) != 0)  /* warm */
        MPI_Abort(MPI_COMM_WORLD, 3);
    double t0 = now_s();
    int iters = 0, go = 1;
    double spent = 0;
    while (go) {
        MPI_Barrier(MPI_COMM_WORLD);
        double a = now_s();
        if (reduce(w, way, buf, n) != 0)
            MPI_Abort(MPI_COMM_WORLD, 3);
        spent += now_s() - a;
        iters++;
        go = now_s() - t0 < budget && iters < 100000;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    double mine = spent / iters, sum = 0;
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / world;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    size_t min = 4, max = 64u << 20;
    double seconds = 0.2;
    bool csv = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min") && i + 1 < argc) min = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--csv")) csv = true;
        else {
            fprintf(stderr, "st-hier-bench: unknown argument '%s'\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    struct ways w = {0};
    if (st_hgroup_create(&w.h, NULL) != ST_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, st_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char job[96];  /* every rank's: rank 0's node job id, with ".flat" */
    snprintf(job, sizeof job, "%s.flat", st_group_job_id(st_hgroup_local(w.h)));
    MPI_Bcast(job, sizeof job, MPI_CHAR, 0, MPI_COMM_WORLD);
    st_group_config fc = {.rank = rank, .world_size = world, .job_id = job};
    if (st_group_create(&w.flat, &fc) != ST_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, st_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    float *buf = malloc(max);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0) {
        printf("# %d ranks, %d nodes of %d (st-hier-bench)\n", world, st_hgroup_nodes(w.h),
               world / st_hgroup_nodes(w.h));
        printf(csv ? "bytes,hier_us,hier_busbw,flat_shm_us,flat_shm_busbw,flat_mpi_us,flat_mpi_busbw\n"
                   : "%12s %10s %8s %10s %8s %10s %8s   (us, busbw GB/s)\n",
               "bytes", NAMES[0], "busbw", NAMES[1], "busbw", NAMES[2], "busbw");
    }
    for (size_t bytes = min; bytes <= max; bytes *= 2) {
        size_t n = bytes / sizeof(float);
        double t[NWAYS];
        for (int way = 0; way < NWAYS; way++)
            t[way] = time_way(&w, way, buf, n, seconds);
        if (rank != 0)
            continue;
        double f = (double)bytes * 2.0 * (world - 1) / world / 1e9;
        if (csv)
            printf("%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", bytes, t[0] * 1e6, f / t[0], t[1] * 1e6, f / t[1],
                   t[2] * 1e6, f / t[2]);
        else
            printf("%12zu %10.2f %8.2f %10.2f %8.2f %10.2f %8.2f\n", bytes, t[0] * 1e6, f / t[0], t[1] * 1e6,
                   f / t[1], t[2] * 1e6, f / t[2]);
        fflush(stdout);
    }
    free(buf);
    st_group_destroy(w.flat);
    st_hgroup_destroy(w.h);
    MPI_Finalize();
    return 0;
}
