/* Test helper: shmrun under test.  Each test program runs the launcher
 * (and the rank probe, st-rank-probe) in its own work directory, waits for
 * it with a time limit, and reads what it and its ranks wrote.
 *
 * shmrun_setup, as the group's setup, reads the paths ctest passes (SHMRUN,
 * RANK_PROBE, GOLDEN_DIR) and makes the work directory; shmrun_teardown
 * removes it. */
#ifndef SHMTRAIN_TESTS_SHMRUN_FIXTURE_H
#define SHMTRAIN_TESTS_SHMRUN_FIXTURE_H

#include <sys/types.h>

extern const char *shmrun, *probe, *golden_dir;
extern char workdir[256];

int shmrun_setup(void **state);
int shmrun_teardown(void **state);

/* A finished shmrun: its wait status, how long it ran, its stdout and
 * stderr (the caller frees them with result_free). */
struct result {
    int status;
    double seconds;
    char *out, *err;
};

/* Start argv with stdout and stderr in workdir/tag.out and tag.err. */
pid_t spawn(char *const argv[], const char *tag);
/* Wait for a spawned shmrun, at most `limit` seconds from t0 (then stop it
 * and fail the test). */
struct result wait_result(pid_t pid, const char *tag, double t0, double limit);
/* spawn and wait, up to 240 s. */
struct result run(char *const argv[], const char *tag);
void result_free(struct result *r);
/* The exit code, or 128 + the signal that killed it. */
int exit_code(const struct result *r);
/* What rank `rank` of job `job` wrote in attempt `attempt` (the caller
 * frees it), or NULL. */
char *rank_log(const char *job, int attempt, int rank);

#endif
