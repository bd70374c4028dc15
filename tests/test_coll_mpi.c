/* The hierarchical all-reduce across (simulated) nodes, run by mpirun:
 * results against the serial reference at every size class (direct, ring,
 * ring through staging, zero-copy), both ops, every rank bitwise equal to
 * rank 0; broadcast from every root; barrier.  A plain MPI program (CMocka
 * does not run under mpirun): rank 0 prints "N passed, M failed" and every
 * rank exits non-zero on a failure. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/bf16.h"
#include "shmtrain/coll_mpi.h"

static int passed, failed;

static void check(int ok, const char *what, int rank)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all)
        passed++;
    else
        failed++;
    if (!ok)
        fprintf(stderr, "rank %d: FAILED: %s\n", rank, what);
}

/* Integer values: every partial sum exact, whatever the order. */
static float input_value(int rank, size_t i, int round) { return (float)((int)((i * 7 + (size_t)rank * 13 + (size_t)round * 5) % 17) - 8); }

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int reduce_case(st_hgroup *h, float *buf, size_t n, st_reduce_op op, int round)
{
    const int rank = st_hgroup_rank(h), world = st_hgroup_size(h);
    for (size_t i = 0; i < n; i++)
        buf[i] = input_value(rank, i, round);
    if (st_hallreduce(h, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, op) != ST_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, st_last_error());
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < world; q++)
            want += input_value(q, i, round);
        if (op == ST_AVG)
            want /= (float)world;
        if (buf[i] != want) {
            fprintf(stderr, "rank %d n=%zu op=%d: [%zu] = %g, want %g\n", rank, n, (int)op, i, buf[i], want);
            return 0;
        }
    }
    uint64_t mine = fnv(buf, n * sizeof(float)), root = mine;
    MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return mine == root;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const size_t staging = 64u << 10, zc = (1u << 20) + 3;
    st_group_config cfg = {.staging_bytes = staging, .chunk_bytes = 4u << 10, .zero_copy_bytes = zc * sizeof(float),
                           .timeout_s = 60};
    st_hgroup *h = NULL;
    if (st_hgroup_create(&h, &cfg) != ST_OK) {
        fprintf(stderr, "rank %d: join failed: %s\n", rank, st_last_error());
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("%d ranks on %d nodes\n", st_hgroup_size(h), st_hgroup_nodes(h));
    const size_t sizes[] = {0, 1, 7, 1000, 4097, 100003, (1u << 20) + 3, staging / sizeof(float) * 5 / 2 + 3};
    size_t most = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        most = sizes[s] > most ? sizes[s] : most;
    float *buf = malloc(most * sizeof(float));
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int round = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int op = ST_SUM; op <= ST_AVG; op++, round++) {
            char what[64];
            snprintf(what, sizeof what, "all-reduce of %zu floats, op %d", sizes[s], op);
            check(reduce_case(h, buf, sizes[s], (st_reduce_op)op, round), what, rank);
        }
    /* bf16: integer values keep every fp32 sum exact, so the one rounding
     * is the definition's whatever order the nodes add in. */
    uint16_t *hb = malloc(100003 * sizeof *hb);
    const size_t bsizes[] = {1, 1000, 100003};
    for (size_t s = 0; s < sizeof bsizes / sizeof *bsizes; s++)
        for (int op = ST_SUM; op <= ST_AVG; op++) {
            const size_t n = bsizes[s];
            const int world = st_hgroup_size(h);
            for (size_t i = 0; i < n; i++)
                hb[i] = st_bf16_from_f32(input_value(rank, i, 50 + op));
            int ok = st_hallreduce(h, hb, n, ST_DTYPE_BF16, ST_DTYPE_BF16, (st_reduce_op)op) == ST_OK;
            for (size_t i = 0; ok && i < n; i++) {
                float sum = 0;
                for (int q = 0; q < world; q++)
                    sum += input_value(q, i, 50 + op);
                ok = hb[i] == st_bf16_from_f32(op == ST_AVG ? sum / (float)world : sum);
            }
            uint64_t mine = fnv(hb, n * sizeof *hb), root = mine;
            MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
            check(ok && mine == root, "bf16 all-reduce", rank);
        }
    free(hb);
    float *zbuf = st_group_buffer(st_hgroup_local(h), NULL);
    check(reduce_case(h, zbuf, zc, ST_AVG, round++), "zero-copy all-reduce", rank);
    for (int root = 0; root < st_hgroup_size(h); root++) {
        unsigned char b[3001];
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = rank == root ? (unsigned char)(i * 31 + (size_t)root) : 0;
        int ok = st_hbroadcast(h, b, sizeof b, root) == ST_OK;
        for (size_t i = 0; ok && i < sizeof b; i++)
            ok = b[i] == (unsigned char)(i * 31 + (size_t)root);
        check(ok, "broadcast", rank);
    }
    check(st_hbarrier(h) == ST_OK, "barrier", rank);
    free(buf);
    st_hgroup_destroy(h);
    if (rank == 0)
        printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
