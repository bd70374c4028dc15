/* The inline (small-message) all-reduce: exact at every size up to its
 * threshold and every rank count, back to back with sizes changing every
 * call, with ranks arriving late, and across the wrap of its sequence
 * numbers.  Death and stalls mid-call: test_coll_fault.c.
 *
 * White-box where it must be: the wrap test sets the group's sequence
 * counter (coll_internal.h) to just below 2^64 on every rank.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/coll/coll_internal.h"
#include "forkranks.h"
#include "shmtrain/bf16.h"

/* Every rank's input: not integers, so the sum's bits depend on the order
 * of the additions; the definition adds in rank order. */
static float input(int rank, size_t i, unsigned call)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u) ^ (call * 2246822519u);
    h ^= h >> 15;
    return ((float)(h % 20001) - 10000.0f) / 1024.0f;
}

static float f32_reference(int world, size_t i, unsigned call, st_reduce_op op)
{
    float sum = input(0, i, call);
    for (int q = 1; q < world; q++)
        sum += input(q, i, call);
    return op == ST_AVG ? sum / (float)world : sum;
}

static st_bf16 bf16_reference(int world, size_t i, unsigned call, st_reduce_op op)
{
    float sum = st_bf16_to_f32(st_bf16_from_f32(input(0, i, call)));
    for (int q = 1; q < world; q++)
        sum += st_bf16_to_f32(st_bf16_from_f32(input(q, i, call)));
    return st_bf16_from_f32(op == ST_AVG ? sum / (float)world : sum);
}

/* One call of `count` elements; 0 when every element is the definition's,
 * bit for bit. */
static int one_call(st_group *g, int rank, size_t count, st_dtype dtype, st_reduce_op op, unsigned call)
{
    const int world = st_group_size(g);
    float f[ST_INLINE_DEFAULT / sizeof(float)];
    st_bf16 h[ST_INLINE_DEFAULT / sizeof(st_bf16)];
    void *buf = dtype == ST_DTYPE_BF16 ? (void *)h : (void *)f;
    for (size_t i = 0; i < count; i++)
        if (dtype == ST_DTYPE_BF16)
            h[i] = st_bf16_from_f32(input(rank, i, call));
        else
            f[i] = input(rank, i, call);
    CHILD_CHECK(!strcmp(st_allreduce_algorithm(g, buf, count, dtype), "inline"));
    CHILD_CHECK(st_allreduce(g, buf, count, dtype, dtype, op) == ST_OK);
    for (size_t i = 0; i < count; i++) {
        bool same = dtype == ST_DTYPE_BF16 ? h[i] == bf16_reference(world, i, call, op)
                                           : f[i] == f32_reference(world, i, call, op);
        if (!same) {
            fprintf(stderr, "rank %d of %d, call %u, %s x %zu, op %d: element %zu differs from the definition\n",
                    rank, world, call, st_dtype_name(dtype), count, (int)op, i);
            return 1;
        }
    }
    return 0;
}

/* --------------------------------------------------- every size, world -- */

static int every_size(st_group *g, int rank, void *arg)
{
    (void)arg;
    unsigned call = 0;
    for (int d = 0; d < 2; d++) {
        const st_dtype dtype = d ? ST_DTYPE_BF16 : ST_DTYPE_F32;
        const size_t max = ST_INLINE_DEFAULT / (d ? sizeof(st_bf16) : sizeof(float));
        for (size_t count = 1; count <= max; count++)
            for (int op = ST_SUM; op <= ST_AVG; op++)
                if (one_call(g, rank, count, dtype, (st_reduce_op)op, call++))
                    return 1;
    }
    return 0;
}

/* Every element count up to the threshold, both types and ops, 2 to 16
 * ranks (oversubscribed here: each call needs every rank scheduled). */
static void test_exact_at_every_size(void **state)
{
    (void)state;
    const int worlds[] = {2, 3, 4, 8, 16};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        char job[64];
        test_job_id(job, sizeof job, "inline-sizes");
        st_group_config cfg = {.job_id = job, .timeout_s = 30};
        assert_int_equal(run_ranks(worlds[w], &cfg, every_size, NULL), 0);
        assert_int_equal(leftover_segments(job), 0);
    }
}

/* ----------------------------------------------- back to back, wrapping -- */

struct series {
    int calls;
    uint64_t first_seq;  /* 0: as created */
    bool late;           /* a rank sleeps 1-50 ms before some calls */
};

/* The same pseudo-random schedule on every rank: the size of call c, and
 * which rank (if any) arrives late to it. */
static uint32_t schedule(unsigned c, uint32_t salt)
{
    uint32_t h = c * 2654435761u + salt;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    return h ^ (h >> 15);
}

static int back_to_back(st_group *g, int rank, void *varg)
{
    const struct series *s = varg;
    if (s->first_seq)
        g->inline_seq = s->first_seq;
    const int world = st_group_size(g);
    for (unsigned c = 0; c < (unsigned)s->calls; c++) {
        const uint32_t r = schedule(c, 1);
        const st_dtype dtype = r & 1 ? ST_DTYPE_BF16 : ST_DTYPE_F32;
        const size_t count = 1 + (r >> 1) % (ST_INLINE_DEFAULT / (dtype == ST_DTYPE_BF16 ? 2 : 4));
        if (s->late && schedule(c, 2) % 25 == 0 && (int)(schedule(c, 3) % (uint32_t)world) == rank)
            usleep(1000 * (1 + schedule(c, 4) % 50));
        if (one_call(g, rank, count, dtype, (st_reduce_op)((r >> 8) & 1), c))
            return 1;
    }
    if (s->first_seq)
        CHILD_CHECK(g->inline_seq < s->first_seq && g->inline_seq != 0);  /* it wrapped, past 0 */
    return 0;
}

static void run_series(int world, struct series s)
{
    char job[64];
    test_job_id(job, sizeof job, "inline-series");
    st_group_config cfg = {.job_id = job, .timeout_s = 30};
    assert_int_equal(run_ranks(world, &cfg, back_to_back, &s), 0);
    assert_int_equal(leftover_segments(job), 0);
}

/* 10,000 calls with no barrier between them, the size changing every call:
 * a rank one call ahead writes the other set of lines, never the one its
 * peers still read. */
static void test_back_to_back_varying_sizes(void **state)
{
    (void)state;
    run_series(2, (struct series){.calls = 10000});
    run_series(4, (struct series){.calls = 10000});
    run_series(16, (struct series){.calls = 2000});
}

/* Across 2^64: the numbering skips 0 (the zeroed segment) and the two sets
 * keep alternating, so no stale line is taken for a fresh one. */
static void test_sequence_wraps(void **state)
{
    (void)state;
    run_series(2, (struct series){.calls = 3000, .first_seq = UINT64_MAX - 1000});
    run_series(5, (struct series){.calls = 2000, .first_seq = UINT64_MAX - 3});
}

/* The first call after the wrap, to a fresh segment whose lines are all
 * zero, with rank 1 late: were the call numbered 0, rank 0 would take rank
 * 1's unwritten lines for its payload. */
static int first_call_after_wrap(st_group *g, int rank, void *arg)
{
    (void)arg;
    g->inline_seq = UINT64_MAX;
    if (rank == 1)
        usleep(20000);
    return one_call(g, rank, ST_INLINE_DEFAULT / sizeof(float), ST_DTYPE_F32, ST_SUM, 7);
}

static void test_wrap_never_reads_a_zeroed_line(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "inline-zero");
    st_group_config cfg = {.job_id = job, .timeout_s = 30};
    assert_int_equal(run_ranks(2, &cfg, first_call_after_wrap, NULL), 0);
    assert_int_equal(leftover_segments(job), 0);
}

/* A rank 1-50 ms late at random calls: the others wait for it, and the
 * sums stay exact. */
static void test_late_ranks(void **state)
{
    (void)state;
    run_series(2, (struct series){.calls = 600, .late = true});
    run_series(8, (struct series){.calls = 400, .late = true});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_at_every_size),
        cmocka_unit_test(test_back_to_back_varying_sizes),
        cmocka_unit_test(test_sequence_wraps),
        cmocka_unit_test(test_wrap_never_reads_a_zeroed_line),
        cmocka_unit_test(test_late_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
