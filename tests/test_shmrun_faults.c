/* shmrun when ranks fail: a failing rank stops the gang (and the
 * launcher names it), a rank that ignores SIGTERM gets SIGKILL, restarts
 * resume or give up, and a stopped or silent rank is found and blamed. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmrun_fixture.h"

/* ------------------------------------------------------------ failures -- */

static void check_gang_failure(const char *tag, char *const probe_args[], const char *want_end)
{
    char *argv[32] = {(char *)shmrun, "-n", "2", "--grace", "2", "--job-id", (char *)tag, "--log-dir", "logs",
                      "--", (char *)probe};
    int n = 11;
    for (int i = 0; probe_args[i]; i++)
        argv[n++] = probe_args[i];
    argv[n] = NULL;
    struct result r = run(argv, tag);
    assert_int_equal(exit_code(&r), 1);
    assert_true(r.seconds < 8);  /* rank 0 sleeps 60 s: it was stopped */
    assert_non_null(strstr(r.err, "FAILED"));
    assert_non_null(strstr(r.err, "root cause: rank 1"));
    assert_non_null(strstr(r.err, want_end));
    assert_non_null(strstr(r.err, "signal 15 (TERM), stopped"));  /* rank 0 */
    assert_non_null(strstr(r.err, "rank1_cores_"));                /* log path in the table */
    assert_int_equal(leftover_segments(tag), 0);
    result_free(&r);
}

static void test_failing_rank_stops_the_gang(void **state)
{
    (void)state;
    check_gang_failure("exit3", (char *[]){"--exit-rank", "1", "--code", "3", "--sleep", "60", NULL}, "exit 3");
    check_gang_failure("sigkill", (char *[]){"--kill-rank", "1", "--sleep", "60", NULL}, "signal 9 (KILL)");
    /* A rank that died holding a named segment: the launcher removes it. */
    check_gang_failure("leftover", (char *[]){"--leave-segment", "1", "--sleep", "60", NULL}, "exit 9");
}

/* A rank's bad flag (exit 2, the usage status) is the gang's: shmrun exits
 * 2 as the program would alone, and does not restart into the same refusal. */
static void test_bad_flag_is_passed_on_not_restarted(void **state)
{
    (void)state;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--oversubscribe", "--max-restarts", "2",
                                     "--job-id", "usage", "--log-dir", "logs", "--", (char *)probe, "--exit-rank", "1",
                                     "--code", "2", "--sleep", "60", NULL},
                          "usage");
    assert_int_equal(exit_code(&r), 2);
    assert_null(strstr(r.err, "restarting the gang"));
    assert_non_null(strstr(r.err, "exit 2"));
    result_free(&r);
}

static void test_sigterm_ignored_gets_sigkill(void **state)
{
    (void)state;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--grace", "0.5", "--job-id", "stubborn",
                                     "--log-dir", "logs", "--", (char *)probe, "--exit-rank", "1", "--code",
                                     "4", "--sleep", "60", "--ignore-term", NULL},
                          "stubborn");
    assert_int_equal(exit_code(&r), 1);
    assert_true(r.seconds < 5);
    assert_non_null(strstr(r.err, "signal 9 (KILL), stopped"));
    result_free(&r);
}

static void test_restart_resumes(void **state)
{
    (void)state;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--max-restarts", "2", "--job-id", "restart",
                                     "--log-dir", "logs", "--", (char *)probe, "--fail-first-attempt", "1",
                                     NULL},
                          "restart");
    assert_int_equal(exit_code(&r), 0);
    assert_non_null(strstr(r.err, "restarting the gang (restart 1 of 2)"));
    assert_null(strstr(r.err, "restart 2 of 2"));
    char *log = rank_log("restart", 1, 1);
    assert_non_null(log);
    assert_non_null(strstr(log, "restart=1"));
    assert_non_null(strstr(log, "done"));
    free(log);
    result_free(&r);

    r = run((char *[]){(char *)shmrun, "-n", "2", "--max-restarts", "1", "--job-id", "giveup", "--log-dir",
                       "logs", "--", (char *)probe, "--exit-rank", "0", "--code", "5", NULL},
            "giveup");
    assert_int_equal(exit_code(&r), 1);
    assert_non_null(strstr(r.err, "FAILED (attempt 2 of 2)"));
    result_free(&r);
}

/* -------------------------------------------------------------- stalls -- */

/* The pid shmrun.log gives rank `rank` of job `job`, waiting up to 30 s
 * until that rank has printed `ready` in its log. */
static pid_t started_rank(const char *job, int rank, const char *ready)
{
    char path[512];
    snprintf(path, sizeof path, "%s/logs/%s/shmrun.log", workdir, job);
    for (int i = 0; i < 1500; i++, usleep(20 * 1000)) {
        char *log = slurp(path), *rank_text = rank_log(job, 0, rank), key[32];
        snprintf(key, sizeof key, "rank %d: pid ", rank);
        const char *at = log ? strstr(log, key) : NULL;
        pid_t pid = at ? (pid_t)atoi(at + strlen(key)) : 0;
        bool is_ready = rank_text && strstr(rank_text, ready);
        free(log);
        free(rank_text);
        if (pid > 0 && is_ready)
            return pid;
    }
    fail_msg("rank %d of %s never printed '%s'", rank, job, ready);
    return -1;
}

/* The failure table's row for rank 1 gives the stall and its end. */
static void stall_in_the_table(const char *err, const char *stall)
{
    const char *row = strstr(err, "\n    1 ");
    const char *end = row ? strchr(row + 1, '\n') : NULL;
    const char *found = row ? strstr(row, stall) : NULL;
    if (!found || !end || found > end || !strstr(found, ", killed") || strstr(found, ", killed") > end)
        fail_msg("rank 1's row does not say '%s ..., killed':\n%s", stall, err);
}

/* SIGSTOP on one rank: the launcher says so at once, and after
 * --stall-timeout stops the gang with that rank as the root cause. */
static void test_stopped_rank_stops_the_gang(void **state)
{
    (void)state;
    pid_t pid = spawn((char *[]){(char *)shmrun, "-n", "2", "--stall-timeout", "2", "--grace", "1", "--job-id",
                                 "stopped", "--log-dir", "logs", "--", (char *)probe, "--join", "--loop", "100000",
                                 NULL},
                      "stopped");
    assert_true(pid > 0);
    pid_t victim = started_rank("stopped", 1, "allreduce=ok");
    double t0 = mono_now();
    assert_int_equal(kill(victim, SIGSTOP), 0);
    struct result r = wait_result(pid, "stopped", t0, 20);
    assert_int_equal(exit_code(&r), 1);
    if (!(r.seconds > 1.5 && r.seconds < 8))
        fail_msg("the gang stopped %.1f s after SIGSTOP (timeout 2 s, grace 1 s)", r.seconds);
    char want[128];
    snprintf(want, sizeof want, "rank 1 (pid %d) is stopped (state T", (int)victim);
    assert_non_null(strstr(r.err, want));
    assert_non_null(strstr(r.err, "root cause: rank 1"));
    assert_non_null(strstr(r.err, "stalled: stopped (state T"));
    stall_in_the_table(r.err, "stopped (state T");
    assert_true(kill(victim, 0) != 0);  /* killed, not left stopped */
    assert_int_equal(leftover_segments("stopped"), 0);
    result_free(&r);
}

/* A rank stopped and continued within the timeout: the job finishes. */
static void test_stopped_rank_that_continues_resumes(void **state)
{
    (void)state;
    pid_t pid = spawn((char *[]){(char *)shmrun, "-n", "2", "--stall-timeout", "30", "--job-id", "paused",
                                 "--log-dir", "logs", "--", (char *)probe, "--join", "--loop", "150", NULL},
                      "paused");
    assert_true(pid > 0);
    pid_t victim = started_rank("paused", 1, "allreduce=ok");
    assert_int_equal(kill(victim, SIGSTOP), 0);
    usleep(1500 * 1000);
    assert_int_equal(kill(victim, SIGCONT), 0);
    struct result r = wait_result(pid, "paused", mono_now(), 60);
    if (exit_code(&r) != 0)
        fail_msg("a stopped-then-continued rank broke the job: %s", r.err);
    char want[128];
    snprintf(want, sizeof want, "rank 1 (pid %d) is stopped", (int)victim);
    assert_non_null(strstr(r.err, want));
    snprintf(want, sizeof want, "rank 1 (pid %d) continued after", (int)victim);
    assert_non_null(strstr(r.err, want));
    for (int rank = 0; rank < 2; rank++) {
        char *log = rank_log("paused", 0, rank);
        assert_non_null(strstr(log, "loop=ok iterations=150"));
        free(log);
    }
    result_free(&r);
}

/* A rank that runs but never reaches its next collective: the launcher
 * blames it, not the peer waiting for it. */
static void test_silent_rank_stops_the_gang(void **state)
{
    (void)state;
    double t0 = mono_now();
    pid_t pid = spawn((char *[]){(char *)shmrun, "-n", "2", "--stall-timeout", "2", "--grace", "1",
                                 "--job-id", "silent", "--log-dir", "logs", "--", (char *)probe, "--join",
                                 "--loop", "100000", "--spin-rank", "1", "--spin-at", "30", NULL},
                      "silent");
    assert_true(pid > 0);
    struct result r = wait_result(pid, "silent", t0, 30);
    assert_int_equal(exit_code(&r), 1);
    assert_true(r.seconds < 15);
    if (!strstr(r.err, "root cause: rank 1") || !strstr(r.err, "stalled: no progress for") ||
        !strstr(r.err, "running, not waiting for a peer") || !strstr(r.err, "waiting for rank 1 in a collective"))
        fail_msg("%s", r.err);
    stall_in_the_table(r.err, "no progress for");
    assert_int_equal(leftover_segments("silent"), 0);
    result_free(&r);
}

/* A rank that exits ST_EXIT_PEER_FAILED first is not the root cause when
 * its peer fails for a reason of its own a moment later; alone, it is. */
static void test_peer_failed_exit_defers_to_the_real_failure(void **state)
{
    (void)state;
    struct result r = run((char *[]){(char *)shmrun, "-n", "2", "--grace", "2", "--job-id", "secondary",
                                     "--log-dir", "logs", "--", (char *)probe, "--peer-failed-rank", "1",
                                     "--exit-rank", "0", "--code", "4", "--sleep", "60", NULL},
                          "secondary");
    assert_int_equal(exit_code(&r), 1);
    if (!strstr(r.err, "root cause: rank 0") || !strstr(r.err, "exit 4") || !strstr(r.err, "exit 75 (a peer failed)"))
        fail_msg("%s", r.err);
    result_free(&r);
    r = run((char *[]){(char *)shmrun, "-n", "2", "--grace", "1", "--job-id", "onlysecondary", "--log-dir", "logs",
                       "--", (char *)probe, "--peer-failed-rank", "1", "--sleep", "60", NULL},
            "onlysecondary");
    assert_int_equal(exit_code(&r), 1);
    assert_true(r.seconds < 8);
    if (!strstr(r.err, "root cause: rank 1") || !strstr(r.err, "exit 75 (a peer failed)") ||
        !strstr(r.err, "signal 15 (TERM), stopped"))
        fail_msg("%s", r.err);
    result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failing_rank_stops_the_gang),
        cmocka_unit_test(test_sigterm_ignored_gets_sigkill),
        cmocka_unit_test(test_bad_flag_is_passed_on_not_restarted),
        cmocka_unit_test(test_restart_resumes),
        cmocka_unit_test(test_stopped_rank_stops_the_gang),
        cmocka_unit_test(test_stopped_rank_that_continues_resumes),
        cmocka_unit_test(test_silent_rank_stops_the_gang),
        cmocka_unit_test(test_peer_failed_exit_defers_to_the_real_failure),
    };
    return cmocka_run_group_tests(tests, shmrun_setup, shmrun_teardown);
}
