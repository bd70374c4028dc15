/* The machine's limits (machine_probes.h). */
#include "machine_probes.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/clock.h"

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rank 0 stores, rank 1 answers, ROUNDS times a batch; the median batch's
 * round trip halved, so one slow batch (a preemption) does not count. */
static float oneway_median_ns(int rank, _Atomic uint64_t *mine, const _Atomic uint64_t *theirs)
{
    enum { ROUNDS = 2000, BATCHES = 51 };
    double t[BATCHES];
    uint64_t round = 0;
    for (int b = 0; b < BATCHES; b++) {
        double t0 = st_now_s();
        for (int i = 0; i < ROUNDS; i++) {
            round++;
            if (rank == 0)
                atomic_store_explicit(mine, round, memory_order_release);
            while (atomic_load_explicit(theirs, memory_order_acquire) != round)
                ;
            if (rank == 1)
                atomic_store_explicit(mine, round, memory_order_release);
        }
        t[b] = (st_now_s() - t0) / ROUNDS / 2;
    }
    qsort(t, BATCHES, sizeof *t, by_value);
    return (float)(t[BATCHES / 2] * 1e9);
}

double probe_oneway_ns(st_group *g, void *mine)
{
    const int rank = st_group_rank(g);
    float ns = 0;
    if (st_group_size(g) >= 2 && mine && rank < 2) {
        const _Atomic uint64_t *theirs = st_group_peer_buffer(g, rank ^ 1);
        ns = theirs ? oneway_median_ns(rank, mine, theirs) : -1;  /* said after the broadcast: no peer left waiting */
        *(_Atomic uint64_t *)mine = 0;
    }
    return st_broadcast(g, &ns, sizeof ns, 0) == ST_OK ? ns : -1;
}

double probe_copy_gbs(st_group *g, size_t per_thread, bool alone)
{
    const int threads = alone ? 1 : omp_get_max_threads();
    const bool active = !alone || st_group_rank(g) == 0;
    const size_t part = per_thread, bytes = part * (size_t)threads;
    char *a = malloc(bytes), *b = malloc(bytes);
    const bool have = a && b;  /* a rank without its buffers still meets the others, then says so */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < (have ? threads : 0); t++) {  /* first touched by the thread that copies it */
        memset(a + part * (size_t)t, 1, part);
        memset(b + part * (size_t)t, 2, part);
    }
    float gbs = -1e30f;
    if (st_barrier(g) == ST_OK) {
        const int reps = 10;
        double t0 = st_now_s();
        for (int i = 0; have && active && i < reps; i++) {
#pragma omp parallel for num_threads(threads) schedule(static)
            for (int t = 0; t < threads; t++)
                memcpy((i % 2 ? a : b) + part * (size_t)t, (i % 2 ? b : a) + part * (size_t)t, part);
        }
        gbs = !have ? -1e30f : active ? (float)(2.0 * (double)bytes * reps / (st_now_s() - t0) / 1e9) : 0;
    }
    free(a);
    free(b);
    if (st_allreduce(g, &gbs, 1, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) != ST_OK || gbs < 0)
        return -1;
    return gbs;
}

/* The best of 20 tries: the ceiling, not the typical case. */
double probe_cross_read_gbs(st_group *g, void *mine, size_t bytes)
{
    const int rank = st_group_rank(g), world = st_group_size(g), left = (rank + world - 1) % world;
    const size_t n = bytes / sizeof(float);
    double best = 0;
    if (world < 2)
        return 0;
    const float *theirs = st_group_peer_buffer(g, left);
    for (int rep = 0; rep < 20 && theirs && mine; rep++) {
        for (size_t i = 0; i < n; i++)
            ((float *)mine)[i] = (float)((i * 7 + (size_t)(rank + rep) * 3) % 64);
        if (st_barrier(g) != ST_OK)
            return -1;
        double t0 = st_now_s();
        float acc = 0;
        for (size_t i = 0; i < n; i++)
            acc += theirs[i];
        double t = st_now_s() - t0;
        __asm__ volatile("" : : "r"(acc));  /* the sum is the point: keep it */
        if (st_barrier(g) != ST_OK)
            return -1;
        best = (double)bytes / t / 1e9 > best ? (double)bytes / t / 1e9 : best;
    }
    float v = (float)best;
    if (st_allreduce(g, &v, 1, ST_DTYPE_F32, ST_DTYPE_F32, ST_AVG) != ST_OK)
        return -1;
    return v;
}
