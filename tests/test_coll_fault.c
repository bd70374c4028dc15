/* Failure semantics: a dead or stuck peer never hangs the others, nothing is
 * left in /dev/shm, a full /dev/shm is a clear error, and segments are
 * private to their user and job. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkranks.h"

struct outcome {
    int status[16];
    double returned_at[16];
    char message[16][200];
    volatile pid_t victim_pid;
    double killed_at;
};

static void record(struct outcome *o, int rank, st_status st)
{
    o->status[rank] = (int)st;
    o->returned_at[rank] = mono_now();
    snprintf(o->message[rank], sizeof o->message[rank], "%s", st_last_error());
}

/* ------------------------------------------- peer killed before / during -- */

struct kill_arg {
    struct outcome *out;
    int victim;
    bool during;  /* the parent kills the victim mid-loop */
    size_t count; /* floats per call: 4 takes the inline path, 1 Mi the ring */
};

static int reduce_until_failure(st_group *g, int rank, void *varg)
{
    struct kill_arg *a = varg;
    const size_t n = a->count;
    float *buf = calloc(n, sizeof(float));
    CHILD_CHECK(buf != NULL);
    /* Every rank has finished joining before the victim dies: a rank still
     * inside st_group_create would report the death there instead (a
     * clean error too, but not the one this test is about). */
    st_status st = st_barrier(g);
    if (rank == a->victim) {
        if (!a->during)
            raise(SIGKILL);  /* joined, then dies before the all-reduce */
        a->out->victim_pid = getpid();
    }
    /* Bounded by time, not calls: 4-float calls finish 100,000 iterations
     * before the killer strikes. */
    const double t0 = mono_now();
    while (st == ST_OK && mono_now() - t0 < 30.0)
        st = st_allreduce(g, buf, n, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
    record(a->out, rank, st);
    /* The group stays broken: a second call fails the same way at once. */
    CHILD_CHECK(st_allreduce(g, buf, 4, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) == st);
    free(buf);
    return 0;
}

static void check_peer_death(int world, bool during, size_t count)
{
    char job[64];
    test_job_id(job, sizeof job, during ? "kill-during" : "kill-before");
    struct kill_arg a = {shared_alloc(sizeof(struct outcome)), world - 1, during, count};
    st_group_config cfg = {.job_id = job, .staging_bytes = 1u << 20};
    fflush(NULL);
    pid_t runner = fork();
    assert_true(runner >= 0);
    if (runner == 0) {
        /* The runner owns the ranks; a helper kills the victim once it is
         * deep in its all-reduce loop. */
        if (during) {
            pid_t killer = fork();
            if (killer == 0) {
                while (a.out->victim_pid == 0)
                    usleep(1000);
                usleep(400 * 1000);
                a.out->killed_at = mono_now();
                _exit(kill(a.out->victim_pid, SIGKILL) == 0 ? 0 : 1);
            }
        }
        int failed = run_ranks(world, &cfg, reduce_until_failure, &a);
        _exit(failed == 1 ? 0 : 1); /* exactly the victim fails */
    }
    int status;
    assert_int_equal(waitpid(runner, &status, 0), runner);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    double died_at = a.out->killed_at;
    for (int r = 0; r < world - 1; r++) {
        assert_int_equal(a.out->status[r], ST_ERR_PEER_DEAD);
        assert_non_null(strstr(a.out->message[r], "rank"));
        if (during)
            assert_true(a.out->returned_at[r] - died_at < 3.0);
    }
    assert_int_equal(leftover_segments(job), 0);
    shared_free(a.out, sizeof(struct outcome));
}

static void test_peer_killed_before_allreduce(void **state)
{
    (void)state;
    check_peer_death(2, false, 1u << 20);
    check_peer_death(4, false, 1u << 20);
    check_peer_death(2, false, 4);
}

static void test_peer_killed_during_allreduce(void **state)
{
    (void)state;
    check_peer_death(3, true, 1u << 20);
    check_peer_death(3, true, 4);
    check_peer_death(16, true, 1u << 20);  /* many ranks: rsag, three group-wide waits a call */
}

/* ------------------------------------------------------------ stuck peer -- */

struct stall_arg {
    struct outcome *out;
    size_t count;
};

static int one_rank_stalls(st_group *g, int rank, void *varg)
{
    struct stall_arg *a = varg;
    struct outcome *o = a->out;
    float x[8192] = {0};
    if (rank == 1) {
        sleep(2);  /* alive but not participating */
        return 0;
    }
    double t0 = mono_now();
    st_status st = st_allreduce(g, x, a->count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
    record(o, rank, st);
    o->returned_at[rank] -= t0;
    return 0;
}

/* Both a direct-sized call and an inline-sized one (4 floats): each waits
 * on its own kind of word, and each gives up after the timeout. */
static void test_stuck_peer_times_out(void **state)
{
    (void)state;
    const size_t counts[] = {8192, 4};
    for (size_t c = 0; c < 2; c++) {
        char job[64];
        test_job_id(job, sizeof job, "stuck");
        struct stall_arg a = {shared_alloc(sizeof(struct outcome)), counts[c]};
        st_group_config cfg = {.job_id = job, .timeout_s = 0.5};
        assert_int_equal(run_ranks(2, &cfg, one_rank_stalls, &a), 0);
        assert_int_equal(a.out->status[0], ST_ERR_TIMEOUT);
        assert_true(a.out->returned_at[0] >= 0.5 && a.out->returned_at[0] < 1.9);
        assert_non_null(strstr(a.out->message[0], "rank 1"));
        shared_free(a.out, sizeof(struct outcome));
    }
}

/* A rank stopped (SIGSTOP) in the middle of a 16-rank job: it is alive, so
 * only the timeout can tell; every other rank gives up within it, naming
 * the stopped one, and the job leaves nothing in /dev/shm. */
static int one_rank_stops(st_group *g, int rank, void *varg)
{
    struct stall_arg *a = varg;
    float *buf = calloc(a->count, sizeof(float));
    CHILD_CHECK(buf != NULL);
    st_status st = st_barrier(g);
    for (int i = 0; st == ST_OK && i < 3; i++)
        st = st_allreduce(g, buf, a->count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
    CHILD_CHECK(st == ST_OK);
    if (rank == 5) {
        a->out->victim_pid = getpid();
        raise(SIGSTOP);  /* the parent continues it once the others are out */
        free(buf);
        return 0;
    }
    const double t0 = mono_now();
    st = st_allreduce(g, buf, a->count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
    record(a->out, rank, st);
    a->out->returned_at[rank] -= t0;
    free(buf);
    return 0;
}

static void test_stopped_peer_at_16_ranks(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "stopped16");
    struct stall_arg a = {shared_alloc(sizeof(struct outcome)), 1u << 18};
    st_group_config cfg = {.job_id = job, .timeout_s = 1.0};
    fflush(NULL);
    pid_t runner = fork();
    assert_true(runner >= 0);
    if (runner == 0) {
        pid_t waker = fork();
        if (waker == 0) {  /* lets the stopped rank go once the others have returned */
            const double t0 = mono_now();
            int done = 0;
            while (done < 15 && mono_now() - t0 < 30) {
                usleep(50 * 1000);
                done = 0;
                for (int r = 0; r < 16; r++)
                    done += r != 5 && a.out->status[r] != 0;
            }
            _exit(a.out->victim_pid > 0 && kill(a.out->victim_pid, SIGCONT) == 0 ? 0 : 1);
        }
        int failed = run_ranks(16, &cfg, one_rank_stops, &a);
        waitpid(waker, NULL, 0);
        _exit(failed);
    }
    int status;
    assert_int_equal(waitpid(runner, &status, 0), runner);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    for (int r = 0; r < 16; r++) {
        if (r == 5)
            continue;
        if (a.out->status[r] != ST_ERR_TIMEOUT && a.out->status[r] != ST_ERR_PEER_DEAD)
            fail_msg("rank %d: status %d (%s)", r, a.out->status[r], a.out->message[r]);
        if (!(a.out->returned_at[r] < 1.0 + 2.0))
            fail_msg("rank %d returned after %.2f s with a 1 s timeout", r, a.out->returned_at[r]);
        if (!strstr(a.out->message[r], "rank 5"))
            fail_msg("rank %d does not name the stopped rank: %s", r, a.out->message[r]);
    }
    assert_int_equal(leftover_segments(job), 0);
    shared_free(a.out, sizeof(struct outcome));
}

/* ------------------------------------------------------ shm space, joins -- */

static void test_small_shm_is_a_clear_error(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "space");
    st_group *g = (st_group *)0x1;
    st_group_config cfg = {.rank = 0, .world_size = 1, .job_id = job,
                           .shm_limit_bytes = 64u << 10, .join_timeout_s = 1};
    assert_int_equal(st_group_create(&g, &cfg), ST_ERR_SHM_SPACE);
    assert_null(g);
    assert_non_null(strstr(st_last_error(), "/dev/shm"));
    assert_non_null(strstr(st_last_error(), "--shm-size"));
    assert_int_equal(leftover_segments(job), 0);
}

static void test_missing_peer_times_out_and_cleans_up(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "alone");
    st_group *g = NULL;
    st_group_config cfg = {.rank = 0, .world_size = 2, .job_id = job, .join_timeout_s = 0.3};
    assert_int_equal(st_group_create(&g, &cfg), ST_ERR_TIMEOUT);
    assert_non_null(strstr(st_last_error(), "rank 1 did not join"));
    assert_int_equal(leftover_segments(job), 0);
}

static void test_stale_segment_is_refused(void **state)
{
    (void)state;
    char job[64], name[128];
    test_job_id(job, sizeof job, "stale");
    assert_int_equal(st_segment_name(name, sizeof name, job, 0), ST_OK);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    close(fd);
    st_group *g = NULL;
    st_group_config cfg = {.rank = 0, .world_size = 1, .job_id = job};
    assert_int_equal(st_group_create(&g, &cfg), ST_ERR_EXISTS);
    assert_non_null(strstr(st_last_error(), name));
    assert_int_equal(st_segment_cleanup(job, 1), 1);
    assert_int_equal(leftover_segments(job), 0);
}

/* ------------------------------------------------------------ permissions -- */

static void test_segment_is_private_to_user_and_job(void **state)
{
    (void)state;
    char job_a[64], job_b[64], name[128], path[160];
    test_job_id(job_a, sizeof job_a, "perm-a");
    test_job_id(job_b, sizeof job_b, "perm-b");
    assert_int_equal(st_segment_name(name, sizeof name, job_a, 0), ST_OK);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    assert_non_null(strstr(name, job_a));

    fflush(NULL);
    pid_t a0 = fork();  /* rank 0 of job A waits for a rank 1 that never comes */
    assert_true(a0 >= 0);
    if (a0 == 0) {
        st_group *g = NULL;
        st_group_config c = {.rank = 0, .world_size = 2, .job_id = job_a, .join_timeout_s = 1.5};
        _exit(st_group_create(&g, &c) == ST_ERR_TIMEOUT ? 0 : 1);
    }
    struct stat sb;
    int tries = 0;
    while (stat(path, &sb) != 0 && tries++ < 1000)
        usleep(1000);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(sb.st_uid, getuid());

    /* Rank 1 of job B cannot join job A's rank 0: it only ever looks for
     * job B's names, and finds none. */
    st_group *g = NULL;
    st_group_config c = {.rank = 1, .world_size = 2, .job_id = job_b, .join_timeout_s = 0.3};
    assert_int_equal(st_group_create(&g, &c), ST_ERR_TIMEOUT);
    int status;
    assert_int_equal(waitpid(a0, &status, 0), a0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(leftover_segments(job_a), 0);
    assert_int_equal(leftover_segments(job_b), 0);
}

static void test_world_readable_peer_segment_is_refused(void **state)
{
    (void)state;
    char job[64], name[128];
    test_job_id(job, sizeof job, "mode");
    assert_int_equal(st_segment_name(name, sizeof name, job, 1), ST_OK);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0644);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0644), 0);
    assert_int_equal(ftruncate(fd, 1 << 20), 0);
    close(fd);
    st_group *g = NULL;
    st_group_config c = {.rank = 0, .world_size = 2, .job_id = job, .join_timeout_s = 1};
    assert_int_equal(st_group_create(&g, &c), ST_ERR_MISMATCH);
    assert_non_null(strstr(st_last_error(), "mode 644"));
    st_segment_cleanup(job, 2);
    assert_int_equal(leftover_segments(job), 0);
}

/* A file of the wrong size under a peer's name: a foreign file (no
 * segment header) is reported as such, not as ranks started with other
 * sizes; a real peer segment of another size is. */
static void test_foreign_file_at_a_peer_name(void **state)
{
    (void)state;
    char job[64], name[128];
    test_job_id(job, sizeof job, "foreign");
    assert_int_equal(st_segment_name(name, sizeof name, job, 1), ST_OK);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    close(fd);
    st_group *g = NULL;
    st_group_config c = {.rank = 0, .world_size = 2, .job_id = job, .join_timeout_s = 10};
    double t0 = mono_now();
    st_status st = st_group_create(&g, &c);
    double took = mono_now() - t0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st_last_error());
    st_segment_cleanup(job, 2);  /* before any assertion, so a failure leaves nothing behind */
    assert_int_equal(leftover_segments(job), 0);
    assert_int_equal(st, ST_ERR_MISMATCH);
    if (!strstr(msg, "holds 4096 bytes that no rank of this job wrote") || strstr(msg, "different sizes"))
        fail_msg("%s", msg);
    assert_true(took < 5);  /* told within the two seconds, not at the join timeout */

    /* Rank 1 joins with a larger staging area than rank 0: whichever of the
     * two maps the other's segment first says so (the other then times out
     * or sees it gone). */
    test_job_id(job, sizeof job, "sizes");
    fflush(NULL);
    pid_t peer = fork();
    assert_true(peer >= 0);
    if (peer == 0) {
        st_group *pg = NULL;
        st_group_config pc = {.rank = 1, .world_size = 2, .job_id = job, .join_timeout_s = 2,
                              .staging_bytes = 8u << 20};
        st_status peer_st = st_group_create(&pg, &pc);
        _exit(peer_st == ST_OK ? 1 : strstr(st_last_error(), "ranks were started with different sizes") ? 0 : 2);
    }
    c = (st_group_config){.rank = 0, .world_size = 2, .job_id = job, .join_timeout_s = 2};
    st = st_group_create(&g, &c);
    bool rank0_saw = st == ST_ERR_MISMATCH && strstr(st_last_error(), "ranks were started with different sizes");
    assert_true(st == ST_ERR_MISMATCH || st == ST_ERR_TIMEOUT);
    int status;
    assert_int_equal(waitpid(peer, &status, 0), peer);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 1);
    assert_true(rank0_saw || WEXITSTATUS(status) == 0);
    st_segment_cleanup(job, 2);
    assert_int_equal(leftover_segments(job), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_killed_before_allreduce),
        cmocka_unit_test(test_peer_killed_during_allreduce),
        cmocka_unit_test(test_stuck_peer_times_out),
        cmocka_unit_test(test_stopped_peer_at_16_ranks),
        cmocka_unit_test(test_small_shm_is_a_clear_error),
        cmocka_unit_test(test_missing_peer_times_out_and_cleans_up),
        cmocka_unit_test(test_stale_segment_is_refused),
        cmocka_unit_test(test_segment_is_private_to_user_and_job),
        cmocka_unit_test(test_world_readable_peer_segment_is_refused),
        cmocka_unit_test(test_foreign_file_at_a_peer_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
