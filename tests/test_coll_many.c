/* Many ranks, many threads: every all-reduce algorithm forced, at 3 to 64
 * forked ranks (far more than this machine's cores) and 1 to 4 threads per
 * rank, on sizes that do not divide (one element, one either side of the
 * rank count, past a piece), fp32 and bf16 payloads and fp32 values on a
 * bf16 wire, sums and averages, in the zero-copy region and out of it.
 * Integer inputs give exact references whatever the order; non-integer
 * ones must give every rank the same bits, and the same bits at every
 * thread count.  The counters are checked against each algorithm's formula
 * (re-derived here, docs/collectives.md) on one and two NUMA nodes. */
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
#include "test_half.h"
#include "shmtrain/bf16.h"

#define STAGING (8u << 10) /* the smallest staging: pieces of 2048 floats, so "past a piece" stays small */
#define MAX_RANKS 64
#define MAX_CASES 128

/* What every rank's calls produced, for the parent to compare. */
struct shared_hashes {
    uint64_t hash[MAX_RANKS][MAX_CASES];
    int cases;
};

struct many_arg {
    const char *algorithm;
    int threads;
    bool two_nodes;           /* ranks alternate between NUMA nodes 0 and 1 */
    struct shared_hashes *out;
};

/* Ranks alternate between two NUMA nodes: the two-level layout must
 * gather each node's ranks wherever they sit in rank order. */
static void place(st_group_config *c, int rank, void *varg)
{
    const struct many_arg *a = varg;
    static char node[16];  /* one per forked rank */
    snprintf(node, sizeof node, "%d", rank % 2);
    c->numa_nodes = a->two_nodes ? node : NULL;
    c->threads = a->threads;
}

static float exact_input(int rank, size_t i)
{
    return (float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8);
}

/* Non-integer, so the order of the sum shows in the bits. */
static float rough_input(int rank, size_t i)
{
    return (float)((int)((i * 2654435761u + (size_t)rank * 40503u) % 2001) - 1000) / 97.0f;
}

enum kind { F32, AS_BF16, BF16, KINDS };  /* fp32 payload; fp32 values on a bf16 wire; bf16 payload */

static void fill(void *buf, enum kind k, size_t n, int rank, bool exact)
{
    for (size_t i = 0; i < n; i++) {
        const float v = exact ? exact_input(rank, i) : rough_input(rank, i);
        if (k == BF16)
            ((st_bf16 *)buf)[i] = st_bf16_from_f32(v);
        else
            ((float *)buf)[i] = v;
    }
}

static st_status reduce(st_group *g, void *buf, enum kind k, size_t n, st_reduce_op op)
{
    switch (k) {
    case F32: return st_allreduce(g, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, op);
    case AS_BF16: return st_allreduce(g, buf, n, ST_DTYPE_F32, ST_DTYPE_BF16, op);
    default: return st_allreduce(g, buf, n, ST_DTYPE_BF16, ST_DTYPE_BF16, op);
    }
}

/* The exact sum (or average) of the integer inputs, as the payload type
 * holds it: one rounding from the exact fp32 value. */
static bool exact_result(const void *buf, enum kind k, size_t n, int world, st_reduce_op op, size_t *bad)
{
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < world; q++)
            want += exact_input(q, i);
        if (op == ST_AVG)
            want /= (float)world;
        const float got = k == BF16 ? st_bf16_to_f32(((const st_bf16 *)buf)[i]) : ((const float *)buf)[i];
        if (got != (k == F32 ? want : st_bf16_to_f32(st_bf16_from_f32(want)))) {
            *bad = i;
            return false;
        }
    }
    return true;
}

static size_t elem_size(enum kind k) { return k == BF16 ? sizeof(st_bf16) : sizeof(float); }

/* One case: exact inputs checked against the reference, then rough ones
 * hashed.  The algorithm the call reports must be the forced one where it
 * can take the payload. */
static int one_case(st_group *g, const struct many_arg *a, void *buf, enum kind k, size_t n, st_reduce_op op, int c)
{
    const int rank = st_group_rank(g), world = st_group_size(g);
    fill(buf, k, n, rank, true);
    if (k != AS_BF16) {
        const char *algo = st_allreduce_algorithm(g, buf, n, k == BF16 ? ST_DTYPE_BF16 : ST_DTYPE_F32);
        const bool takes = k == F32 || (strcmp(a->algorithm, "direct") && strcmp(a->algorithm, "ring"));
        CHILD_CHECK(!takes || !strncmp(algo, a->algorithm, strlen(a->algorithm)));
    }
    CHILD_CHECK(reduce(g, buf, k, n, op) == ST_OK);
    size_t bad = 0;
    if (!exact_result(buf, k, n, world, op, &bad)) {
        fprintf(stderr, "rank %d of %d, %s x %d threads, kind %d, n=%zu, op %d: element %zu wrong\n", rank, world,
                a->algorithm, a->threads, (int)k, n, (int)op, bad);
        return 1;
    }
    fill(buf, k, n, rank, false);
    CHILD_CHECK(reduce(g, buf, k, n, op) == ST_OK);
    a->out->hash[rank][c] = fnv1a(buf, n * elem_size(k));
    return 0;
}

/* A count past two of the algorithm's pieces, for both paths: the inline
 * lines hold 42 floats (84 bf16), a direct slot 32 KiB, the ring's staging
 * 2048 floats, rsag's and two-level's results N x 1024 (and staging 2048). */
static size_t past_two_pieces(const char *algorithm, size_t world)
{
    if (!strcmp(algorithm, "inline"))
        return 2 * 84 + 3;
    if (!strcmp(algorithm, "direct"))
        return 2 * (32u << 10) / sizeof(float) + 3;
    if (!strcmp(algorithm, "ring"))
        return 2 * STAGING / sizeof(float) + 3;
    return 2 * world * (STAGING / 2 / sizeof(float)) + 3;
}

/* The largest count a case takes: past two pieces, or the fixed 1007. */
static size_t most_elements(const char *algorithm, size_t world)
{
    const size_t big = past_two_pieces(algorithm, world);
    return big > 1007 ? big : 1007;
}

static int many_cases(st_group *g, int rank, void *varg)
{
    struct many_arg *a = varg;
    omp_set_num_threads(a->threads);
    const size_t N = (size_t)st_group_size(g), big = past_two_pieces(a->algorithm, N);
    const size_t sizes[] = {1, N - 1, N + 1, 1007, big}, most = most_elements(a->algorithm, N);
    size_t zc_bytes;
    void *zc = st_group_buffer(g, &zc_bytes);
    void *priv = malloc(most * sizeof(float) + 16);
    CHILD_CHECK(zc && priv && zc_bytes >= most * sizeof(float));
    int c = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int k = 0; k < KINDS; k++)
            for (int in_zc = 0; in_zc < 2; in_zc++)
                for (int op = ST_SUM; op <= ST_AVG; op++, c++)
                    if (sizes[s] && one_case(g, a, in_zc ? zc : (char *)priv + 16, (enum kind)k, sizes[s],
                                             (st_reduce_op)op, c))
                        return 1;
    a->out->cases = c;
    free(priv);
    (void)rank;
    return 0;
}

/* Every rank of every thread count agrees with rank 0 at one thread. */
static void check_algorithm(int world, const char *algorithm, const int *threads, int nthreads, bool two_nodes)
{
    static struct shared_hashes *first;
    struct shared_hashes *out = shared_alloc(sizeof *out);
    if (!first)
        first = shared_alloc(sizeof *first);
    assert_non_null(out);
    for (int t = 0; t < nthreads; t++) {
        char job[64];
        test_job_id(job, sizeof job, "many");
        struct many_arg a = {algorithm, threads[t], two_nodes, out};
        st_group_config cfg = {.job_id = job, .staging_bytes = STAGING, .chunk_bytes = 4096, .thread_bytes = 64,
                               .algorithm = algorithm,
                               .zero_copy_bytes = most_elements(algorithm, (size_t)world) * sizeof(float),
                               .timeout_s = 20};
        memset(out, 0, sizeof *out);
        if (run_ranks_tweaked(world, &cfg, place, many_cases, &a) != 0)
            fail_msg("%d ranks, %s, %d threads: a rank failed", world, algorithm, threads[t]);
        assert_true(out->cases > 0 && out->cases <= MAX_CASES);
        for (int r = 1; r < world; r++)
            assert_memory_equal(out->hash[r], out->hash[0], sizeof(uint64_t) * (size_t)out->cases);
        if (t == 0)
            memcpy(first, out, sizeof *out);
        else
            assert_memory_equal(out->hash[0], first->hash[0], sizeof(uint64_t) * (size_t)out->cases);
        assert_int_equal(leftover_segments(job), 0);
    }
    shared_free(out, sizeof *out);
}

static const int one_to_four[] = {1, 2, 3, 4}, one_and_four[] = {1, 4}, just_one[] = {1};

static void check_world(int world, bool every_thread_count)
{
    const int *ts = every_thread_count ? one_to_four : one_and_four;
    const int nts = every_thread_count ? 4 : 2;
    check_algorithm(world, "rsag", ts, nts, false);
    if (world % 2 == 0 && world >= 4)
        check_algorithm(world, "two-level", ts, nts, true);
    check_algorithm(world, "ring", just_one, 1, false);
    check_algorithm(world, "direct", just_one, 1, false);
    check_algorithm(world, "inline", just_one, 1, false);
}

static void test_3_and_4_ranks(void **state)
{
    (void)state;
    check_world(3, true);
    check_world(4, true);
}

static void test_wide_8_and_16_ranks(void **state)
{
    (void)state;
    check_world(8, true);
    check_world(16, true);
}

static void test_wide_32_and_64_ranks(void **state)
{
    (void)state;
    check_world(32, false);
    check_world(64, false);
}

int main(int argc, char **argv)
{
    st_test_half(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3_and_4_ranks),
        cmocka_unit_test(test_wide_8_and_16_ranks),
        cmocka_unit_test(test_wide_32_and_64_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
