/* Internal: the heartbeat an instance publishes for its launcher
 * (include/shmtrain/env.h has the file's contract).
 *
 * Progress is counted in memory on every call and written out at most four
 * times a second, so a step costs a clock read, not a system call.  A failed
 * write switches the heartbeat off: losing it must never stop training. */
#ifndef SHMTRAIN_COLL_HEARTBEAT_H
#define SHMTRAIN_COLL_HEARTBEAT_H

#include <stdbool.h>
#include <stdint.h>

struct st_heartbeat {
    int fd;              /* -1 when off (no launcher asked for one) */
    uint64_t beats;
    double written_at;   /* when the record was last written */
    bool waiting;        /* the record says state=wait */
};

/* Open the launcher's file `path` (NULL or "": no heartbeat). */
void st_heartbeat_open(struct st_heartbeat *h, const char *path);

/* One unit of progress at time `now` (seconds, CLOCK_MONOTONIC). */
void st_heartbeat_beat(struct st_heartbeat *h, double now);

/* Blocked for a while waiting for rank `peer`: say so now. */
void st_heartbeat_waiting(struct st_heartbeat *h, int peer);

void st_heartbeat_close(struct st_heartbeat *h);

#endif
