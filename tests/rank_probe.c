/* A program for the launcher tests to run under shmrun: prints what it was
 * given (environment, CPU affinity) and misbehaves on request.
 *
 *   st-rank-probe [--exit-rank R --code C] [--kill-rank R] [--sleep S]
 *                 [--fail-first-attempt R] [--ignore-term] [--leave-segment R]
 *                 [--join [--loop N] [--spin-rank R --spin-at K]] [--fds]
 *
 * --peer-failed-rank R: rank R exits ST_EXIT_PEER_FAILED at once, as a
 * rank does that stopped because another failed.
 * --loop N: N all-reduces 10 ms apart after joining (a gang that makes
 * progress); --spin-rank R: rank R busy-loops forever at iteration K (a rank
 * that makes none); --fds: print the descriptors it inherited beyond 0-2.
 * A collective that fails because of a peer exits ST_EXIT_PEER_FAILED.
 */
#define _GNU_SOURCE
#include <dirent.h>
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
#include "shmtrain/env.h"

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

struct loop {
    int iterations, spin_rank, spin_at;
};

static int failed_collective(const char *what, st_status st)
{
    fprintf(stderr, "probe: %s failed: %s\n", what, st_last_error());
    return st == ST_ERR_PEER_DEAD || st == ST_ERR_TIMEOUT ? ST_EXIT_PEER_FAILED : 6;
}

/* Many small all-reduces: progress the launcher can see, results checked. */
static int reduce_in_a_loop(st_group *g, const struct loop *l)
{
    const int w = st_group_size(g), me = st_group_rank(g);
    for (int it = 0; it < l->iterations; it++) {
        if (me == l->spin_rank && it == l->spin_at) {
            printf("spinning at iteration %d\n", it);
            fflush(stdout);
            for (volatile unsigned long k = 0;; k++)
                ;
        }
        float x[64];
        for (int i = 0; i < 64; i++)
            x[i] = (float)(me + i + it);
        st_status st = st_allreduce(g, x, 64, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
        if (st != ST_OK)
            return failed_collective("all-reduce", st);
        if (x[0] != (float)(w * (w - 1) / 2 + w * it)) {
            printf("loop=bad at %d: %g\n", it, x[0]);
            return 7;
        }
        usleep(10 * 1000);
    }
    printf("loop=ok iterations=%d\n", l->iterations);
    return 0;
}

static void print_inherited_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    printf("fds=");
    const char *sep = "";
    for (struct dirent *e; d && (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd <= 2 || fd == dirfd(d))
            continue;
        char target[512] = "", link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        printf("%s%d:%s", sep, fd, target);
        sep = ",";
    }
    printf("%s\n", *sep ? "" : "none");
    if (d)
        closedir(d);
}

/* Join the group the launcher described and check an all-reduce. */
static int join_and_reduce(const struct loop *l)
{
    st_group *g = NULL;
    st_group_config cfg = {0};
    char job[ST_JOB_ID_MAX + 1];
    if (st_group_config_from_env(&cfg, job) != ST_OK || st_group_create(&g, &cfg) != ST_OK) {
        fprintf(stderr, "probe: join failed: %s\n", st_last_error());
        return 5;
    }
    float x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = (float)(st_group_rank(g) + i);
    st_status st = st_allreduce(g, x, 1000, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
    int rc = st == ST_OK ? 0 : failed_collective("all-reduce", st);
    int w = st_group_size(g);
    float want0 = (float)(w * (w - 1) / 2);
    if (rc == 0 && x[0] != want0)
        rc = 7;
    printf("allreduce=%s x0=%g\n", rc == 0 ? "ok" : "bad", x[0]);
    fflush(stdout);
    if (rc == 0 && l->iterations)
        rc = reduce_in_a_loop(g, l);
    if (rc == 0 && (st = st_barrier(g)) != ST_OK)
        rc = failed_collective("barrier", st);
    st_group_destroy(g);
    return rc;
}

int main(int argc, char **argv)
{
    int rank = atoi(env("SHMTRAIN_RANK")), exit_rank = -1, code = 0, kill_rank = -1;
    int first_attempt_rank = -1, leave_rank = -1, peer_failed_rank = -1;
    double sleep_s = 0;
    int join = 0, fds = 0;
    struct loop loop = {.spin_rank = -1};
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
        else if (!strcmp(a, "--fds")) fds = 1;
        else if (!strcmp(a, "--peer-failed-rank")) peer_failed_rank = atoi(v), i++;
        else if (!strcmp(a, "--loop")) loop.iterations = atoi(v), i++;
        else if (!strcmp(a, "--spin-rank")) loop.spin_rank = atoi(v), i++;
        else if (!strcmp(a, "--spin-at")) loop.spin_at = atoi(v), i++;
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
    printf("MASTER_ADDR=%s MASTER_PORT=%s\n", env("MASTER_ADDR"), env("MASTER_PORT"));
    print_affinity();
    if (fds)
        print_inherited_fds();
    fflush(stdout);
    if (join) {
        int rc = join_and_reduce(&loop);
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
    if (rank == peer_failed_rank) {
        printf("stopping: a peer failed\n");
        fflush(stdout);
        return ST_EXIT_PEER_FAILED;
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
