#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmrun_fixture.h"

const char *shmrun, *probe, *golden_dir;
char workdir[256];

/* Start argv with stdout and stderr in files under workdir. */
pid_t spawn(char *const argv[], const char *tag)
{
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/%s.out", workdir, tag);
    snprintf(err, sizeof err, "%s/%s.err", workdir, tag);
    return spawn_redirected(argv, workdir, out, err);
}


/* Wait for shmrun, at most `limit` seconds (then stop it and fail): a
 * launcher that misses a stall would otherwise hang the test until the
 * peers' 300 s timeout. */
struct result wait_result(pid_t pid, const char *tag, double t0, double limit)
{
    struct result r = {0};
    pid_t got;
    while ((got = waitpid(pid, &r.status, WNOHANG)) == 0 && mono_now() - t0 < limit)
        usleep(20 * 1000);
    if (got == 0) {
        kill(pid, SIGINT);  /* the launcher forwards it and stops the gang */
        usleep(200 * 1000);
        kill(pid, SIGINT);
        waitpid(pid, &r.status, 0);
        fail_msg("shmrun (%s) still ran after %.0f s", tag, limit);
    }
    assert_int_equal(got, pid);
    r.seconds = mono_now() - t0;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.out", workdir, tag);
    r.out = slurp(path);
    snprintf(path, sizeof path, "%s/%s.err", workdir, tag);
    r.err = slurp(path);
    assert_non_null(r.out);
    assert_non_null(r.err);
    return r;
}

struct result run(char *const argv[], const char *tag)
{
    double t0 = mono_now();
    pid_t pid = spawn(argv, tag);
    assert_true(pid > 0);
    return wait_result(pid, tag, t0, 240);
}

void result_free(struct result *r)
{
    free(r->out);
    free(r->err);
}

int exit_code(const struct result *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

/* The log of `rank` (named rank<R>_cores_<list>.log); NULL while the
 * attempt's folder or the file does not exist yet. */
char *rank_log(const char *job, int attempt, int rank)
{
    char dir_path[512], prefix[32];
    snprintf(dir_path, sizeof dir_path, "%s/logs/%s/attempt%d", workdir, job, attempt);
    snprintf(prefix, sizeof prefix, "rank%d_cores_", rank);
    DIR *dir = opendir(dir_path);
    if (!dir)
        return NULL;
    char *found = NULL;
    for (struct dirent *e; !found && (e = readdir(dir));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        found = slurp(path);
    }
    closedir(dir);
    return found;
}

int shmrun_setup(void **state)
{
    (void)state;
    shmrun = getenv("SHMRUN");
    probe = getenv("RANK_PROBE");
    golden_dir = getenv("GOLDEN_DIR");
    if (!shmrun || !probe || !golden_dir) {
        fprintf(stderr, "set SHMRUN, RANK_PROBE and GOLDEN_DIR (ctest does)\n");
        return -1;
    }
    snprintf(workdir, sizeof workdir, "/tmp/%s.%d", program_invocation_short_name, (int)getpid());
    return mkdir(workdir, 0755);
}

int shmrun_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", workdir);
    return system(cmd) == 0 ? 0 : -1;
}
