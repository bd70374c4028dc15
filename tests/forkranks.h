/* Test helper: run a function in N forked ranks that form one group.
 *
 * CMocka's assertions must not run in a child (they would longjmp into the
 * child's copy of the runner), so ranks report through CHILD_CHECK, which
 * prints the failing condition and exits the child with status 1, and
 * through a shared anonymous mapping the parent inspects afterwards.
 */
#ifndef SHMTRAIN_TESTS_FORKRANKS_H
#define SHMTRAIN_TESTS_FORKRANKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "shmtrain/coll.h"

#define CHILD_CHECK(cond)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "rank check failed at %s:%d: %s (last error: %s)\n", \
                    __FILE__, __LINE__, #cond, st_last_error());                 \
            fflush(stderr);                                                      \
            return 1;                                                            \
        }                                                                        \
    } while (0)

typedef int (*rank_fn)(st_group *g, int rank, void *arg);

/* A job id no other test (or test process) uses. */
void test_job_id(char *out, size_t len, const char *tag);

/* Fork `world` ranks; each joins `cfg` (rank/world/job filled in) and runs
 * fn.  A child exits with fn's return (or 100 + status if the join failed).
 * Returns the number of ranks that did not exit 0. */
int run_ranks(int world, const st_group_config *cfg, rank_fn fn, void *arg);

/* The same with each rank's config adjusted by `tweak` before it joins
 * (its NUMA node, say). */
typedef void (*config_fn)(st_group_config *c, int rank, void *arg);
int run_ranks_tweaked(int world, const st_group_config *cfg, config_fn tweak, rank_fn fn, void *arg);

/* Shared memory that children can write and the parent read (zeroed). */
void *shared_alloc(size_t bytes);
void shared_free(void *p, size_t bytes);

/* How many /dev/shm entries belong to job_id. */
int leftover_segments(const char *job_id);

/* Fork and exec argv[0] in directory `cwd`, its stdout and stderr going to
 * the files `out` and `err`.  Returns the child's pid (or -1). */
pid_t spawn_redirected(char *const argv[], const char *cwd, const char *out, const char *err);

/* A whole file as a string the caller frees, or NULL if it cannot be read. */
char *slurp(const char *path);

/* A finished program: its exit code (128 + the signal if one killed it)
 * and what it wrote to stdout and stderr (never NULL; "" if nothing). */
struct child_run {
    int code;
    char *out, *err;
};

/* Wait for `pid`, started by spawn_redirected with these out/err files. */
struct child_run child_collect(pid_t pid, const char *out, const char *err);
void child_run_free(struct child_run *r);

/* A fresh /tmp/<name>.<pid> directory for a test's files into `dir`
 * (0 or -1); and its removal, unless KEEP_TEST_DIR is set. */
int test_dir_create(char *dir, size_t len, const char *name);
int test_dir_remove(const char *dir);

/* Newlines in a string. */
int count_lines(const char *text);

uint64_t fnv1a(const void *data, size_t bytes);
double mono_now(void);

#endif
