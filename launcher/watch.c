#define _GNU_SOURCE
#include "watch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmtrain/env.h"

/* Warn about a rank without progress after this long (or the timeout's
 * half, when that is shorter): early enough to read, late enough that an
 * ordinary slow step never says anything. */
#define WARN_AFTER_S 10.0

void watch_heartbeat_path(char *buf, size_t len, const char *attempt_dir, int rank)
{
    snprintf(buf, len, "%s/rank%d.heartbeat", attempt_dir, rank);
}

int watch_init(struct stall_watch *w, int world, double timeout_s, const char *attempt_dir, FILE *log,
               double now)
{
    memset(w, 0, sizeof *w);
    w->timeout_s = timeout_s;
    w->world = world;
    w->log = log;
    w->r = calloc((size_t)world, sizeof *w->r);
    if (!w->r) {
        fprintf(stderr, "shmrun: out of memory\n");
        return -1;
    }
    for (int i = 0; i < world; i++) {
        struct watched_rank *r = &w->r[i];
        r->last_progress = now;
        watch_heartbeat_path(r->heartbeat_path, sizeof r->heartbeat_path, attempt_dir, i);
        int fd = open(r->heartbeat_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || close(fd) != 0) {
            fprintf(stderr, "shmrun: cannot create %s: %s\n", r->heartbeat_path, strerror(errno));
            watch_free(w);
            return -1;
        }
    }
    return 0;
}

void watch_free(struct stall_watch *w)
{
    free(w->r);
    w->r = NULL;
}

/* The one-letter state of /proc/PID/stat ('R', 'S', 'T', ...), or 0. */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');  /* the command may hold ')' itself */
    return paren && paren[1] == ' ' ? paren[2] : 0;
}

static const char *describe_state(char s)
{
    switch (s) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "in uninterruptible I/O";
    case 'T': return "stopped (state T: SIGSTOP, Ctrl-Z or a debugger)";
    case 't': return "stopped by a debugger (state t)";
    case 'Z': return "exited, not yet reaped";
    default: return "in an unknown state";
    }
}

static void read_heartbeat(struct watched_rank *r, double now)
{
    char rec[ST_HEARTBEAT_RECORD + 1];
    int fd = open(r->heartbeat_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = pread(fd, rec, ST_HEARTBEAT_RECORD, 0);
    close(fd);
    if (n <= 0)
        return;
    rec[n] = '\0';
    unsigned long long beats;
    char state[8];
    int peer;
    if (sscanf(rec, "beats=%llu state=%7s peer=%d", &beats, state, &peer) != 3)
        return;
    if (!r->beating || beats != r->beats)
        r->last_progress = now;
    r->beating = true;
    r->beats = beats;
    r->waiting = !strcmp(state, "wait");
    r->waiting_for = peer;
}

static void say(const struct stall_watch *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct stall_watch *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "shmrun: %s\n", line);
    if (w->log)
        fprintf(w->log, "%s\n", line);
}

static void doing(const struct watched_rank *r, char state, char *buf, size_t len)
{
    if (r->waiting)
        snprintf(buf, len, "%s, waiting for rank %d in a collective", describe_state(state), r->waiting_for);
    else
        snprintf(buf, len, "%s, not waiting for a peer", describe_state(state));
}

/* Is rank i waiting for a running peer that is not itself waiting (or is
 * stopped)?  Then its silence is that peer's: the peer's last progress may
 * be later than the waiter's, so the waiter passes the timeout first. */
static bool waits_on_a_busy_peer(const struct stall_watch *w, const bool *running, int i)
{
    const int p = w->r[i].waiting_for;
    if (!w->r[i].waiting || p < 0 || p >= w->world || p == i || !running[p])
        return false;
    const struct watched_rank *q = &w->r[p];
    return q->stopped_since > 0 || (q->beating && !q->waiting);
}

/* Stopped ranks first (they hold everyone), then ranks without progress
 * that are not themselves waiting for a peer, then the longest silent; a
 * rank waiting for a busy peer is never blamed before that peer. */
static int culprit_rank(const struct stall_watch *w, const bool *running, double now)
{
    int best = -1, best_class = 0;
    double best_age = 0;
    for (int i = 0; i < w->world; i++) {
        const struct watched_rank *r = &w->r[i];
        if (!running[i])
            continue;
        double age = r->stopped_since > 0 ? now - r->stopped_since : now - r->last_progress;
        int cls = r->stopped_since > 0 ? 3 : (r->beating && !r->waiting) ? 2 : r->beating ? 1 : 0;
        if (cls == 0 || age < w->timeout_s || (cls == 1 && waits_on_a_busy_peer(w, running, i)))
            continue;
        if (cls > best_class || (cls == best_class && age > best_age)) {
            best = i;
            best_class = cls;
            best_age = age;
        }
    }
    return best;
}

int watch_tick(struct stall_watch *w, const pid_t *pids, const bool *running, double now, char *why,
               size_t len)
{
    const double warn_after = w->timeout_s > 0 && w->timeout_s / 2 < WARN_AFTER_S ? w->timeout_s / 2 : WARN_AFTER_S;
    for (int i = 0; i < w->world; i++) {
        struct watched_rank *r = &w->r[i];
        if (!running[i])
            continue;
        char s = r->proc_state = proc_state(pids[i]);
        read_heartbeat(r, now);
        const bool stopped = s == 'T' || s == 't';
        if (stopped && r->stopped_since == 0) {
            r->stopped_since = now;
            if (w->timeout_s > 0)
                say(w, "WARNING: rank %d (pid %d) is %s; its peers wait for it. The gang stops in %.0f s "
                       "unless it continues (--stall-timeout)", i, (int)pids[i], describe_state(s), w->timeout_s);
            else
                say(w, "WARNING: rank %d (pid %d) is %s; its peers wait for it (--stall-timeout 0: "
                       "the launcher waits)", i, (int)pids[i], describe_state(s));
        } else if (!stopped && r->stopped_since > 0) {
            say(w, "rank %d (pid %d) continued after %.1f s stopped", i, (int)pids[i], now - r->stopped_since);
            r->stopped_since = 0;
            r->last_progress = now;  /* its peers resume only now */
            r->warned_slow = false;
        }
        if (!stopped && r->beating && !r->warned_slow && now - r->last_progress >= warn_after) {
            char what[160];
            doing(r, s, what, sizeof what);
            r->warned_slow = true;
            say(w, "WARNING: rank %d (pid %d) has made no progress for %.0f s (%s)%s", i, (int)pids[i],
                now - r->last_progress, what, w->timeout_s > 0 ? "; --stall-timeout stops the gang" : "");
        } else if (r->warned_slow && now - r->last_progress < warn_after) {
            r->warned_slow = false;
        }
    }
    if (w->timeout_s <= 0)
        return -1;
    int c = culprit_rank(w, running, now);
    if (c < 0)
        return -1;
    const struct watched_rank *r = &w->r[c];
    if (r->stopped_since > 0) {
        snprintf(why, len, "stalled: %s for %.0f s", describe_state(r->proc_state), now - r->stopped_since);
    } else {
        char what[160];
        doing(r, r->proc_state, what, sizeof what);
        snprintf(why, len, "stalled: no progress for %.0f s (%s)", now - r->last_progress, what);
    }
    return c;
}
