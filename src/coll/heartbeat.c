#define _GNU_SOURCE
#include "heartbeat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmtrain/env.h"

#define WRITE_EVERY_S 0.25

void st_heartbeat_open(struct st_heartbeat *h, const char *path)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
    if (path && *path)
        h->fd = open(path, O_WRONLY | O_CLOEXEC);
}

static void write_record(struct st_heartbeat *h, const char *state, int peer)
{
    char rec[ST_HEARTBEAT_RECORD];
    memset(rec, ' ', sizeof rec);
    int n = snprintf(rec, sizeof rec, "beats=%llu state=%s peer=%d", (unsigned long long)h->beats, state, peer);
    if (n < 0 || n >= (int)sizeof rec - 1) {
        st_heartbeat_close(h);
        return;
    }
    rec[n] = ' ';
    rec[sizeof rec - 1] = '\n';
    if (pwrite(h->fd, rec, sizeof rec, 0) != (ssize_t)sizeof rec)
        st_heartbeat_close(h);
}

void st_heartbeat_beat(struct st_heartbeat *h, double now)
{
    h->beats++;
    if (h->fd < 0 || (!h->waiting && now - h->written_at < WRITE_EVERY_S))
        return;
    h->waiting = false;
    h->written_at = now;
    write_record(h, "run", -1);
}

void st_heartbeat_waiting(struct st_heartbeat *h, int peer)
{
    if (h->fd < 0 || h->waiting)
        return;
    h->waiting = true;
    write_record(h, "wait", peer);
}

void st_heartbeat_close(struct st_heartbeat *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}
