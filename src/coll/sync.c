/* The collectives' wait/publish protocol, and peer liveness (used by
 * every algorithm in coll.c and by group.c).
 *
 * Protocol (docs/collectives.md has the diagrams):
 *  - Each rank owns one 32-bit `progress` counter in its own control line;
 *    only the owner writes it, and it only ever grows (mod 2^32).  Every
 *    collective is a fixed, rank-independent sequence of "units"; a rank
 *    publishes base+k after finishing its k-th unit.  Since every rank runs
 *    the same collectives with the same arguments, each knows exactly which
 *    value of a peer's counter means "that peer has done X", so there are no
 *    recycled states and no ABA.
 *  - The first unit of every collective is "entered": the rank's input is in
 *    place and it has finished reading anything of the previous collective.
 *  - Waiting spins on the counter, then yields, then sleeps on it as a futex;
 *    the publisher only calls FUTEX_WAKE when the line's sleeper count says
 *    somebody sleeps.  While sleeping, a waiter checks every 100 ms that the
 *    peer is alive and has not aborted, and gives up after timeout_s.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll_internal.h"
#include "shmtrain/env.h"

_Static_assert(sizeof(struct ctl) <= PAGE, "control block fits one page");


/* The heartbeat's clock: a few nanoseconds where CLOCK_MONOTONIC costs ~20
 * (a fifth of a small all-reduce), ticking every few milliseconds, which is
 * plenty for a record written every 0.25 s. */
double coll_coarse_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void coll_sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Wrap-safe "a >= b" for counters that only grow. */
static inline bool ge(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }

/* ------------------------------------------------------- peer liveness -- */

/* kill(pid, 0) alone reports a zombie as alive, and a peer that died while
 * our parent has not reaped it yet is exactly a zombie. */
bool coll_pid_alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno != ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    if (!paren || paren[1] != ' ')
        return true;
    return paren[2] != 'Z' && paren[2] != 'X';
}

/* ------------------------------------------------------ publish / wait -- */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void coll_publish(st_group *g, uint32_t value)
{
    struct ctl *me = g->ctl[g->rank];
    /* seq_cst store then seq_cst load: pairs with the waiter's increment of
     * `sleepers` followed by its load of `progress` (Dekker), so either we
     * see the sleeper or it sees the new value. */
    atomic_store(&me->progress, value);
    if (atomic_load(&me->sleepers) != 0)
        futex(&me->progress, FUTEX_WAKE, INT_MAX, NULL);
}

st_status coll_mark_broken(st_group *g, st_status st, int failed_rank)
{
    struct ctl *me = g->ctl[g->rank];
    uint32_t expected = 0;
    atomic_compare_exchange_strong(&me->aborted, &expected, (uint32_t)failed_rank + 1);
    futex(&me->progress, FUTEX_WAKE, INT_MAX, NULL);
    g->broken = st;
    snprintf(g->broken_msg, sizeof g->broken_msg, "%s", st_last_error());
    return st;
}

static st_status peer_failed(st_group *g, int peer)
{
    uint32_t a = atomic_load(&g->ctl[peer]->aborted);
    int root = a ? (int)a - 1 : peer;
    st_fail(ST_ERR_PEER_DEAD,
            "coll: rank %d: peer rank %d %s (pid %d); collective abandoned",
            g->rank, root, a && root != peer ? "failed" : "died",
            (int)g->pids[root]);
    return coll_mark_broken(g, ST_ERR_PEER_DEAD, root);
}

static inline bool reached(st_group *g, int peer, uint32_t target)
{
    return ge(atomic_load_explicit(&g->ctl[peer]->progress, memory_order_acquire), target);
}

/* The stall watch warns at half its timeout (1 s at the shortest tried) and
 * reads a record that may lag a rank's progress by the heartbeat's write
 * interval (0.25 s): a rank blocked on a peer says so after 0.1 s, so the
 * watch never describes a waiting rank as silent (it did, rarely, when both
 * thresholds were 1 s).  One write per wait that long costs nothing. */
#define WAIT_VISIBLE_S 0.1

/* Between naps of a wait that began at `start`: has the peer failed or
 * died, or has the wait run out of time? */
static st_status check_waiting(st_group *g, int peer, double start, double *next_check)
{
    if (atomic_load(&g->ctl[peer]->aborted))
        return peer_failed(g, peer);
    double t = st_now_s();
    if (t - start >= WAIT_VISIBLE_S)
        st_heartbeat_waiting(&g->hb, peer);
    if (t >= *next_check) {
        if (!coll_pid_alive(g->pids[peer]))
            return peer_failed(g, peer);
        *next_check = t + 0.1;
    }
    if (t - start >= g->cfg.timeout_s) {
        st_fail(ST_ERR_TIMEOUT,
                "coll: rank %d waited %.0f s for rank %d (pid %d) without progress "
                "(%s); is a rank stuck or calling a different collective?",
                g->rank, g->cfg.timeout_s, peer, (int)g->pids[peer], ST_ENV_TIMEOUT);
        return coll_mark_broken(g, ST_ERR_TIMEOUT, peer);
    }
    return ST_OK;
}

static st_status wait_slow(st_group *g, int peer, uint32_t target)
{
    struct ctl *c = g->ctl[peer];
    for (int i = 0; i < (g->oversubscribed ? 16 : 4); i++) {
        sched_yield();
        if (reached(g, peer, target))
            return ST_OK;
    }
    const struct timespec nap = {0, 20 * 1000 * 1000};
    double start = st_now_s(), next_check = start + 0.1;
    for (;;) {
        atomic_fetch_add(&c->sleepers, 1);
        uint32_t v = atomic_load(&c->progress);
        if (!ge(v, target) && !atomic_load(&c->aborted))
            futex(&c->progress, FUTEX_WAIT, v, &nap);
        atomic_fetch_sub(&c->sleepers, 1);
        if (reached(g, peer, target))
            return ST_OK;
        st_status st = check_waiting(g, peer, start, &next_check);
        if (st != ST_OK)
            return st;
    }
}

/* Wait until `peer` has published `target` (base-relative values are built
 * by the callers). */
static st_status wait_peer(st_group *g, int peer, uint32_t target)
{
    if (reached(g, peer, target))
        return ST_OK;
    double t0 = st_now_s();
    st_status st = ST_OK;
    int i = 0;
    for (; i < g->cfg.spin && !reached(g, peer, target); i++)
        cpu_relax();
    if (i == g->cfg.spin)
        st = wait_slow(g, peer, target);
    g->waited_s += st_now_s() - t0;
    return st;
}

double st_group_wait_seconds(const st_group *g) { return g->waited_s; }

/* ------------------------------------------------------ sequence words -- */

/* A futex is 32 bits: a sleeper on a 64-bit sequence word waits on the half
 * that changes with every call. */
static uint32_t *seq_futex_word(_Atomic uint64_t *seq)
{
    return (uint32_t *)((char *)seq + (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 0 : 4));
}

/* The writer looks for sleepers without a fence (a fence on every call would
 * cost more than the small payload it carries), so a wake can be missed when
 * a waiter registers just as the number is stored: the waiter's nap is then
 * short, 2 ms, and it looks again. */
void coll_wake_seq(st_group *g, _Atomic uint64_t *seq)
{
    if (atomic_load_explicit(&g->ctl[g->rank]->sleepers, memory_order_relaxed) != 0)
        syscall(SYS_futex, seq_futex_word(seq), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline bool seq_is(_Atomic uint64_t *seq, uint64_t want)
{
    return atomic_load_explicit(seq, memory_order_acquire) == want;
}

static st_status wait_seq_slow(st_group *g, int peer, _Atomic uint64_t *seq, uint64_t want)
{
    struct ctl *c = g->ctl[peer];
    for (int i = 0; i < (g->oversubscribed ? 16 : 4); i++) {
        sched_yield();
        if (seq_is(seq, want))
            return ST_OK;
    }
    const struct timespec nap = {0, 2 * 1000 * 1000};
    double start = st_now_s(), next_check = start + 0.1;
    for (;;) {
        atomic_fetch_add(&c->sleepers, 1);
        uint64_t v = atomic_load(seq);
        if (v != want && !atomic_load(&c->aborted))
            syscall(SYS_futex, seq_futex_word(seq), FUTEX_WAIT, (uint32_t)v, &nap, NULL, 0);
        atomic_fetch_sub(&c->sleepers, 1);
        if (seq_is(seq, want))
            return ST_OK;
        st_status st = check_waiting(g, peer, start, &next_check);
        if (st != ST_OK)
            return st;
    }
}

st_status coll_wait_seq(st_group *g, int peer, _Atomic uint64_t *seq, uint64_t want)
{
    int i = 0;
    for (; i < g->cfg.spin && !seq_is(seq, want); i++)
        cpu_relax();
    if (i < g->cfg.spin)
        return ST_OK;  /* a spin this short is not counted as waiting: reading the clock would double it */
    double t0 = st_now_s();
    st_status st = wait_seq_slow(g, peer, seq, want);
    g->waited_s += st_now_s() - t0;
    return st;
}


/* Each of these is one synchronisation in the counters: a point where the
 * rank cannot go on until others have published, whether or not it then
 * has to wait. */
st_status coll_wait_for(st_group *g, int peer, uint32_t target)
{
    g->ctr.syncs++;
    return wait_peer(g, peer, target);
}

st_status coll_wait_all(st_group *g, uint32_t target)
{
    g->ctr.syncs++;
    if (ge(g->known_all_ge, target))
        return ST_OK;
    for (int q = 0; q < g->world; q++) {
        if (q == g->rank)
            continue;
        st_status st = wait_peer(g, q, target);
        if (st != ST_OK)
            return st;
    }
    g->known_all_ge = target;
    return ST_OK;
}

st_status coll_wait_set(st_group *g, const int *peers, int n, uint32_t target)
{
    g->ctr.syncs++;
    for (int k = 0; k < n; k++) {
        st_status st = peers[k] == g->rank ? ST_OK : wait_peer(g, peers[k], target);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

st_status coll_check_usable(const st_group *g)
{
    if (!g)
        return st_fail(ST_ERR_INVALID, "coll: group is NULL");
    if (g->broken != ST_OK)
        return st_fail(g->broken, "%s (group unusable after an earlier failure)", g->broken_msg);
    return ST_OK;
}
