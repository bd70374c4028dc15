/* shmrun: the stall watch.  Notices, within a second or so, a rank that is
 * stopped (SIGSTOP, Ctrl-Z, a debugger) or that makes no progress, says so
 * on the console naming the rank, its pid and what it is doing, and names
 * the rank to stop the gang for once the stall has lasted --stall-timeout.
 *
 * Progress is the heartbeat file each instance's collectives write
 * (include/shmtrain/env.h); a program that never writes one is watched only
 * for being stopped.  The watch reads /proc and those files; it signals
 * nothing itself (gang.c does).
 */
#ifndef SHMRUN_WATCH_H
#define SHMRUN_WATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define WATCH_TICK_S 0.5

struct watched_rank {
    char heartbeat_path[600];
    uint64_t beats;
    bool beating;            /* has published at least once */
    bool waiting;            /* its last record said state=wait */
    int waiting_for;
    double last_progress;    /* when beats last changed (or the attempt began) */
    double stopped_since;    /* 0 while not stopped */
    bool warned_slow;
    char proc_state;         /* from /proc/PID/stat at the last tick */
};

struct stall_watch {
    double timeout_s;        /* 0: never stop the gang for a stall */
    int world;
    struct watched_rank *r;  /* [world] */
    FILE *log;
};

/* The heartbeat file of `rank` in an attempt's log directory. */
void watch_heartbeat_path(char *buf, size_t len, const char *attempt_dir, int rank);

/* Create rank r's empty heartbeat file, ATTEMPT_DIR/rank<r>.heartbeat, for
 * every rank.  Returns 0, or -1 with a message on stderr. */
int watch_init(struct stall_watch *w, int world, double timeout_s, const char *attempt_dir, FILE *log,
               double now);
void watch_free(struct stall_watch *w);

/* Look at every running rank once.  Returns the rank whose stall has lasted
 * the timeout, with what it was doing in `why`, or -1. */
int watch_tick(struct stall_watch *w, const pid_t *pids, const bool *running, double now, char *why,
               size_t len);

#endif
