/* The structure of each all-reduce algorithm, proven by its counters on
 * any machine: synchronisations per call, bytes read and written per rank,
 * bytes read from peers and from other NUMA nodes, against the formulas of
 * docs/collectives.md (re-derived here from the algorithms' definitions,
 * not from their code), at 2 to 64 ranks, one NUMA node and two. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forkranks.h"

#define MAX_RANKS 64

struct expect {
    uint64_t syncs, read, written, peer, remote;
};

struct counter_arg {
    const char *algorithm;
    bool zero_copy, two_nodes;
    size_t count;       /* floats in the one call */
    int failures;       /* ranks whose counters differ (shared) */
    uint64_t remote_sum;
};

static size_t part(size_t n, int parts, int p)
{
    return n * (size_t)(p + 1) / (size_t)parts - n * (size_t)p / (size_t)parts;
}

static int node_of(const struct counter_arg *a, int rank) { return a->two_nodes ? rank % 2 : 0; }

/* rsag: rank r sums slice r of all N inputs into its own (reading N
 * slices, writing one), then copies the N-1 other slices from their owners;
 * an ordinary buffer is copied into staging first, and its own slice out. */
static struct expect rsag(const struct counter_arg *a, int N, int r)
{
    const size_t n = a->count, e = sizeof(float), s = part(n, N, r);
    struct expect x = {3, (N * s + n - s) * e, (s + n - s) * e, ((N - 1) * s + n - s) * e, 0};
    for (int q = 0; q < N; q++)
        if (node_of(a, q) != node_of(a, r))
            x.remote += (s + part(n, N, q)) * e;
    if (!a->zero_copy)
        x.read += (n + s) * e, x.written += (n + s) * e;
    return x;
}

/* two-level, M nodes of L ranks, rank r the i-th of node m: A sums part i
 * over the node (fp32 partials), B sums sub-slice m of part i over the M
 * nodes' partials, C1 copies the other M-1 sub-slices, C2 the L parts. */
static struct expect two_level(const struct counter_arg *a, int N, int r)
{
    const int M = 2, L = N / 2, m = node_of(a, r), i = r / 2;
    const size_t n = a->count, e = sizeof(float), f = sizeof(float), p = part(n, L, i), sig = part(p, M, m);
    struct expect x = {4, L * p * e + M * sig * f + (p - sig) * e + n * e, p * f + sig * e + (p - sig) * e + n * e,
                       (L - 1) * p * e + (M - 1) * sig * f + (p - sig) * e + (n - p) * e,
                       (M - 1) * sig * f + (p - sig) * e};
    if (!a->zero_copy)
        x.read += n * e, x.written += n * e;
    return x;
}

/* ring over n floats: N-1 reduce-scatter steps over every segment but r
 * (reading ours and the left's, writing ours), N-1 all-gather steps over
 * every segment but r+1 (reading the left's); one wait per step and chunk
 * of the default 128 KiB, one at the end.  An ordinary buffer: only what
 * the right neighbour reads is staged. */
static struct expect ring_piece(const struct counter_arg *a, int N, int r, size_t n)
{
    const size_t e = sizeof(float), rs = n - part(n, N, r), ag = n - part(n, N, (r + 1) % N);
    const size_t max_seg = (n + (size_t)N - 1) / (size_t)N, chunk = (size_t)128 << 10;
    const uint64_t chunks = max_seg * e > chunk ? (max_seg * e + chunk - 1) / chunk : 1;
    struct expect x = {2 * (uint64_t)(N - 1) * chunks + 1, (2 * rs + ag) * e, (rs + ag) * e, (rs + ag) * e, 0};
    if (node_of(a, (r + N - 1) % N) != node_of(a, r))
        x.remote = x.peer;
    if (!a->zero_copy) {  /* staged: segment r in, the final segment r+1 out, each gathered one into staging
                             for the right neighbour but the last step's (segment r+2) */
        const size_t extra = part(n, N, r) + part(n, N, (r + 1) % N) + ag - part(n, N, (r + 2) % N);
        x.read += extra * e, x.written += extra * e;
    }
    return x;
}

/* An ordinary buffer goes through staging in pieces of at most the default
 * 4 MiB staging area and N x 1 MiB, each a ring of its own. */
static struct expect ring(const struct counter_arg *a, int N, int r)
{
    const size_t cap = (size_t)N * (1u << 20), staging = (size_t)4 << 20;
    const size_t piece = a->zero_copy ? a->count : (cap < staging ? cap : staging) / sizeof(float);
    struct expect x = {0};
    for (size_t done = 0; done < a->count; done += piece) {
        const struct expect p = ring_piece(a, N, r, a->count - done < piece ? a->count - done : piece);
        x.syncs += p.syncs, x.read += p.read, x.written += p.written, x.peer += p.peer, x.remote += p.remote;
    }
    return x;
}

/* direct: copy into a slot, wait once, read every rank's slot. */
static struct expect direct(const struct counter_arg *a, int N, int r)
{
    const size_t b = a->count * sizeof(float);
    struct expect x = {1, b + N * b, 2 * b, (N - 1) * b, 0};
    for (int q = 0; q < N; q++)
        if (node_of(a, q) != node_of(a, r))
            x.remote += b;
    return x;
}

static struct expect expected(const struct counter_arg *a, int N, int r)
{
    if (!strcmp(a->algorithm, "rsag"))
        return rsag(a, N, r);
    if (!strcmp(a->algorithm, "two-level"))
        return two_level(a, N, r);
    if (!strcmp(a->algorithm, "ring"))
        return ring(a, N, r);
    return direct(a, N, r);  /* inline reads and writes what direct does, through its lines */
}

static void place(st_group_config *c, int rank, void *varg)
{
    const struct counter_arg *a = varg;
    static char node[16];
    snprintf(node, sizeof node, "%d", node_of(a, rank));
    c->numa_nodes = node;
}

static int one_call(st_group *g, int rank, void *varg)
{
    struct counter_arg *a = varg;
    const int N = st_group_size(g);
    float *buf = a->zero_copy ? st_group_buffer(g, NULL) : calloc(a->count, sizeof(float));
    CHILD_CHECK(buf != NULL);
    st_group_counters_reset(g);
    CHILD_CHECK(st_allreduce(g, buf, a->count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK);
    st_coll_counters got;
    st_group_counters(g, &got);
    const struct expect x = expected(a, N, rank);
    if (got.calls != 1 || got.syncs != x.syncs || got.bytes_read != x.read || got.bytes_written != x.written ||
        got.peer_bytes_read != x.peer || got.remote_numa_bytes_read != x.remote) {
        fprintf(stderr,
                "%s, rank %d of %d, %zu floats, %s: syncs %llu (want %llu), read %llu (%llu), written %llu (%llu), "
                "peer %llu (%llu), remote %llu (%llu)\n",
                a->algorithm, rank, N, a->count, a->zero_copy ? "zero-copy" : "copying",
                (unsigned long long)got.syncs, (unsigned long long)x.syncs, (unsigned long long)got.bytes_read,
                (unsigned long long)x.read, (unsigned long long)got.bytes_written, (unsigned long long)x.written,
                (unsigned long long)got.peer_bytes_read, (unsigned long long)x.peer,
                (unsigned long long)got.remote_numa_bytes_read, (unsigned long long)x.remote);
        __atomic_add_fetch(&a->failures, 1, __ATOMIC_SEQ_CST);
    }
    __atomic_add_fetch(&a->remote_sum, got.remote_numa_bytes_read, __ATOMIC_SEQ_CST);
    CHILD_CHECK(st_barrier(g) == ST_OK);  /* nobody leaves while a peer still gathers from it */
    if (!a->zero_copy)
        free(buf);
    return 0;
}

/* The counters of one call at `world` ranks, every rank against the
 * formula; returns the bytes all ranks read across NUMA nodes. */
static uint64_t check(int world, const char *algorithm, bool zero_copy, bool two_nodes, size_t count)
{
    char job[64];
    test_job_id(job, sizeof job, "counters");
    struct counter_arg *a = shared_alloc(sizeof *a);
    assert_non_null(a);
    *a = (struct counter_arg){algorithm, zero_copy, two_nodes, count, 0, 0};
    st_group_config cfg = {.job_id = job, .algorithm = algorithm, .threads = 1, .timeout_s = 60,
                           .zero_copy_bytes = count * sizeof(float)};
    assert_int_equal(run_ranks_tweaked(world, &cfg, place, one_call, a), 0);
    if (a->failures)
        fail_msg("%s at %d ranks: %d ranks' counters differ from the formula", algorithm, world, a->failures);
    const uint64_t remote = a->remote_sum;
    shared_free(a, sizeof *a);
    assert_int_equal(leftover_segments(job), 0);
    return remote;
}

static void test_rsag_counters(void **state)
{
    (void)state;
    const int worlds[] = {2, 3, 4, 8, 16, 64};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++)
        for (int zc = 0; zc < 2; zc++)
            check(worlds[w], "rsag", zc, false, 1000 * (size_t)worlds[w] + 3);
}

static void test_ring_and_direct_counters(void **state)
{
    (void)state;
    const int worlds[] = {2, 3, 8, 16};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        for (int zc = 0; zc < 2; zc++)
            check(worlds[w], "ring", zc, false, 1000 * (size_t)worlds[w] + 3);
        check(worlds[w], "direct", false, false, 1001);
        check(worlds[w], "inline", false, false, 13);
    }
    /* 12 MiB staged: pieces of 2 MiB at 2 ranks, 3 MiB at 3, each in chunks */
    check(2, "ring", false, false, (3u << 20) + 5);
    check(3, "ring", false, false, (3u << 20) + 5);
    check(2, "ring", true, false, (3u << 20) + 5);
}

/* On two NUMA nodes the two-level all-reduce reads across them what each
 * node must send and receive, 2 (M-1)/M of the message per node, where the
 * flat rsag reads L times that. */
static void test_two_level_counters(void **state)
{
    (void)state;
    const int worlds[] = {4, 8, 16, 64};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        const int N = worlds[w], L = N / 2;
        const size_t n = 1000 * (size_t)N;
        for (int zc = 0; zc < 2; zc++) {
            const uint64_t two = check(N, "two-level", zc, true, n);
            const uint64_t flat = check(N, "rsag", zc, true, n);
            /* both nodes: 2 x (M-1)/M x n floats each way */
            assert_int_equal(two, 2 * n * sizeof(float));
            assert_int_equal(flat, (uint64_t)L * 2 * n * sizeof(float));
        }
    }
}

/* ------------------------------------------------------------ the table -- */

struct choice {
    size_t floats;
    bool zero_copy;
    const char *want;
};

struct table_arg {
    const struct choice *choices;
    int n;
    int threads;
    bool two_nodes;
    int failures;
};

static void place_table(st_group_config *c, int rank, void *varg)
{
    const struct table_arg *a = varg;
    static char node[16];
    snprintf(node, sizeof node, "%d", a->two_nodes ? rank % 2 : 0);
    c->numa_nodes = node;
    c->threads = a->threads;
}

static int ask_table(st_group *g, int rank, void *varg)
{
    struct table_arg *a = varg;
    omp_set_num_threads(a->threads);
    size_t bytes;
    float *zc = st_group_buffer(g, &bytes);
    float *priv = malloc(bytes);
    CHILD_CHECK(zc && priv);
    for (int k = 0; k < a->n; k++) {
        const struct choice *ch = &a->choices[k];
        const char *got = st_allreduce_algorithm(g, ch->zero_copy ? zc : priv, ch->floats, ST_DTYPE_F32);
        if (rank == 0 && strcmp(got, ch->want)) {
            fprintf(stderr, "%d ranks x %d threads%s, %zu floats %s: %s, want %s\n", st_group_size(g), a->threads,
                    a->two_nodes ? " on 2 nodes" : "", ch->floats, ch->zero_copy ? "zero-copy" : "copying", got,
                    ch->want);
            __atomic_add_fetch(&a->failures, 1, __ATOMIC_SEQ_CST);
        }
    }
    free(priv);
    return 0;
}

static void check_table(int world, int threads, bool two_nodes, const struct choice *choices, int n)
{
    char job[64];
    test_job_id(job, sizeof job, "table");
    struct table_arg *a = shared_alloc(sizeof *a);
    assert_non_null(a);
    *a = (struct table_arg){choices, n, threads, two_nodes, 0};
    st_group_config cfg = {.job_id = job, .zero_copy_bytes = 8u << 20, .thread_bytes = 64};
    assert_int_equal(run_ranks_tweaked(world, &cfg, place_table, ask_table, a), 0);
    assert_int_equal(a->failures, 0);
    shared_free(a, sizeof *a);
}

/* The measured decisions (docs/benchmarks.md, 0b and 0e) as the table
 * gives them: the one place a call's algorithm is chosen. */
static void test_the_table_decides(void **state)
{
    (void)state;
    const struct choice two_one[] = {{16, true, "inline"}, {256, true, "direct"},    {4096, false, "direct"},
                                     {1024, true, "ring"}, {1u << 20, true, "ring"}, {1u << 20, false, "ring-copy"}};
    check_table(2, 1, false, two_one, 6);
    const struct choice two_four[] = {{256, true, "direct"}, {1u << 20, true, "rsag"}, {1u << 20, false, "rsag-copy"}};
    check_table(2, 4, false, two_four, 3);
    const struct choice four_one[] = {{16, true, "inline"},         {1024, true, "rsag"},
                                      {64u << 10, true, "ring"},    {64u << 10, false, "rsag-copy"},
                                      {1u << 20, true, "rsag"},     {1u << 20, false, "rsag-copy"}};
    check_table(4, 1, false, four_one, 6);
    const struct choice four_two_nodes[] = {{1024, true, "rsag"}, {1u << 20, true, "two-level"},
                                            {1u << 20, false, "two-level-copy"}};
    check_table(4, 1, true, four_two_nodes, 3);
}

/* A call's choice is remembered for the next of the same shape, and the
 * path is part of the shape: at 4 ranks x 1 thread, 64 Ki floats take the
 * ring from the zero-copy region and rsag through the staging area (the
 * table above), so an ordinary buffer after a zero-copy call of the same
 * count must run rsag-copy, with rsag's counters. */
static int zero_copy_then_ordinary(st_group *g, int rank, void *varg)
{
    struct counter_arg *a = varg;
    float *zc = st_group_buffer(g, NULL), *priv = calloc(a->count, sizeof(float));
    CHILD_CHECK(zc && priv);
    CHILD_CHECK(st_allreduce(g, zc, a->count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK);
    st_group_counters_reset(g);
    CHILD_CHECK(st_allreduce(g, priv, a->count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == ST_OK);
    st_coll_counters got;
    st_group_counters(g, &got);
    const struct expect x = expected(a, st_group_size(g), rank);
    if (got.syncs != x.syncs || got.bytes_read != x.read) {
        fprintf(stderr, "rank %d: the ordinary call after a zero-copy one: syncs %llu (rsag-copy: %llu), read %llu "
                "(%llu)\n", rank, (unsigned long long)got.syncs, (unsigned long long)x.syncs,
                (unsigned long long)got.bytes_read, (unsigned long long)x.read);
        __atomic_add_fetch(&a->failures, 1, __ATOMIC_SEQ_CST);
    }
    CHILD_CHECK(st_barrier(g) == ST_OK);
    free(priv);
    return 0;
}

static void test_the_choice_is_kept_per_path(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "perpath");
    struct counter_arg *a = shared_alloc(sizeof *a);
    assert_non_null(a);
    *a = (struct counter_arg){"rsag", false, false, 64u << 10, 0, 0};
    st_group_config cfg = {.job_id = job, .zero_copy_bytes = 8u << 20, .thread_bytes = 64, .threads = 1};
    assert_int_equal(run_ranks_tweaked(4, &cfg, place, zero_copy_then_ordinary, a), 0);
    assert_int_equal(a->failures, 0);
    shared_free(a, sizeof *a);
    assert_int_equal(leftover_segments(job), 0);
}

/* Two-level needs every node to hold the same number (two or more) of
 * ranks: three ranks on two nodes are one level, and forcing it fails by
 * name. */
static int levels_of(st_group *g, int rank, void *varg)
{
    (void)rank;
    CHILD_CHECK(st_group_levels(g) == *(int *)varg);
    return 0;
}

static void place_uneven(st_group_config *c, int rank, void *varg)
{
    (void)varg;
    c->numa_nodes = rank == 2 ? "1" : "0";
}

static void test_uneven_nodes_are_one_level(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "uneven");
    int *want = shared_alloc(sizeof *want);
    assert_non_null(want);
    *want = 1;
    st_group_config cfg = {.job_id = job};
    assert_int_equal(run_ranks_tweaked(3, &cfg, place_uneven, levels_of, want), 0);
    test_job_id(job, sizeof job, "uneven-forced");
    cfg.algorithm = "two-level";
    cfg.join_timeout_s = 5;
    assert_int_equal(run_ranks_tweaked(3, &cfg, place_uneven, levels_of, want), 3);  /* every join refused */
    assert_int_equal(leftover_segments(job), 0);
    shared_free(want, sizeof *want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_table_decides),
        cmocka_unit_test(test_the_choice_is_kept_per_path),
        cmocka_unit_test(test_uneven_nodes_are_one_level),
        cmocka_unit_test(test_rsag_counters),
        cmocka_unit_test(test_ring_and_direct_counters),
        cmocka_unit_test(test_two_level_counters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
