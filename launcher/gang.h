/* shmrun: start a gang of instances per a plan, watch them, stop them all
 * when one fails, and report.
 *
 * One attempt = fork one process per plan instance (each in its own process
 * group), bind it, set its environment, exec the program; collect its
 * output into a per-rank log (and the console); reap.  The first instance
 * that exits non-zero or is killed is the root cause: every other instance
 * gets SIGTERM, then SIGKILL after the grace period.  An instance that says
 * by its exit status that it stopped because a peer failed
 * (ST_EXIT_PEER_FAILED) is the root cause only if no other rank fails
 * within a moment.  A rank the stall watch (watch.h) finds stopped or
 * silent for stall_timeout_s is the root cause too: it gets SIGKILL.
 */
#ifndef SHMRUN_GANG_H
#define SHMRUN_GANG_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "shmtrain/topo.h"

struct gang_options {
    char **argv;              /* program and arguments */
    const char *job_id;
    const char *attempt_dir;  /* per-rank logs go here */
    int restart_count, max_restarts;
    bool tee_all, quiet;
    double grace_s;
    double stall_timeout_s;   /* stop the gang for a rank stopped or silent this long; 0 = never */
    FILE *launcher_log;
    pid_t launcher_pid;       /* this shmrun: each instance dies with it */
    int master_port;          /* PyTorch's rendezvous port (MASTER_PORT) for this attempt */
};

struct rank_result {
    pid_t pid;
    int exit_code;            /* valid if !signaled */
    int signal;               /* valid if signaled */
    bool signaled, exited, stopped_by_us;
    bool peer_failed;         /* exited ST_EXIT_PEER_FAILED: it stopped because another rank failed */
    char stall[192];          /* why the stall watch stopped the gang for it, or "" */
    double end_s;             /* seconds since the attempt started */
    long max_rss_kb;          /* peak resident set of the instance (wait4) */
    double cpu_s;             /* user + system CPU seconds */
    char log_path[512];
};

struct attempt {
    int world;
    struct rank_result *ranks;
    int root_cause;           /* rank, or -1 if all succeeded */
    int user_signal;          /* SIGINT/SIGTERM the launcher received, or 0 */
    double seconds;
};

/* Run one attempt.  Returns 0 when it could be run (whatever the instances
 * did; see `out`), -1 with a message on stderr if it could not start. */
int gang_run(const st_topo *t, const st_plan *p, const struct gang_options *o, struct attempt *out);

/* The failure table: rank, pid, cores, how it ended, log. */
void gang_print_summary(FILE *f, const st_plan *p, const struct attempt *a, const char *job_id);

/* The attempt as one JSON object (`shmrun --report`): per rank its CPUs,
 * how it ended, peak memory and CPU time. */
void gang_write_report(FILE *f, const st_plan *p, const struct attempt *a, const char *job_id);

void attempt_free(struct attempt *a);

#endif
