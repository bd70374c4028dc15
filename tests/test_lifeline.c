/* A gang never outlives its launcher (include/shmtrain/lifeline.h): shmrun
 * killed by SIGKILL at each phase of a run (start-up, mid-step, with an
 * instance blocked in the all-reduce, while rank 0 writes checkpoints), with
 * --quiet and without (shmtrain then prints only its start line: a print to
 * the dead launcher's pipe would end it by SIGPIPE and hide the question),
 * 2 and 4 instances (oversubscribed here): every
 * instance gone within 2 s, nothing of the job left in /dev/shm, and the
 * last checkpoint whole.  Before the lifeline the instances trained on
 * (found still running 15-20 s later). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/env.h"

static const char *shmrun, *shmtrain;
static char workdir[256];

#define GONE_WITHIN_S 2.0

/* The processes whose environment carries this job id (the instances,
 * which shmrun names with it); their pids and ranks. */
static int instances(const char *job, pid_t *pids, int *ranks, int max)
{
    char want[128];
    snprintf(want, sizeof want, "%s=%s", ST_ENV_JOB_ID, job);
    DIR *proc = opendir("/proc");
    int n = 0;
    for (struct dirent *e; proc && (e = readdir(proc)) != NULL;) {
        const pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], env[16384];
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        const size_t len = fread(env, 1, sizeof env - 1, f);
        fclose(f);
        bool ours = false;
        int rank = -1;
        for (size_t at = 0; at < len; at += strlen(env + at) + 1) {
            env[len] = '\0';
            if (!strcmp(env + at, want))
                ours = true;
            if (!strncmp(env + at, ST_ENV_RANK "=", strlen(ST_ENV_RANK) + 1))
                rank = atoi(env + at + strlen(ST_ENV_RANK) + 1);
        }
        char state[256] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        if ((f = fopen(path, "r"))) {
            if (!fgets(state, sizeof state, f))
                state[0] = '\0';
            fclose(f);
        }
        const char *paren = strrchr(state, ')');
        if (!ours || (paren && paren[2] == 'Z'))  /* a zombie has left already */
            continue;
        if (n < max) {
            pids[n] = pid;
            ranks[n] = rank;
        }
        n++;
    }
    if (proc)
        closedir(proc);
    return n;
}

static bool wait_for(bool (*ready)(const char *job, int world), const char *job, int world, double limit)
{
    const double t0 = mono_now();
    while (!ready(job, world)) {
        if (mono_now() - t0 > limit)
            return false;
        usleep(10 * 1000);
    }
    return true;
}

static bool all_started(const char *job, int world)
{
    pid_t pids[16];
    int ranks[16];
    return instances(job, pids, ranks, 16) == world;
}

static bool all_gone(const char *job, int world)
{
    (void)world;
    pid_t pids[16];
    int ranks[16];
    return instances(job, pids, ranks, 16) == 0;
}

static char ckpt_path[512];

static bool stepping(const char *job, int world)
{
    (void)job, (void)world;
    struct stat sb;
    return stat(ckpt_path, &sb) == 0;  /* written every few steps */
}

enum phase { STARTUP, MID_STEP, IN_ALLREDUCE, CHECKPOINTING };
static const char *const PHASE[] = {"start-up", "mid-step", "in the all-reduce", "checkpointing"};

static void kill_launcher_at(enum phase phase, int world, bool quiet)
{
    char job[64], n[16], log_dir[512], tag[64];
    snprintf(tag, sizeof tag, "lifeline-%d-%d-%d", (int)phase, world, quiet);
    test_job_id(job, sizeof job, tag);
    snprintf(n, sizeof n, "%d", world);
    snprintf(log_dir, sizeof log_dir, "%s/logs-%s", workdir, tag);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/%s.ckpt", workdir, tag);
    char *argv[] = {(char *)shmrun, "-n", n, "--oversubscribe", "--job-id", job, "--log-dir", log_dir, quiet ? "--quiet" : "--tee-all",
                    "--", (char *)shmtrain, "--model", "mlp", "--epochs", "1000", "--eval-every", "1000000",
                    "--log-every", "1000000", "--optimizer", "adamw", "--lr", "1e-4", "--checkpoint", ckpt_path,
                    "--checkpoint-every", phase == CHECKPOINTING ? "1" : "5", quiet ? "--quiet" : NULL, NULL};
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/%s.out", workdir, tag);
    snprintf(err, sizeof err, "%s/%s.err", workdir, tag);
    const pid_t launcher = spawn_redirected(argv, workdir, out, err);
    assert_true(launcher > 0);
    if (!wait_for(phase == STARTUP ? all_started : stepping, job, world, 30))
        fail_msg("%s, %d instances: the gang never reached the phase", PHASE[phase], world);
    pid_t pids[16], stopped = 0;
    int ranks[16];
    if (phase == IN_ALLREDUCE) {  /* rank 1 stopped: rank 0 waits for it in the all-reduce */
        const int found = instances(job, pids, ranks, 16);
        for (int i = 0; i < found && i < 16; i++)
            if (ranks[i] == 1)
                stopped = pids[i];
        assert_true(stopped > 0);
        assert_int_equal(kill(stopped, SIGSTOP), 0);
        usleep(300 * 1000);
    } else if (phase == CHECKPOINTING) {
        usleep(200 * 1000);  /* every step writes; most of a step is the write */
    }
    const double t0 = mono_now();
    assert_int_equal(kill(launcher, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(launcher, &status, 0), launcher);
    /* The stopped one too: the kernel sends SIGHUP and SIGCONT to a stopped
     * process whose process group the launcher's death orphaned. */
    if (!wait_for(all_gone, job, world, GONE_WITHIN_S)) {
        const int left = instances(job, pids, ranks, 16);
        for (int i = 0; i < left && i < 16; i++)
            kill(pids[i], SIGKILL);
        fail_msg("%s, %d instances%s: %d still ran %.1f s after the launcher's death", PHASE[phase], world,
                 quiet ? ", quiet" : "", left, mono_now() - t0);
    }
    print_message("    %-18s %d instances%-7s: gone %.3f s after the launcher's death\n", PHASE[phase], world,
                  quiet ? ", quiet" : "", mono_now() - t0);
    assert_int_equal(leftover_segments(job), 0);
    glob_t tmp;
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s.tmp.*", ckpt_path);
    assert_int_equal(glob(pattern, 0, NULL, &tmp), GLOB_NOMATCH);  /* nothing half-written beside it */
    globfree(&tmp);
    struct stat sb;
    if (stat(ckpt_path, &sb) == 0) {
        st_ckpt c;
        if (st_ckpt_read(ckpt_path, &c) != ST_OK)
            fail_msg("%s: the last checkpoint does not load: %s", PHASE[phase], st_last_error());
        assert_true(c.step >= 1);
        st_ckpt_free(&c);
        unlink(ckpt_path);
    } else {
        assert_int_equal(phase, STARTUP);
    }
}

static void test_startup(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world += 2)
        for (int quiet = 0; quiet <= 1; quiet++)
            kill_launcher_at(STARTUP, world, quiet);
}

static void test_mid_step(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world += 2)
        for (int quiet = 0; quiet <= 1; quiet++)
            kill_launcher_at(MID_STEP, world, quiet);
}

static void test_in_the_allreduce(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world += 2)
        for (int quiet = 0; quiet <= 1; quiet++)
            kill_launcher_at(IN_ALLREDUCE, world, quiet);
}

static void test_while_checkpointing(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world += 2)
        for (int quiet = 0; quiet <= 1; quiet++)
            kill_launcher_at(CHECKPOINTING, world, quiet);
}

/* Any program under shmrun dies with it, not only shmtrain (which also
 * polls): the death signal alone ends a `sleep`. */
static void test_any_program_dies_with_shmrun(void **state)
{
    (void)state;
    char job[64], log_dir[512], out[512], err[512];
    test_job_id(job, sizeof job, "sleepers");
    snprintf(log_dir, sizeof log_dir, "%s/logs-sleepers", workdir);
    snprintf(out, sizeof out, "%s/sleepers.out", workdir);
    snprintf(err, sizeof err, "%s/sleepers.err", workdir);
    char *argv[] = {(char *)shmrun, "-n", "2", "--job-id", job, "--log-dir", log_dir, "--quiet", "--", "/bin/sleep",
                    "60", NULL};
    const pid_t launcher = spawn_redirected(argv, workdir, out, err);
    assert_true(wait_for(all_started, job, 2, 30));
    assert_int_equal(kill(launcher, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(launcher, &status, 0), launcher);
    if (!wait_for(all_gone, job, 2, GONE_WITHIN_S)) {
        pid_t pids[16];
        int ranks[16];
        const int left = instances(job, pids, ranks, 16);
        for (int i = 0; i < left && i < 16; i++)
            kill(pids[i], SIGKILL);
        fail_msg("%d sleep(s) outlived shmrun by %.0f s", left, GONE_WITHIN_S);
    }
}

/* Under a subreaper (systemd's user manager, a container's init) the
 * orphans go to it, not to init: the lifeline must still see the launcher
 * gone, and leave as such (exit ST_EXIT_LAUNCHER_GONE, not the clean stop's
 * 130).  This test process becomes the subreaper, so it reaps them. */
static void test_under_a_subreaper(void **state)
{
    (void)state;
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char job[64], log_dir[512];
    test_job_id(job, sizeof job, "subreaper");
    snprintf(log_dir, sizeof log_dir, "%s/logs-subreaper", workdir);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/subreaper.ckpt", workdir);
    char *argv[] = {(char *)shmrun, "-n", "2", "--oversubscribe", "--job-id", job, "--log-dir", log_dir, "--quiet",
                    "--", (char *)shmtrain, "--model", "mlp", "--epochs", "1000", "--quiet", "--checkpoint", ckpt_path,
                    "--checkpoint-every", "5", NULL};
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/subreaper.out", workdir);
    snprintf(err, sizeof err, "%s/subreaper.err", workdir);
    const pid_t launcher = spawn_redirected(argv, workdir, out, err);
    assert_true(wait_for(stepping, job, 2, 30));
    assert_int_equal(kill(launcher, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(launcher, &status, 0), launcher);
    const double t0 = mono_now();
    for (int reaped = 0; reaped < 2;) {
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            if (!WIFEXITED(status) || WEXITSTATUS(status) != ST_EXIT_LAUNCHER_GONE)
                fail_msg("instance %d ended with status 0x%x, expected exit %d (the launcher gone)", (int)pid, status,
                         ST_EXIT_LAUNCHER_GONE);
            reaped++;
        } else if (mono_now() - t0 > GONE_WITHIN_S) {
            fail_msg("%d instance(s) still ran %.1f s after the launcher's death", 2 - reaped, mono_now() - t0);
        } else {
            usleep(10 * 1000);
        }
    }
    assert_int_equal(leftover_segments(job), 0);
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}

/* No launcher, no lifeline: a run whose shell goes away (nohup) goes on.
 * Its parent here exits at once; it must still finish its steps. */
static void test_no_launcher_no_lifeline(void **state)
{
    (void)state;
    char done[512], cmd[2048];
    snprintf(done, sizeof done, "%s/orphan.ckpt", workdir);
    snprintf(cmd, sizeof cmd, "'%s' --model mlp --max-steps 200 --quiet --checkpoint '%s' & exit 0", shmtrain, done);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/orphan.out", workdir);
    snprintf(err, sizeof err, "%s/orphan.err", workdir);
    const pid_t sh = spawn_redirected(argv, workdir, out, err);
    int status;
    assert_int_equal(waitpid(sh, &status, 0), sh);
    const double t0 = mono_now();
    struct stat sb;
    while (stat(done, &sb) != 0 && mono_now() - t0 < 60)
        usleep(50 * 1000);
    st_ckpt c;
    assert_int_equal(st_ckpt_read(done, &c), ST_OK);
    assert_int_equal(c.step, 200);
    st_ckpt_free(&c);
}

static int setup(void **state)
{
    (void)state;
    shmrun = getenv("SHMRUN");
    shmtrain = getenv("SHMTRAIN");
    if (!shmrun || !shmtrain)
        return -1;
    return test_dir_create(workdir, sizeof workdir, "lifeline");
}

static int teardown(void **state)
{
    (void)state;
    return test_dir_remove(workdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_startup),
        cmocka_unit_test(test_mid_step),
        cmocka_unit_test(test_in_the_allreduce),
        cmocka_unit_test(test_while_checkpointing),
        cmocka_unit_test(test_any_program_dies_with_shmrun),
        cmocka_unit_test(test_no_launcher_no_lifeline),
        cmocka_unit_test(test_under_a_subreaper),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
