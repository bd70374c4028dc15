/* Argument checking and the environment join, single process. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmtrain/bf16.h"
#include "shmtrain/env.h"

static void expect_create_error(st_group_config cfg, st_status want, const char *fragment)
{
    st_group *g = NULL;
    assert_int_equal(st_group_create(&g, &cfg), want);
    assert_null(g);
    assert_non_null(strstr(st_last_error(), fragment));
}

static void test_bad_configs(void **state)
{
    (void)state;
    expect_create_error((st_group_config){.rank = 0, .world_size = 0, .job_id = "j"},
                        ST_ERR_INVALID, "world size 0");
    expect_create_error((st_group_config){.rank = 2, .world_size = 2, .job_id = "j"},
                        ST_ERR_INVALID, "rank 2");
    expect_create_error((st_group_config){.rank = -1, .world_size = 2, .job_id = "j"},
                        ST_ERR_INVALID, "rank -1");
    expect_create_error((st_group_config){.rank = 0, .world_size = 1, .job_id = "a/b"},
                        ST_ERR_INVALID, "job id 'a/b'");
    expect_create_error((st_group_config){.rank = 0, .world_size = 1, .job_id = ""},
                        ST_ERR_INVALID, "job id");
    expect_create_error((st_group_config){.rank = 0, .world_size = 1, .job_id = NULL},
                        ST_ERR_INVALID, "job id");
}

static void test_world_of_one(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "one");
    st_group *g = NULL;
    st_group_config cfg = {.rank = 0, .world_size = 1, .job_id = job, .zero_copy_bytes = 1000};
    assert_int_equal(st_group_create(&g, &cfg), ST_OK);
    assert_int_equal(leftover_segments(job), 0);  /* unlinked once joined */
    assert_int_equal(st_group_rank(g), 0);
    assert_int_equal(st_group_size(g), 1);
    assert_string_equal(st_group_job_id(g), job);
    size_t bytes = 0;
    float *zc = st_group_buffer(g, &bytes);
    assert_non_null(zc);
    assert_int_equal(bytes, 1000);
    assert_int_equal((uintptr_t)zc % 64, 0);
    for (int i = 0; i < 250; i++)
        assert_true(zc[i] == 0.0f);
    float x[3] = {1, 2, 3};
    assert_int_equal(st_allreduce(g, x, 3, ST_DTYPE_F32, ST_DTYPE_F32, ST_AVG), ST_OK);
    assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3);
    assert_int_equal(st_broadcast(g, x, sizeof x, 0), ST_OK);
    assert_int_equal(st_barrier(g), ST_OK);
    /* Bad calls are refused, and do not break the group. */
    assert_int_equal(st_broadcast(g, x, sizeof x, 1), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "root 1"));
    assert_int_equal(st_allreduce(g, NULL, 3, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM), ST_ERR_INVALID);
    assert_int_equal(st_allreduce(g, x, 3, ST_DTYPE_F32, ST_DTYPE_F32, (st_reduce_op)7), ST_ERR_INVALID);
    assert_int_equal(st_allreduce(g, x, 0, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM), ST_OK);
    st_group_destroy(g);
    st_group_destroy(NULL);
}

/* A name mpirun's killed job left: an old one goes when the next group
 * joins; a fresh one (a job still starting) stays. */
static void make_segment(const char *name, time_t age_s)
{
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    struct timespec when[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
    assert_int_equal(futimens(fd, when), 0);
    close(fd);
}

static void test_stale_names_are_reaped(void **state)
{
    (void)state;
    char old_job[64], new_job[64], stale[160], fresh[160], job[64];
    test_job_id(old_job, sizeof old_job, "stale");
    test_job_id(new_job, sizeof new_job, "fresh");
    assert_int_equal(st_segment_name(stale, sizeof stale, old_job, 0), ST_OK);
    assert_int_equal(st_segment_name(fresh, sizeof fresh, new_job, 0), ST_OK);
    make_segment(stale, 700);  /* older than the 600 s floor */
    make_segment(fresh, 5);
    test_job_id(job, sizeof job, "reaper");
    st_group *g = NULL;
    st_group_config cfg = {.rank = 0, .world_size = 1, .job_id = job};
    assert_int_equal(st_group_create(&g, &cfg), ST_OK);
    assert_int_equal(leftover_segments(old_job), 0);
    assert_int_equal(leftover_segments(new_job), 1);
    st_group_destroy(g);
    /* Called alone with its own age (never a small one here: the suite's
     * other tests start jobs at the same time). */
    make_segment(stale, 4000);
    assert_true(st_segment_reap_stale(3600) >= 1);
    assert_int_equal(leftover_segments(old_job), 0);
    assert_int_equal(leftover_segments(new_job), 1);
    assert_int_equal(shm_unlink(fresh), 0);
}

static st_status join_from_env(st_group **g)
{
    st_group_config cfg = {0};
    char job[ST_JOB_ID_MAX + 1];
    st_status st = st_group_config_from_env(&cfg, job);
    return st == ST_OK ? st_group_create(g, &cfg) : st;
}

static void test_from_env(void **state)
{
    (void)state;
    st_group *g = NULL;
    unsetenv("SHMTRAIN_WORLD_SIZE");
    unsetenv("WORLD_SIZE");
    unsetenv("SHMTRAIN_RANK");
    unsetenv("RANK");
    unsetenv("SHMTRAIN_JOB_ID");
    assert_int_equal(join_from_env(&g), ST_OK);  /* a world of one */
    assert_int_equal(st_group_size(g), 1);
    assert_non_null(strstr(st_group_job_id(g), "local-"));
    st_group_destroy(g);

    setenv("WORLD_SIZE", "2", 1);
    assert_int_equal(join_from_env(&g), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "RANK"));
    setenv("RANK", "1", 1);
    assert_int_equal(join_from_env(&g), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "SHMTRAIN_JOB_ID"));
    setenv("SHMTRAIN_WORLD_SIZE", "two", 1);
    assert_int_equal(join_from_env(&g), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "WORLD_SIZE"));
    unsetenv("SHMTRAIN_WORLD_SIZE");
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
}

static const char *const TUNING_VARS[] = {"SHMTRAIN_STAGING_BYTES", "SHMTRAIN_CHUNK_BYTES", "SHMTRAIN_SMALL_BYTES",
                                          "SHMTRAIN_SMALL_ZERO_COPY_BYTES", "SHMTRAIN_INLINE_BYTES",
                                          "SHMTRAIN_TIMEOUT", "SHMTRAIN_JOIN_TIMEOUT", "SHMTRAIN_SPIN",
                                          "SHMTRAIN_HEARTBEAT_FILE"};

static void unset_tuning(void)
{
    for (size_t i = 0; i < sizeof TUNING_VARS / sizeof *TUNING_VARS; i++)
        unsetenv(TUNING_VARS[i]);
}

/* The collectives' variables reach the config through the main()'s one
 * reader; the program's own choice wins; "0" is "never" only where the
 * field has a never. */
static void test_tuning_from_env(void **state)
{
    (void)state;
    unset_tuning();
    st_group_config none = {0};
    assert_int_equal(st_group_tuning_from_env(&none), ST_OK);
    assert_int_equal(none.chunk_bytes, 0);
    assert_null(none.heartbeat_path);

    setenv("SHMTRAIN_STAGING_BYTES", "65536", 1);
    setenv("SHMTRAIN_CHUNK_BYTES", "8192", 1);
    setenv("SHMTRAIN_SMALL_BYTES", "0", 1);
    setenv("SHMTRAIN_INLINE_BYTES", "0", 1);
    setenv("SHMTRAIN_TIMEOUT", "2.5", 1);
    setenv("SHMTRAIN_SPIN", "7", 1);
    setenv("SHMTRAIN_HEARTBEAT_FILE", "/nonexistent/hb", 1);
    st_group_config c = {.staging_bytes = 16384, .rank = 0, .world_size = 1, .job_id = "tuning-env"};
    assert_int_equal(st_group_tuning_from_env(&c), ST_OK);
    assert_int_equal(c.staging_bytes, 16384);  /* the program's */
    assert_int_equal(c.chunk_bytes, 8192);
    assert_true(c.small_bytes == ST_SMALL_NEVER);
    assert_true(c.inline_bytes == ST_INLINE_NEVER);
    assert_int_equal(c.small_zero_copy_bytes, 0);  /* unset: the group's default */
    assert_true(c.timeout_s == 2.5);
    assert_int_equal(c.spin, 7);
    assert_string_equal(c.heartbeat_path, "/nonexistent/hb");
    st_group *g = NULL;  /* a heartbeat that cannot open stays off */
    assert_int_equal(st_group_create(&g, &c), ST_OK);
    st_group_destroy(g);

    const char *bad[][2] = {{"SHMTRAIN_CHUNK_BYTES", "12k"}, {"SHMTRAIN_STAGING_BYTES", "0"},
                            {"SHMTRAIN_SMALL_BYTES", "-5"}, {"SHMTRAIN_TIMEOUT", "0"},
                            {"SHMTRAIN_JOIN_TIMEOUT", "soon"}, {"SHMTRAIN_SPIN", "0"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unset_tuning();
        setenv(bad[i][0], bad[i][1], 1);
        st_group_config b = {0};
        assert_int_equal(st_group_tuning_from_env(&b), ST_ERR_INVALID);
        char want[96];
        snprintf(want, sizeof want, "%s='%s'", bad[i][0], bad[i][1]);
        assert_non_null(strstr(st_last_error(), want));
    }
    unset_tuning();
}

/* fp32 on a rounding wire: floats that travel as bf16 or fp16 end with the
 * bits of the rounded payload's own all-reduce (and fp32 as fp32's), for every
 * size class: inline (64 B), the slices in one piece, in several pieces of a
 * 16 KiB staging area with a short last piece, one rank alone. */
struct wire_case {
    size_t count;
    st_reduce_op op;
    st_dtype wire;
};

static float wire_value(int rank, size_t i) { return (float)((rank + 1) * 0.37 + (double)i * 1.0009e-3 - 3.0); }

static int wire_rank(st_group *g, int rank, void *arg)
{
    const struct wire_case *c = arg;
    float *x = malloc(c->count * sizeof(float)), *want = malloc(c->count * sizeof(float));
    uint16_t *b = malloc(c->count * sizeof(uint16_t));
    CHILD_CHECK(x && want && b);
    for (size_t i = 0; i < c->count; i++)
        x[i] = want[i] = wire_value(rank, i);
    if (c->wire != ST_DTYPE_F32) {
        CHILD_CHECK(st_dtype_convert_n(b, c->wire, x, ST_DTYPE_F32, c->count));
        CHILD_CHECK(st_allreduce(g, b, c->count, c->wire, c->wire, c->op) == ST_OK);
        CHILD_CHECK(st_dtype_convert_n(want, ST_DTYPE_F32, b, c->wire, c->count));
    } else {
        CHILD_CHECK(st_allreduce(g, want, c->count, ST_DTYPE_F32, ST_DTYPE_F32, c->op) == ST_OK);
    }
    CHILD_CHECK(st_allreduce(g, x, c->count, ST_DTYPE_F32, c->wire, c->op) == ST_OK);
    CHILD_CHECK(memcmp(x, want, c->count * sizeof(float)) == 0);
    free(x), free(want), free(b);
    return 0;
}

static st_status no_stage(void *ctx, float *part, size_t count)
{
    (void)ctx, (void)part, (void)count;
    return ST_OK;
}

static void test_allreduce_wire(void **state)
{
    (void)state;
    const struct wire_case cases[] = {
        {16, ST_AVG, ST_DTYPE_BF16},    {3000, ST_SUM, ST_DTYPE_BF16}, {20000, ST_AVG, ST_DTYPE_BF16},
        {20000, ST_SUM, ST_DTYPE_F32},  {1, ST_AVG, ST_DTYPE_BF16},   {16, ST_AVG, ST_DTYPE_F16},
        {3000, ST_SUM, ST_DTYPE_F16},   {20000, ST_AVG, ST_DTYPE_F16}, {1, ST_SUM, ST_DTYPE_F16},
    };
    for (int world = 1; world <= 3; world++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            char job[64];
            test_job_id(job, sizeof job, "wire");
            st_group_config cfg = {.job_id = job, .staging_bytes = 16384};
            if (run_ranks(world, &cfg, wire_rank, (void *)&cases[i]) != 0)
                fail_msg("%d ranks, %zu values as %s: not the typed all-reduce's bits", world, cases[i].count,
                         st_dtype_name(cases[i].wire));
        }
    /* Pairs that are not a payload as itself or fp32 on a rounding wire, and a
     * stage on a type a sum cannot round into: refused by name. */
    st_group *g = NULL;
    st_group_config one = {.rank = 0, .world_size = 1, .job_id = "wire-bad"};
    assert_int_equal(st_group_create(&g, &one), ST_OK);
    float v = 1;
    assert_int_equal(st_allreduce(g, &v, 1, ST_DTYPE_F32, ST_DTYPE_I32, ST_SUM), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "fp32 values cannot travel as i32"));
    assert_int_equal(st_allreduce(g, &v, 1, ST_DTYPE_BF16, ST_DTYPE_F16, ST_SUM), ST_ERR_INVALID);
    assert_int_equal(st_allreduce(g, &v, 1, ST_DTYPE_F16, ST_DTYPE_F32, ST_SUM), ST_ERR_INVALID);
    assert_int_equal(st_allreduce_staged(g, &v, 1, ST_DTYPE_I32, ST_DTYPE_I32, ST_SUM, no_stage, NULL, 1),
                     ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "i32 payloads take no stage"));
    st_group_destroy(g);
}

/* Round to nearest, ties to even; NaN stays NaN; exact values survive. */
/* st_group_take: 5 ranks on 2 cores (preempted mid-take), 300 rounds of 7
 * tickets raised after a barrier, as the trainer's dynamic balance takes a
 * step's micro-batches: every ticket goes to exactly one rank, none is
 * handed out past a round's end, the counters add up. */
enum { TAKE_WORLD = 5, TAKE_ROUNDS = 300, TAKE_PER_ROUND = 7 };
struct take_log {
    uint32_t taken[TAKE_ROUNDS * TAKE_PER_ROUND];
    uint64_t counted[TAKE_WORLD];
};

static int take_rank(st_group *g, int rank, void *arg)
{
    struct take_log *log = arg;
    uint64_t ticket;
    for (uint64_t round = 0; round < TAKE_ROUNDS; round++) {
        const uint64_t end = (round + 1) * TAKE_PER_ROUND;
        while (st_group_take(g, end, &ticket)) {
            CHILD_CHECK(ticket >= round * TAKE_PER_ROUND && ticket < end);
            __atomic_add_fetch(&log->taken[ticket], 1, __ATOMIC_SEQ_CST);
        }
        CHILD_CHECK(!st_group_take(g, end, &ticket));  /* gone stays gone */
        CHILD_CHECK(st_barrier(g) == ST_OK);
    }
    st_coll_counters c;
    st_group_counters(g, &c);
    log->counted[rank] = c.tickets;
    return 0;
}

static void test_tickets_each_taken_once(void **state)
{
    (void)state;
    struct take_log *log = shared_alloc(sizeof *log);
    char job[64];
    test_job_id(job, sizeof job, "take");
    st_group_config cfg = {.job_id = job};
    assert_int_equal(run_ranks(TAKE_WORLD, &cfg, take_rank, log), 0);
    uint64_t counted = 0;
    for (int r = 0; r < TAKE_WORLD; r++)
        counted += log->counted[r];
    assert_int_equal(counted, TAKE_ROUNDS * TAKE_PER_ROUND);
    for (int k = 0; k < TAKE_ROUNDS * TAKE_PER_ROUND; k++) {
        if (log->taken[k] != 1)
            fail_msg("ticket %d taken %u times", k, log->taken[k]);
    }
    shared_free(log, sizeof *log);
    assert_int_equal(leftover_segments(job), 0);
}

static void test_bf16_conversion(void **state)
{
    (void)state;
    assert_int_equal(st_bf16_from_f32(1.0f), 0x3f80);
    assert_true(st_bf16_to_f32(0x3f80) == 1.0f);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even, 1. */
    assert_int_equal(st_bf16_from_f32(1.0f + 1.0f / 256), 0x3f80);
    /* 1 + 3 x 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: up to the even. */
    assert_int_equal(st_bf16_from_f32(1.0f + 3.0f / 256), 0x3f82);
    assert_int_equal(st_bf16_from_f32(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);  /* above half: up */
    assert_int_equal(st_bf16_from_f32(-2.5f), 0xc020);
    assert_true(st_bf16_to_f32(st_bf16_from_f32(NAN)) != st_bf16_to_f32(st_bf16_from_f32(NAN)));
    assert_int_equal(st_bf16_from_f32(INFINITY), 0x7f80);
    assert_int_equal(st_bf16_from_f32(3.4e38f), 0x7f80);  /* beyond bf16's largest: infinity */
    assert_string_equal(st_dtype_name(ST_DTYPE_BF16), "bf16");
    assert_int_equal(st_dtype_size(ST_DTYPE_BF16), 2);
}

/* The array conversions are the element ones, bit for bit: every 16-bit
 * pattern widened, and 2^20 spread-out fp32 patterns (NaNs with low bits,
 * signalling NaNs, ties, denormals, the edge of overflow among them)
 * rounded; an odd count, so the vector loops' tails run too. */
static void test_bf16_array_conversion(void **state)
{
    (void)state;
    enum { N = (1 << 20) + 7 };
    float *f = malloc(N * sizeof *f), *back = malloc(65536 * sizeof *back);
    st_bf16 *h = malloc(N * sizeof *h), *all = malloc(65536 * sizeof *all);
    assert_true(f && h && back && all);
    static const uint32_t edges[] = {0x7fc00001, 0x7f800001, 0xff800001, 0x7fffffff, 0x3f808000, 0x3f818000,
                                     0x3f807fff, 0x7f7fffff, 0x7f7f8000, 0x00008000, 0x80018000, 0x7f800000};
    for (uint32_t i = 0; i < N; i++) {
        uint32_t u = i < sizeof edges / sizeof *edges ? edges[i] : i * 2654435761u;
        memcpy(&f[i], &u, sizeof u);
    }
    st_bf16_from_f32_n(h, f, N);
    for (uint32_t i = 0; i < N; i++)
        if (h[i] != st_bf16_from_f32(f[i]))
            fail_msg("st_bf16_from_f32_n [%u] = %#x, want %#x", i, h[i], st_bf16_from_f32(f[i]));
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (st_bf16)i;
    st_bf16_to_f32_n(back, all, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        const float want = st_bf16_to_f32(all[i]);
        assert_memory_equal(&back[i], &want, sizeof want);
    }
    free(f), free(h), free(back), free(all);
}

static void test_status_strings(void **state)
{
    (void)state;
    assert_string_equal(st_status_str(ST_OK), "ok");
    assert_string_equal(st_status_str(ST_ERR_PEER_DEAD), "peer-dead");
    assert_string_equal(st_status_str(ST_ERR_TIMEOUT), "timeout");
    assert_string_equal(st_status_str((st_status)999), "unknown-status");
}

static void test_algorithm_choice(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "algo");
    assert_string_equal(st_allreduce_algorithm(NULL, NULL, 10, ST_DTYPE_F32), "none");
    st_group *g = NULL;
    st_group_config cfg = {.rank = 0, .world_size = 1, .job_id = job};
    assert_int_equal(st_group_create(&g, &cfg), ST_OK);
    assert_string_equal(st_allreduce_algorithm(g, NULL, 10, ST_DTYPE_BF16), "none");
    st_group_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_stale_names_are_reaped),
        cmocka_unit_test(test_from_env),
        cmocka_unit_test(test_tuning_from_env),
        cmocka_unit_test(test_allreduce_wire),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_bf16_conversion),
        cmocka_unit_test(test_bf16_array_conversion),
        cmocka_unit_test(test_algorithm_choice),
        cmocka_unit_test(test_tickets_each_taken_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
