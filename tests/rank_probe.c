/* A program for the launcher tests to run under shmrun: prints what it was
 * given (environment, CPU affinity) and misbehaves on request.
 *
 *   st-rank-probe [--exit-rank R --code C] [--kill-rank R] [--sleep S]
 *                 [--fail-first-attempt R] [--ignore-term] [--leave-segment R]
 *                 [--join]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/coll.h"

static const char *env(const char *k)
{
    const char *v = getenv(k);
    return v ? v : "-";
}

static void print_affinity(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        printf("affinity=?\n");
        return;
    }
    printf("affinity=");
    const char *sep = "";
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            printf("%s%d", sep, c);
            sep = ",";
        }
    printf("\n");
}

/* Join the group the launcher described and check an all-reduce. */
static int join_and_reduce(void)
{
    st_group *g = NULL;
    if (st_group_create_from_env(&g, NULL) != ST_OK) {
        fprintf(stderr, "probe: join failed: %s\n", st_last_error());
        return 5;
    }
    float x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = (float)(st_group_rank(g) + i);
    int rc = st_allreduce_f32(g, x, 1000, ST_SUM) == ST_OK ? 0 : 6;
    int w = st_group_size(g);
    float want0 = (float)(w * (w - 1) / 2);
    if (rc == 0 && x[0] != want0)
        rc = 7;
    printf("allreduce=%s x0=%g\n", rc == 0 ? "ok" : "bad", x[0]);
    st_barrier(g);
    st_group_destroy(g);
    return rc;
}

int main(int argc, char **argv)
{
    int rank = atoi(env("SHMTRAIN_RANK")), exit_rank = -1, code = 0, kill_rank = -1;
    int first_attempt_rank = -1, leave_rank = -1;
    double sleep_s = 0;
    int join = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--exit-rank")) exit_rank = atoi(v), i++;
        else if (!strcmp(a, "--code")) code = atoi(v), i++;
        else if (!strcmp(a, "--kill-rank")) kill_rank = atoi(v), i++;
        else if (!strcmp(a, "--sleep")) sleep_s = atof(v), i++;
        else if (!strcmp(a, "--fail-first-attempt")) first_attempt_rank = atoi(v), i++;
        else if (!strcmp(a, "--leave-segment")) leave_rank = atoi(v), i++;
        else if (!strcmp(a, "--ignore-term")) signal(SIGTERM, SIG_IGN);
        else if (!strcmp(a, "--join")) join = 1;
        else {
            fprintf(stderr, "probe: unknown option %s\n", a);
            return 2;
        }
    }
    printf("rank=%s world=%s local_rank=%s local_world=%s job=%s cores=%s numa=%s restart=%s\n",
           env("SHMTRAIN_RANK"), env("SHMTRAIN_WORLD_SIZE"), env("SHMTRAIN_LOCAL_RANK"),
           env("SHMTRAIN_LOCAL_WORLD_SIZE"), env("SHMTRAIN_JOB_ID"), env("SHMTRAIN_CORES"),
           env("SHMTRAIN_NUMA_NODES"), env("SHMTRAIN_RESTART_COUNT"));
    printf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s OMP_NUM_THREADS=%s OMP_PLACES=%s OMP_PROC_BIND=%s\n",
           env("RANK"), env("WORLD_SIZE"), env("LOCAL_RANK"), env("OMP_NUM_THREADS"),
           env("OMP_PLACES"), env("OMP_PROC_BIND"));
    print_affinity();
    fflush(stdout);
    if (join) {
        int rc = join_and_reduce();
        if (rc)
            return rc;
    }
    if (rank == leave_rank) {  /* as if killed while joining: a named segment */
        char name[160];
        st_segment_name(name, sizeof name, env("SHMTRAIN_JOB_ID"), rank);
        int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
        if (fd >= 0)
            close(fd);
        printf("left segment %s\n", name);
        fflush(stdout);
        return 9;
    }
    if (rank == kill_rank) {
        usleep(100 * 1000);
        raise(SIGKILL);
    }
    if (rank == exit_rank) {
        usleep(100 * 1000);
        printf("exiting with %d\n", code);
        return code;
    }
    if (rank == first_attempt_rank && !strcmp(env("SHMTRAIN_RESTART_COUNT"), "0")) {
        printf("failing on the first attempt\n");
        return 4;
    }
    if (sleep_s > 0) {
        struct timespec ts = {(time_t)sleep_s, (long)((sleep_s - (time_t)sleep_s) * 1e9)};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    printf("done\n");
    return 0;
}
