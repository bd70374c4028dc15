/* Point-to-point messages (st_send, st_recv): what pipeline parallelism
 * and torch.distributed's send/recv need, beside the collectives.
 *
 * Each ordered pair (p, q) has one ring in q's segment (its inbox from p):
 * p writes, q reads, and two 64-bit counters that only grow say how far
 * each has come (`head`: bytes p has written ever, `tail`: bytes q has
 * taken), so the ring has one writer and one reader and needs no lock.  A
 * message is a 16-byte header (length, tag) and its bytes, streamed
 * through the ring in pieces of a quarter of it: a message of any length
 * passes, the receiver copying out one piece while the sender writes the
 * next.  A sender returns once its last byte is in the ring (MPI_Send's
 * buffered case), so small messages never wait for their receiver.
 *
 * The calls touch nothing of the group but its segments, its peers' pids
 * and their aborted flags (all fixed once it joined) and atomic counters,
 * so they may run on other threads than the collectives, concurrently
 * (the torch backend runs each peer's sends and receives on threads of
 * their own); a failure breaks no collective.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "coll_internal.h"
#include "shmtrain/env.h"

/* A ring's counters, each on the line its writer owns; the sleeper count
 * beside a counter is the other side's (so the writer knows to wake it). */
struct p2p_ring {
    _Alignas(LINE) _Atomic uint64_t head;     /* written by the sender */
    _Atomic uint32_t receiver_sleeps;
    _Alignas(LINE) _Atomic uint64_t tail;     /* written by the receiver */
    _Atomic uint32_t sender_sleeps;
};
_Static_assert(sizeof(struct p2p_ring) <= PAGE, "a ring's counters fit its first page");

struct p2p_header {
    uint64_t bytes;
    int64_t tag;
};

/* The ring from `from` to `to`, in `to`'s segment (its inbox has one ring
 * a peer, itself skipped); its bytes follow the counters' page. */
static struct p2p_ring *ring_of(const st_group *g, int from, int to)
{
    const size_t index = (size_t)(from < to ? from : from - 1);
    return (struct p2p_ring *)coll_seg_at(g, to, g->p2p_off + index * (PAGE + g->p2p_ring_bytes));
}

static unsigned char *ring_data(struct p2p_ring *r) { return (unsigned char *)r + PAGE; }

static uint32_t *futex_word(_Atomic uint64_t *counter)
{
    return (uint32_t *)((char *)counter + (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 0 : 4));
}

struct p2p_wait {
    const st_group *g;
    int peer;
    const char *what;          /* "send to" or "receive from" */
    _Atomic uint64_t *counter; /* the peer's */
    _Atomic uint32_t *sleeps;  /* ours, beside it */
};

static st_status peer_gone(const struct p2p_wait *w)
{
    const st_group *g = w->g;
    if (atomic_load(&g->ctl[w->peer]->aborted) || !coll_pid_alive(g->pids[w->peer]))
        return st_fail(ST_ERR_PEER_DEAD, "coll: rank %d: %s rank %d: rank %d (pid %d) died or failed",
                       g->rank, w->what, w->peer, w->peer, (int)g->pids[w->peer]);
    return ST_OK;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Until *counter >= want: spin, yield, then sleep on it (the other side
 * wakes us: it stores, then reads our sleeper count, both sequentially
 * consistent, as we count ourselves in and then read the counter, so one
 * of the two sees the other), looking at the peer's health after each
 * nap (20 ms: a waiting receiver of a dead peer's message knows in that). */
static st_status wait_counter(const struct p2p_wait *w, uint64_t want)
{
    for (int i = 0; i < w->g->cfg.spin; i++, cpu_relax())
        if (atomic_load_explicit(w->counter, memory_order_acquire) >= want)
            return ST_OK;
    for (int i = 0; i < (w->g->oversubscribed ? 16 : 4); i++) {
        sched_yield();
        if (atomic_load_explicit(w->counter, memory_order_acquire) >= want)
            return ST_OK;
    }
    const struct timespec nap = {0, 20 * 1000 * 1000};
    const double start = st_now_s();
    for (;;) {
        atomic_fetch_add(w->sleeps, 1);
        const uint64_t v = atomic_load(w->counter);
        if (v < want)
            syscall(SYS_futex, futex_word(w->counter), FUTEX_WAIT, (uint32_t)v, &nap, NULL, 0);
        atomic_fetch_sub(w->sleeps, 1);
        if (atomic_load_explicit(w->counter, memory_order_acquire) >= want)
            return ST_OK;
        st_status st = peer_gone(w);
        if (st != ST_OK)
            return st;
        if (atomic_load(&w->g->p2p.cancelled))
            return st_fail(ST_ERR_INTERRUPTED, "coll: rank %d: %s rank %d: abandoned (st_p2p_cancel: the group is "
                           "going away with this call unfinished)", w->g->rank, w->what, w->peer);
        if (st_now_s() - start >= w->g->cfg.timeout_s)
            return st_fail(ST_ERR_TIMEOUT, "coll: rank %d: %s rank %d: nothing moved in %.0f s (%s); "
                           "does the peer make the matching call?",
                           w->g->rank, w->what, w->peer, w->g->cfg.timeout_s, ST_ENV_TIMEOUT);
    }
}

/* Our counter moved: store it, then wake the other side if it sleeps. */
static void advance(_Atomic uint64_t *counter, uint64_t value, _Atomic uint32_t *their_sleeps)
{
    atomic_store(counter, value);
    if (atomic_load(their_sleeps) != 0)
        syscall(SYS_futex, futex_word(counter), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* n bytes between the ring's stream position `pos` and `user`, across its end. */
static void ring_copy(struct p2p_ring *r, size_t ring_bytes, uint64_t pos, void *user, size_t n, bool into_ring)
{
    unsigned char *data = ring_data(r), *u = user;
    const size_t at = (size_t)(pos % ring_bytes), first = n < ring_bytes - at ? n : ring_bytes - at;
    memcpy(into_ring ? data + at : u, into_ring ? u : data + at, first);
    if (n > first)
        memcpy(into_ring ? data : u + first, into_ring ? u + first : data, n - first);
}

static size_t least(size_t a, size_t b) { return a < b ? a : b; }

/* The sender's side of n bytes: a piece at a time as the ring frees room. */
static st_status put(const st_group *g, int peer, const void *src, size_t n)
{
    struct p2p_ring *r = ring_of(g, g->rank, peer);
    const size_t R = g->p2p_ring_bytes, piece = R / 4;
    const struct p2p_wait w = {g, peer, "send to", &r->tail, &r->sender_sleeps};
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (size_t done = 0; done < n;) {
        const size_t want = least(n - done, piece);
        st_status st = head + want > R ? wait_counter(&w, head + want - R) : ST_OK;
        if (st != ST_OK)
            return st;
        const size_t room = R - (size_t)(head - atomic_load_explicit(&r->tail, memory_order_acquire));
        const size_t len = least(least(n - done, room), piece);
        ring_copy(r, R, head, (unsigned char *)src + done, len, true);
        head += len;
        done += len;
        advance(&r->head, head, &r->receiver_sleeps);
    }
    return ST_OK;
}

/* The receiver's side: n bytes out as the sender puts them in. */
static st_status take(const st_group *g, int peer, void *dst, size_t n)
{
    struct p2p_ring *r = ring_of(g, peer, g->rank);
    const size_t R = g->p2p_ring_bytes, piece = R / 4;
    const struct p2p_wait w = {g, peer, "receive from", &r->head, &r->receiver_sleeps};
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (size_t done = 0; done < n;) {
        st_status st = wait_counter(&w, tail + least(n - done, piece));
        if (st != ST_OK)
            return st;
        const size_t ready = (size_t)(atomic_load_explicit(&r->head, memory_order_acquire) - tail);
        const size_t len = least(least(n - done, ready), piece);
        ring_copy(r, R, tail, (unsigned char *)dst + done, len, false);
        tail += len;
        done += len;
        advance(&r->tail, tail, &r->sender_sleeps);
    }
    return ST_OK;
}

bool st_p2p_ready(const st_group *g, int peer, bool sending, size_t bytes)
{
    if (!g || peer < 0 || peer >= g->world || peer == g->rank)
        return true;  /* refused at once */
    struct p2p_ring *r = sending ? ring_of(g, g->rank, peer) : ring_of(g, peer, g->rank);
    const uint64_t held = atomic_load_explicit(&r->head, memory_order_acquire) -
                          atomic_load_explicit(&r->tail, memory_order_acquire);
    const uint64_t message = sizeof(struct p2p_header) + bytes;
    if (sending)
        return g->p2p_ring_bytes - held >= message;
    struct p2p_header h;
    if (held < sizeof h)
        return false;
    ring_copy(r, g->p2p_ring_bytes, atomic_load_explicit(&r->tail, memory_order_relaxed), &h, sizeof h, false);
    return h.bytes != bytes || held >= message;
}

void st_p2p_cancel(st_group *g)
{
    if (g)
        atomic_store(&g->p2p.cancelled, 1);
}

static st_status check_peer(const st_group *g, int peer, const void *buf, size_t bytes, const char *what)
{
    if (!g)
        return st_fail(ST_ERR_INVALID, "coll: %s: group is NULL", what);
    if (peer < 0 || peer >= g->world || peer == g->rank)
        return st_fail(ST_ERR_INVALID, "coll: %s: rank %d: peer %d is not another rank of 0..%d", what, g->rank,
                       peer, g->world - 1);
    if (!buf && bytes)
        return st_fail(ST_ERR_INVALID, "coll: %s: rank %d: NULL buffer of %zu bytes", what, g->rank, bytes);
    return ST_OK;
}

st_status st_send(st_group *g, int peer, int tag, const void *buf, size_t bytes)
{
    st_status st = check_peer(g, peer, buf, bytes, "send");
    if (st != ST_OK)
        return st;
    const struct p2p_header h = {bytes, tag};
    if ((st = put(g, peer, &h, sizeof h)) != ST_OK || (st = put(g, peer, buf, bytes)) != ST_OK)
        return st;
    atomic_fetch_add_explicit(&g->p2p.sent, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->p2p.sent_bytes, bytes, memory_order_relaxed);
    return ST_OK;
}

/* The next message's header, read without taking it. */
static st_status peek(const st_group *g, int peer, struct p2p_header *h)
{
    struct p2p_ring *r = ring_of(g, peer, g->rank);
    const struct p2p_wait w = {g, peer, "receive from", &r->head, &r->receiver_sleeps};
    const uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    st_status st = wait_counter(&w, tail + sizeof *h);
    if (st == ST_OK)
        ring_copy(r, g->p2p_ring_bytes, tail, h, sizeof *h, false);
    return st;
}

st_status st_recv(st_group *g, int peer, int tag, void *buf, size_t bytes)
{
    st_status st = check_peer(g, peer, buf, bytes, "recv");
    struct p2p_header h;
    if (st != ST_OK || (st = peek(g, peer, &h)) != ST_OK)
        return st;
    if (h.bytes != bytes || h.tag != tag)
        return st_fail(ST_ERR_MISMATCH,
                       "coll: recv: rank %d expects %zu bytes with tag %d from rank %d, whose next message is "
                       "%llu bytes with tag %lld (left for the next recv)",
                       g->rank, bytes, tag, peer, (unsigned long long)h.bytes, (long long)h.tag);
    if ((st = take(g, peer, &h, sizeof h)) != ST_OK || (st = take(g, peer, buf, bytes)) != ST_OK)
        return st;
    atomic_fetch_add_explicit(&g->p2p.received, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->p2p.received_bytes, bytes, memory_order_relaxed);
    return ST_OK;
}
