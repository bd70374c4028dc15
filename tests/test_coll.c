/* Collectives against a serial reference, for 1, 2, 3, 4 and 8 forked ranks
 * (more ranks than this machine's cores), every message-size edge case, both
 * algorithms, both buffer paths, and long mixed sequences. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmtrain/bf16.h"

#define STAGING (64u << 10) /* small, so ordinary tests exceed it */
#define CHUNK (4u << 10)
#define MAX_RESULTS 64

/* Integer-valued inputs keep every partial sum exact, so the reference
 * comparison can be bitwise whatever order the ring adds in. */
static float input_value(int rank, size_t i, unsigned round)
{
    return (float)((int)((i * 7 + (size_t)rank * 13 + round * 5) % 17) - 8);
}

static float reference_value(int world, size_t i, unsigned round, st_reduce_op op)
{
    float sum = 0;
    for (int q = 0; q < world; q++)
        sum += input_value(q, i, round);
    return op == ST_AVG ? sum / (float)world : sum;
}

struct shared_results {
    uint64_t hash[8][MAX_RESULTS];  /* [rank][case] */
    int cases;
};

struct reduce_arg {
    struct shared_results *out;
    size_t sizes[16];
    int nsizes;
    bool zero_copy;
};

/* A copying-path buffer sits 16 bytes into a page in even cases (where
 * glibc puts large allocations: the results come back last element first,
 * coll.c's 4K-aliasing rule) and 2064 bytes in odd ones (first element
 * first); *raw is what to free. */
static float *case_buffer(st_group *g, bool zero_copy, size_t n, int c, void **raw)
{
    *raw = NULL;
    if (zero_copy) {
        size_t bytes;
        float *zc = st_group_buffer(g, &bytes);
        return n * sizeof(float) <= bytes ? zc : NULL;
    }
    const size_t skip = c % 2 ? 2064 : 16;
    *raw = aligned_alloc(4096, (skip + (n ? n : 1) * sizeof(float) + 4095) / 4096 * 4096);
    return *raw ? (float *)((char *)*raw + skip) : NULL;
}

static int reduce_cases(st_group *g, int rank, void *varg)
{
    struct reduce_arg *a = varg;
    int world = st_group_size(g), c = 0;
    for (int s = 0; s < a->nsizes; s++) {
        for (int op = ST_SUM; op <= ST_AVG; op++, c++) {
            size_t n = a->sizes[s];
            void *raw;
            float *buf = case_buffer(g, a->zero_copy, n, c, &raw);
            CHILD_CHECK(buf != NULL);
            for (size_t i = 0; i < n; i++)
                buf[i] = input_value(rank, i, (unsigned)c);
            CHILD_CHECK(st_allreduce(g, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, (st_reduce_op)op) == ST_OK);
            for (size_t i = 0; i < n; i++) {
                if (buf[i] != reference_value(world, i, (unsigned)c, (st_reduce_op)op)) {
                    fprintf(stderr, "rank %d n=%zu op=%d: [%zu] = %g, want %g\n", rank, n, op, i,
                            buf[i], reference_value(world, i, (unsigned)c, (st_reduce_op)op));
                    return 1;
                }
            }
            a->out->hash[rank][c] = fnv1a(buf, n * sizeof(float));
            free(raw);
        }
    }
    a->out->cases = c;
    return 0;
}

static void check_reduce(int world, size_t small_bytes, bool zero_copy)
{
    char job[64];
    test_job_id(job, sizeof job, "reduce");
    struct reduce_arg a = {.nsizes = 0, .zero_copy = zero_copy};
    size_t big = STAGING / sizeof(float) * 5 / 2 + 3; /* 2.5 staging areas */
    size_t sizes[] = {0, 1, 7, (size_t)world - 1, (size_t)world + 1, 1000, (1u << 20) + 3, big};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        a.sizes[a.nsizes++] = sizes[i];
    a.out = shared_alloc(sizeof *a.out);
    assert_non_null(a.out);
    st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .chunk_bytes = CHUNK,
                           .small_bytes = small_bytes,
                           .zero_copy_bytes = zero_copy ? ((1u << 20) + 3) * sizeof(float) : 0};
    assert_int_equal(run_ranks(world, &cfg, reduce_cases, &a), 0);
    assert_int_equal(a.out->cases, 2 * a.nsizes);
    for (int r = 1; r < world; r++)
        assert_memory_equal(a.out->hash[r], a.out->hash[0], sizeof(uint64_t) * (size_t)a.out->cases);
    assert_int_equal(leftover_segments(job), 0);
    shared_free(a.out, sizeof *a.out);
}

static const int worlds[] = {1, 2, 3, 4, 8};

/* ------------------------------------------------------------ bf16 -- */

#define NODES 3
struct stage_log {
    size_t covered;   /* elements this rank's stage saw */
    int calls;
};
static st_status times_nodes(void *ctx, float *part, size_t n);

/* Non-integer values, so the rounding matters. */
static st_bf16 bf16_input(int rank, size_t i, int round)
{
    return st_bf16_from_f32((float)((int)((i * 2654435761u + (size_t)rank * 40503u + (size_t)round) % 2001) - 1000) /
                            97.0f);
}

/* Values where the rounding and the order show: NaN, infinities that
 * cancel, -0s, ties to even, overflow; every 8th an ordinary one.  Round
 * SPECIAL_ROUND of bf16_input. */
#define SPECIAL_ROUND 1000
static st_bf16 special_input(int rank, size_t i)
{
    static const st_bf16 first[8] = {0x7fc1, 0x7f80, 0x8000, 0x3f80, 0x3f81, 0x7f7f, 0xbf80, 0};
    static const st_bf16 second[8] = {0x3f80, 0xff80, 0x8000, 0x3b80, 0x3b80, 0x7f7f, 0x3b80, 0};
    static const st_bf16 rest[8] = {0x3f80, 0, 0x8000, 0, 0, 0x7f7f, 0, 0};
    if (i % 8 == 7 || (i / 8) % 3 == 2)  /* some 16-element blocks without a NaN */
        return st_bf16_from_f32((float)((int)((i * 7 + (size_t)rank * 13) % 201) - 100) / 3.0f);
    return rank == 0 ? first[i % 8] : rank == 1 ? second[i % 8] : rest[i % 8];
}

static st_bf16 case_input(int rank, size_t i, int round)
{
    return round == SPECIAL_ROUND ? special_input(rank, i) : bf16_input(rank, i, round);
}

/* The definition: fp32 sum in rank order (from rank 0's value), divided for
 * an average, rounded once. */
static st_bf16 bf16_reference(int world, size_t i, int round, st_reduce_op op)
{
    float sum = st_bf16_to_f32(case_input(0, i, round));
    for (int q = 1; q < world; q++)
        sum += st_bf16_to_f32(case_input(q, i, round));
    return st_bf16_from_f32(op == ST_AVG ? sum / (float)world : sum);
}

struct bf16_arg {
    struct shared_results *out;
    size_t sizes[8];
    int nsizes;
};

static int bf16_cases(st_group *g, int rank, void *varg)
{
    struct bf16_arg *a = varg;
    const int world = st_group_size(g);
    int c = 0;
    for (int s = 0; s < a->nsizes; s++)
        for (int zc = 0; zc < 2; zc++)
            for (int op = ST_SUM; op <= ST_AVG; op++, c++) {
                const size_t n = a->sizes[s];
                size_t bytes;
                st_bf16 *buf = zc ? st_group_buffer(g, &bytes) : malloc((n ? n : 1) * sizeof *buf);
                CHILD_CHECK(buf != NULL && (!zc || n * sizeof *buf <= bytes));
                for (size_t i = 0; i < n; i++)
                    buf[i] = bf16_input(rank, i, c);
                const char *algo = st_allreduce_algorithm(g, buf, n, ST_DTYPE_BF16);
                CHILD_CHECK(!strcmp(algo, world == 1 || n == 0                      ? "none"
                                          : n * sizeof *buf <= ST_INLINE_DEFAULT ? "inline"
                                          : zc                                   ? "rsag"
                                                                                 : "rsag-copy"));
                CHILD_CHECK(st_allreduce(g, buf, n, ST_DTYPE_BF16, ST_DTYPE_BF16, (st_reduce_op)op) == ST_OK);
                for (size_t i = 0; i < n; i++)
                    if (buf[i] != bf16_reference(world, i, c, (st_reduce_op)op)) {
                        fprintf(stderr, "rank %d n=%zu zc=%d op=%d: [%zu] = %#x, want %#x\n", rank, n, zc, op, i,
                                buf[i], bf16_reference(world, i, c, (st_reduce_op)op));
                        return 1;
                    }
                a->out->hash[rank][c] = fnv1a(buf, n * sizeof *buf);
                if (!zc)
                    free(buf);
            }
    /* The special values, through both paths; compared by bits. */
    for (int zc = 0; zc < 2; zc++)
        for (int op = ST_SUM; op <= ST_AVG; op++) {
            const size_t n = 203;
            size_t bytes;
            st_bf16 *buf = zc ? st_group_buffer(g, &bytes) : malloc(n * sizeof *buf);
            CHILD_CHECK(buf != NULL);
            for (size_t i = 0; i < n; i++)
                buf[i] = special_input(rank, i);
            CHILD_CHECK(st_allreduce(g, buf, n, ST_DTYPE_BF16, ST_DTYPE_BF16, (st_reduce_op)op) == ST_OK);
            for (size_t i = 0; i < n; i++)
                if (buf[i] != bf16_reference(world, i, SPECIAL_ROUND, (st_reduce_op)op)) {
                    fprintf(stderr, "rank %d special zc=%d op=%d: [%zu] = %#x, want %#x\n", rank, zc, op, i, buf[i],
                            bf16_reference(world, i, SPECIAL_ROUND, (st_reduce_op)op));
                    return 1;
                }
            if (!zc)
                free(buf);
        }
    a->out->cases = c;
    /* With a stage (as between nodes): it sees the slice's fp32 sums before
     * the one rounding; here it stands for NODES identical nodes. */
    for (int s = 0; s < a->nsizes; s++)
        for (int op = ST_SUM; op <= ST_AVG; op++) {
            const size_t n = a->sizes[s];
            st_bf16 *buf = malloc((n ? n : 1) * sizeof *buf);
            CHILD_CHECK(buf != NULL);
            for (size_t i = 0; i < n; i++)
                buf[i] = bf16_input(rank, i, 100 + op);
            struct stage_log log = {0};
            CHILD_CHECK(st_allreduce_staged(g, buf, n, ST_DTYPE_BF16, ST_DTYPE_BF16, (st_reduce_op)op, times_nodes, &log, NODES * world) ==
                        ST_OK);
            for (size_t i = 0; i < n; i++) {
                float sum = st_bf16_to_f32(bf16_input(0, i, 100 + op));
                for (int q = 1; q < world; q++)
                    sum += st_bf16_to_f32(bf16_input(q, i, 100 + op));
                sum *= NODES;
                if (op == ST_AVG)
                    sum /= (float)(NODES * world);
                if (buf[i] != st_bf16_from_f32(sum)) {
                    fprintf(stderr, "rank %d staged n=%zu op=%d: [%zu] = %#x, want %#x\n", rank, n, op, i, buf[i],
                            st_bf16_from_f32(sum));
                    return 1;
                }
            }
            free(buf);
        }
    return 0;
}

/* Against the definition, bit for bit, every rank the same: sizes below a
 * slice per rank, across staging pieces, in and out of the zero-copy region. */
static void test_bf16_allreduce(void **state)
{
    (void)state;
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        const int world = worlds[w];
        char job[64];
        test_job_id(job, sizeof job, "bf16");
        struct bf16_arg a = {.nsizes = 0};
        const size_t sizes[] = {0, 1, 7, 1000, 100003};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            a.sizes[a.nsizes++] = sizes[i];
        a.out = shared_alloc(sizeof *a.out);
        assert_non_null(a.out);
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .chunk_bytes = CHUNK,
                               .zero_copy_bytes = 100003 * sizeof(st_bf16)};
        assert_int_equal(run_ranks(world, &cfg, bf16_cases, &a), 0);
        assert_int_equal(a.out->cases, 4 * a.nsizes);
        for (int r = 1; r < world; r++)
            assert_memory_equal(a.out->hash[r], a.out->hash[0], sizeof(uint64_t) * (size_t)a.out->cases);
        assert_int_equal(leftover_segments(job), 0);
        shared_free(a.out, sizeof *a.out);
    }
}

/* ---------------------------------------------------------- staged -- */

/* A stand-in for the stage between nodes: as if NODES identical nodes
 * added their parts (times NODES), and a record of which parts it got. */

static st_status times_nodes(void *ctx, float *part, size_t n)
{
    struct stage_log *log = ctx;
    for (size_t i = 0; i < n; i++)
        part[i] *= NODES;
    log->covered += n;
    log->calls++;
    return ST_OK;
}

static st_status failing_stage(void *ctx, float *part, size_t n)
{
    (void)ctx, (void)part, (void)n;
    return st_fail(ST_ERR_BACKEND, "stage: the transport between nodes failed");
}

struct staged_results {
    uint64_t hash[8][MAX_RESULTS];
    size_t covered[8][MAX_RESULTS];
    bool whole[MAX_RESULTS];  /* the algorithm stages all of it on every rank (direct, inline) */
    int cases;
};

struct staged_arg {
    struct staged_results *out;
    size_t sizes[8];
    int nsizes;
};

static int staged_cases(st_group *g, int rank, void *varg)
{
    struct staged_arg *a = varg;
    const int world = st_group_size(g);
    int c = 0;
    for (int s = 0; s < a->nsizes; s++) {
        for (int op = ST_SUM; op <= ST_AVG; op++, c++) {
            const size_t n = a->sizes[s];
            float *buf = malloc((n ? n : 1) * sizeof(float));
            CHILD_CHECK(buf != NULL);
            for (size_t i = 0; i < n; i++)
                buf[i] = input_value(rank, i, (unsigned)c);
            struct stage_log log = {0};
            CHILD_CHECK(st_allreduce_staged(g, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, (st_reduce_op)op, times_nodes, &log, NODES * world) ==
                        ST_OK);
            for (size_t i = 0; i < n; i++) {
                float want = NODES * reference_value(world, i, (unsigned)c, ST_SUM);
                if (op == ST_AVG)
                    want /= (float)(NODES * world);
                if (buf[i] != want) {
                    fprintf(stderr, "rank %d n=%zu op=%d: [%zu] = %g, want %g\n", rank, n, op, i, buf[i], want);
                    return 1;
                }
            }
            a->out->hash[rank][c] = fnv1a(buf, n * sizeof(float));
            a->out->covered[rank][c] = log.covered;
            const char *algo = st_allreduce_algorithm(g, buf, n, ST_DTYPE_F32);
            a->out->whole[c] = !strcmp(algo, "direct") || !strcmp(algo, "inline") || !strcmp(algo, "none");
            free(buf);
        }
    }
    a->out->cases = c;
    /* A stage that fails fails the collective on every rank (the ring: the
     * others wait for the part it never publishes), and breaks the group. */
    static float x[20000];
    st_status st = st_allreduce_staged(g, x, 20000, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM, rank == world - 1 ? failing_stage : times_nodes,
                                           &(struct stage_log){0}, world);
    CHILD_CHECK(world == 1 ? st == ST_ERR_BACKEND : st != ST_OK);
    return 0;
}

/* Sizes for the direct and inline algorithms (every rank stages all of
 * it) and the others (each rank its own part: the parts cover the buffer
 * once), whichever the table picks. */
static void test_staged_allreduce(void **state)
{
    (void)state;
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        const int world = worlds[w];
        char job[64];
        test_job_id(job, sizeof job, "staged");
        struct staged_arg a = {.nsizes = 0};
        const size_t sizes[] = {1, 100, 10007, (1u << 20) + 3};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            a.sizes[a.nsizes++] = sizes[i];
        a.out = shared_alloc(sizeof *a.out);
        assert_non_null(a.out);
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .chunk_bytes = CHUNK, .timeout_s = 20};
        assert_int_equal(run_ranks(world, &cfg, staged_cases, &a), 0);
        assert_int_equal(a.out->cases, 2 * a.nsizes);
        for (int r = 1; r < world; r++)
            assert_memory_equal(a.out->hash[r], a.out->hash[0], sizeof(uint64_t) * (size_t)a.out->cases);
        for (int c = 0; c < a.out->cases; c++) {
            const size_t n = a.sizes[c / 2];
            size_t total = 0;
            for (int r = 0; r < world; r++)
                total += a.out->covered[r][c];
            const bool direct = a.out->whole[c];
            if (total != (direct ? n * (size_t)world : n))
                fail_msg("world %d, n %zu: the stages saw %zu elements, want %zu", world, n, total,
                         direct ? n * (size_t)world : n);
        }
        assert_int_equal(leftover_segments(job), 0);
        shared_free(a.out, sizeof *a.out);
    }
}

static void test_ring_copy(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++)
        check_reduce(worlds[i], ST_SMALL_NEVER, false);
}

static void test_ring_zero_copy(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++)
        check_reduce(worlds[i], ST_SMALL_NEVER, true);
}

static void test_direct_and_ring_mixed(void **state)
{
    (void)state;
    /* Default threshold: small cases go direct, the rest ring. */
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        check_reduce(worlds[i], 0, false);
        check_reduce(worlds[i], 0, true);
    }
}

/* ---- random floats: not exact, but every rank and every run bitwise equal -- */

struct determinism_arg {
    uint64_t (*hash)[2];  /* [rank][run] */
    double *max_err;      /* [rank] */
};

static int random_floats(st_group *g, int rank, void *varg)
{
    struct determinism_arg *a = varg;
    const size_t n = 300001;
    int world = st_group_size(g);
    float *buf = malloc(n * sizeof(float));
    CHILD_CHECK(buf != NULL);
    for (int run = 0; run < 2; run++) {
        for (size_t i = 0; i < n; i++) {
            uint64_t x = (i * 2654435761u + (uint64_t)rank * 40503u) % 100003;
            buf[i] = (float)x / 7919.0f - 6.0f;
        }
        CHILD_CHECK(st_allreduce(g, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, ST_AVG) == ST_OK);
        a->hash[rank][run] = fnv1a(buf, n * sizeof(float));
    }
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = 0;
        for (int q = 0; q < world; q++)
            ref += (double)((float)((i * 2654435761u + (uint64_t)q * 40503u) % 100003) / 7919.0f - 6.0f);
        ref /= world;
        double err = fabs(ref - buf[i]);
        worst = err > worst ? err : worst;
    }
    a->max_err[rank] = worst;
    free(buf);
    return 0;
}

static void test_bitwise_identical_and_repeatable(void **state)
{
    (void)state;
    for (int world = 2; world <= 8; world *= 2) {
        char job[64];
        test_job_id(job, sizeof job, "det");
        struct determinism_arg a = {shared_alloc(8 * sizeof *a.hash), shared_alloc(8 * sizeof(double))};
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .chunk_bytes = CHUNK};
        assert_int_equal(run_ranks(world, &cfg, random_floats, &a), 0);
        for (int r = 0; r < world; r++) {
            assert_true(a.hash[r][0] == a.hash[0][0]);
            assert_true(a.hash[r][1] == a.hash[0][0]);
            assert_true(a.max_err[r] < 1e-5);
        }
        shared_free(a.hash, 8 * sizeof *a.hash);
        shared_free(a.max_err, 8 * sizeof(double));
    }
}

/* ------------------------------------------------------------ broadcast -- */

static unsigned char pattern(int root, size_t i) { return (unsigned char)(i * 31 + (size_t)root * 7 + 1); }

static int broadcast_cases(st_group *g, int rank, void *arg)
{
    (void)arg;
    const size_t sizes[] = {0, 1, 13, 4096, STAGING * 2 + 5};
    int world = st_group_size(g);
    unsigned char *buf = malloc(STAGING * 2 + 5);
    CHILD_CHECK(buf != NULL);
    for (int root = 0; root < world; root++) {
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t n = sizes[s];
            for (size_t i = 0; i < n; i++)
                buf[i] = rank == root ? pattern(root, i) : 0xEE;
            CHILD_CHECK(st_broadcast(g, buf, n, root) == ST_OK);
            for (size_t i = 0; i < n; i++)
                CHILD_CHECK(buf[i] == pattern(root, i));
        }
    }
    free(buf);
    return 0;
}

static void test_broadcast_every_root(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        char job[64];
        test_job_id(job, sizeof job, "bcast");
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING};
        assert_int_equal(run_ranks(worlds[i], &cfg, broadcast_cases, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

/* -------------------------------------------------------------- barrier -- */

static int barrier_rounds(st_group *g, int rank, void *arg)
{
    int *arrived = arg;  /* shared: [round] */
    int world = st_group_size(g);
    for (int round = 0; round < 100; round++) {
        __atomic_fetch_add(&arrived[round], 1, __ATOMIC_SEQ_CST);
        CHILD_CHECK(st_barrier(g) == ST_OK);
        /* Nobody may leave before everyone arrived. */
        CHILD_CHECK(__atomic_load_n(&arrived[round], __ATOMIC_SEQ_CST) == world);
        if (rank == round % world)
            usleep(200);  /* a late rank each round */
    }
    return 0;
}

static void test_barrier(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        char job[64];
        test_job_id(job, sizeof job, "barrier");
        int *arrived = shared_alloc(100 * sizeof(int));
        st_group_config cfg = {.job_id = job};
        assert_int_equal(run_ranks(worlds[i], &cfg, barrier_rounds, arrived), 0);
        shared_free(arrived, 100 * sizeof(int));
    }
}

/* ------------------------------------------- long mixed sequences (races) -- */

static int mixed_sequence(st_group *g, int rank, void *arg)
{
    (void)arg;
    int world = st_group_size(g);
    size_t zc_bytes;
    float *zc = st_group_buffer(g, &zc_bytes);
    float *priv = malloc(zc_bytes);
    unsigned char bytes[700];
    CHILD_CHECK(zc && priv);
    unsigned seed = 12345;  /* same on every rank: the same call sequence */
    for (unsigned it = 0; it < 400; it++) {
        seed = seed * 1103515245u + 12345u;
        unsigned kind = (seed >> 16) % 4;
        size_t n = ((seed >> 8) % 4 == 0) ? (seed >> 4) % (zc_bytes / sizeof(float))
                                          : (seed >> 4) % 600;
        if (kind <= 1) {
            float *buf = kind == 0 ? zc : priv;
            for (size_t i = 0; i < n; i++)
                buf[i] = input_value(rank, i, it);
            CHILD_CHECK(st_allreduce(g, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK);
            for (size_t i = 0; i < n; i++)
                CHILD_CHECK(buf[i] == reference_value(world, i, it, ST_SUM));
        } else if (kind == 2) {
            int root = (int)(it % (unsigned)world);
            size_t m = n % sizeof bytes;
            for (size_t i = 0; i < m; i++)
                bytes[i] = rank == root ? pattern(root, i + it) : 0;
            CHILD_CHECK(st_broadcast(g, bytes, m, root) == ST_OK);
            for (size_t i = 0; i < m; i++)
                CHILD_CHECK(bytes[i] == pattern(root, i + it));
        } else {
            CHILD_CHECK(st_barrier(g) == ST_OK);
        }
    }
    free(priv);
    return 0;
}

static void test_back_to_back_mixed(void **state)
{
    (void)state;
    const int ws[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        char job[64];
        test_job_id(job, sizeof job, "mixed");
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .chunk_bytes = CHUNK,
                               .small_bytes = 1024, .zero_copy_bytes = 40000 * sizeof(float)};
        assert_int_equal(run_ranks(ws[i], &cfg, mixed_sequence, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_copy),
        cmocka_unit_test(test_ring_zero_copy),
        cmocka_unit_test(test_direct_and_ring_mixed),
        cmocka_unit_test(test_bitwise_identical_and_repeatable),
        cmocka_unit_test(test_broadcast_every_root),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_back_to_back_mixed),
        cmocka_unit_test(test_staged_allreduce),
        cmocka_unit_test(test_bf16_allreduce),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
