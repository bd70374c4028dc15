/* Shared-memory collectives: join, the wait/publish protocol, and the
 * all-reduce (direct and ring), broadcast and barrier algorithms.
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
#include "shmtrain/coll.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "heartbeat.h"
#include "segment.h"
#include "shmtrain/env.h"

#define LINE 128 /* two cache lines: the adjacent-line prefetcher pairs them */
#define PAGE 4096
#define CTL_MAGIC 0x53484d5452414e31ull /* "SHMTRAN1" */

/* One rank's control page, at the start of its segment. */
struct ctl {
    /* Written by the owner only, except `sleepers` (waiters register there
     * so the owner knows a FUTEX_WAKE is needed). */
    _Alignas(LINE) _Atomic uint32_t progress;
    _Atomic uint32_t sleepers;
    _Atomic uint32_t aborted;     /* 0, or 1 + rank that failed first */
    _Atomic uint32_t joined;
    /* Written once by the owner before `ready`. */
    _Alignas(LINE) _Atomic uint32_t ready;
    uint64_t magic;
    int32_t rank, world, pid;
    uint64_t zero_copy_bytes, staging_bytes, small_bytes, seg_bytes;
    char job_id[72];
};
_Static_assert(sizeof(struct ctl) <= PAGE, "control block fits one page");

struct st_group {
    int rank, world;
    char job_id[72];
    st_group_config cfg;          /* with defaults filled in */
    size_t seg_bytes, zc_off, staging_off, slots_off;
    struct st_segment *segs;      /* [world]; segs[rank] is ours */
    struct ctl **ctl;             /* [world] */
    pid_t *pids;                  /* [world] */
    float **rank_ptrs;            /* scratch [world] */
    uint32_t base;                /* progress value before the current collective */
    uint32_t known_all_ge;        /* every peer's progress is known to be >= this */
    uint32_t slot_base[2];        /* base of the last direct collective per slot */
    bool slot_used[2];
    int parity;
    bool oversubscribed;
    double waited_s;              /* time blocked in wait_for */
    struct st_heartbeat hb;       /* progress for the launcher's stall watch */
    st_status broken;             /* ST_OK while usable */
    char broken_msg[256];
};

/* ---------------------------------------------------------------- time -- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
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
static bool pid_alive(pid_t pid)
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

static void publish(st_group *g, uint32_t value)
{
    struct ctl *me = g->ctl[g->rank];
    /* seq_cst store then seq_cst load: pairs with the waiter's increment of
     * `sleepers` followed by its load of `progress` (Dekker), so either we
     * see the sleeper or it sees the new value. */
    atomic_store(&me->progress, value);
    if (atomic_load(&me->sleepers) != 0)
        futex(&me->progress, FUTEX_WAKE, INT_MAX, NULL);
}

static st_status mark_broken(st_group *g, st_status st, int failed_rank)
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
    return mark_broken(g, ST_ERR_PEER_DEAD, root);
}

static inline bool reached(st_group *g, int peer, uint32_t target)
{
    return ge(atomic_load_explicit(&g->ctl[peer]->progress, memory_order_acquire), target);
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
    double start = now_s(), next_check = start + 0.1;
    for (;;) {
        atomic_fetch_add(&c->sleepers, 1);
        uint32_t v = atomic_load(&c->progress);
        if (!ge(v, target) && !atomic_load(&c->aborted))
            futex(&c->progress, FUTEX_WAIT, v, &nap);
        atomic_fetch_sub(&c->sleepers, 1);
        if (reached(g, peer, target))
            return ST_OK;
        if (atomic_load(&c->aborted))
            return peer_failed(g, peer);
        double t = now_s();
        if (t - start >= 1.0)
            st_heartbeat_waiting(&g->hb, peer);
        if (t >= next_check) {
            if (!pid_alive(g->pids[peer]))
                return peer_failed(g, peer);
            next_check = t + 0.1;
        }
        if (t - start >= g->cfg.timeout_s) {
            st_fail(ST_ERR_TIMEOUT,
                    "coll: rank %d waited %.0f s for rank %d (pid %d) without progress "
                    "(SHMTRAIN_TIMEOUT); is a rank stuck or calling a different collective?",
                    g->rank, g->cfg.timeout_s, peer, (int)g->pids[peer]);
            return mark_broken(g, ST_ERR_TIMEOUT, peer);
        }
    }
}

/* Wait until `peer` has published `target` (base-relative values are built
 * by the callers). */
static inline st_status wait_for(st_group *g, int peer, uint32_t target)
{
    if (reached(g, peer, target))
        return ST_OK;
    double t0 = now_s();
    st_status st = ST_OK;
    int i = 0;
    for (; i < g->cfg.spin && !reached(g, peer, target); i++)
        cpu_relax();
    if (i == g->cfg.spin)
        st = wait_slow(g, peer, target);
    g->waited_s += now_s() - t0;
    return st;
}

double st_group_wait_seconds(const st_group *g) { return g->waited_s; }

static st_status wait_all(st_group *g, uint32_t target)
{
    if (ge(g->known_all_ge, target))
        return ST_OK;
    for (int q = 0; q < g->world; q++) {
        if (q == g->rank)
            continue;
        st_status st = wait_for(g, q, target);
        if (st != ST_OK)
            return st;
    }
    g->known_all_ge = target;
    return ST_OK;
}

static st_status check_usable(const st_group *g)
{
    if (!g)
        return st_fail(ST_ERR_INVALID, "coll: group is NULL");
    if (g->broken != ST_OK)
        return st_fail(g->broken, "%s (group unusable after an earlier failure)", g->broken_msg);
    return ST_OK;
}

/* ------------------------------------------------------------- kernels -- */

/* Built for several ISAs, picked at load time (ifunc): the library stays
 * portable while the reduction uses the widest vectors the CPU has. */
#define ST_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))

ST_MULTIVERSION
static void add_into(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

ST_MULTIVERSION
static void add_into_div(float *restrict dst, const float *restrict src, size_t n, float div)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (dst[i] + src[i]) / div;
}

/* ---------------------------------------------------------------- ring -- */

/* Elements [lo, hi) of chunk `j` (of `k`) of segment `seg` (of `world`). */
static void chunk_range(size_t n, int world, int seg, size_t j, size_t k, size_t *lo, size_t *hi)
{
    size_t s0 = n * (size_t)seg / (size_t)world, s1 = n * (size_t)(seg + 1) / (size_t)world;
    size_t len = s1 - s0;
    *lo = s0 + len * j / k;
    *hi = s0 + len * (j + 1) / k;
}

/* Ring all-reduce over buffers that every rank can read: bufs[q] is rank q's
 * buffer as mapped here.  Step t < N-1 is reduce-scatter (add the left
 * neighbour's partial sum of one segment into ours), t >= N-1 all-gather
 * (copy the left neighbour's final segment).  Each step is cut into k chunks
 * so the right neighbour can start on chunk j while we do chunk j+1. */
static st_status ring(st_group *g, float *const *bufs, size_t n, st_reduce_op op)
{
    const int N = g->world, r = g->rank, left = (r + N - 1) % N, right = (r + 1) % N;
    const size_t max_seg = (n + (size_t)N - 1) / (size_t)N;
    size_t k = (max_seg * sizeof(float) + g->cfg.chunk_bytes - 1) / g->cfg.chunk_bytes;
    if (k == 0)
        k = 1;
    const uint32_t base = g->base, K = (uint32_t)k;
    float *mine = bufs[r];
    const float *theirs = bufs[left];
    st_status st;

    publish(g, base + 1);
    for (int t = 0; t < 2 * N - 2; t++) {
        const bool scatter = t < N - 1;
        const int seg = scatter ? (r - t - 1 + 2 * N) % N : (r - (t - (N - 1)) + N) % N;
        for (uint32_t j = 0; j < K; j++) {
            /* The left neighbour finished step t-1 on this chunk. */
            uint32_t need_left = t == 0 ? base + 1 : base + 1 + (uint32_t)(t - 1) * K + j + 1;
            if ((st = wait_for(g, left, need_left)) != ST_OK)
                return st;
            /* All-gather step s overwrites our partial sum of this chunk,
             * which the right neighbour reads in its reduce-scatter step s.
             * No wait is needed: following the left waits back N-1 steps
             * around the ring shows the right neighbour has finished step
             * t-(N-1) = s on chunk j before we get here. */
            size_t lo, hi;
            chunk_range(n, N, seg, j, k, &lo, &hi);
            if (!scatter)
                memcpy(mine + lo, theirs + lo, (hi - lo) * sizeof(float));
            else if (t == N - 2 && op == ST_AVG)
                add_into_div(mine + lo, theirs + lo, hi - lo, (float)N);
            else
                add_into(mine + lo, theirs + lo, hi - lo);
            publish(g, base + 1 + (uint32_t)t * K + j + 1);
        }
    }
    const uint32_t units = 1 + 2 * (uint32_t)(N - 1) * K;
    /* The right neighbour reads our buffer until its last step; the caller
     * may overwrite it as soon as we return. */
    if ((st = wait_for(g, right, base + units)) != ST_OK)
        return st;
    g->base = base + units;
    return ST_OK;
}

/* -------------------------------------------------------------- direct -- */

static char *seg_at(const st_group *g, int q, size_t off)
{
    return (char *)g->segs[q].base + off;
}

/* Every rank copies its input into a slot, then sums all slots in rank
 * order: one synchronisation, identical bits everywhere.  Two slots
 * alternate, so a slot is rewritten only after every peer has entered the
 * collective that followed its last use, i.e. finished reading it. */
static st_status direct(st_group *g, float *buf, size_t n, st_reduce_op op)
{
    const int p = g->parity;
    const uint32_t base = g->base;
    st_status st;
    if (g->slot_used[p] && (st = wait_all(g, g->slot_base[p] + 2)) != ST_OK)
        return st;
    const size_t slot_off = g->slots_off + (size_t)p * g->cfg.small_bytes;
    memcpy(seg_at(g, g->rank, slot_off), buf, n * sizeof(float));
    publish(g, base + 1);
    if ((st = wait_all(g, base + 1)) != ST_OK)
        return st;
    const float *first = (const float *)seg_at(g, 0, slot_off);
    memcpy(buf, first, n * sizeof(float));
    for (int q = 1; q < g->world; q++)
        add_into(buf, (const float *)seg_at(g, q, slot_off), n);
    if (op == ST_AVG)
        for (size_t i = 0; i < n; i++)
            buf[i] /= (float)g->world;
    g->slot_base[p] = base;
    g->slot_used[p] = true;
    g->parity ^= 1;
    g->base = base + 1;
    return ST_OK;
}

/* ---------------------------------------------------------- all-reduce -- */

static bool in_zero_copy(const st_group *g, const float *buf, size_t n, size_t *off)
{
    const char *zc = seg_at(g, g->rank, g->zc_off), *b = (const char *)buf;
    if (!g->cfg.zero_copy_bytes || b < zc || b >= zc + g->cfg.zero_copy_bytes)
        return false;
    *off = (size_t)(b - zc);
    return *off + n * sizeof(float) <= g->cfg.zero_copy_bytes;
}

const char *st_allreduce_algorithm(const st_group *g, const float *buf, size_t count)
{
    size_t off;
    if (!g || g->world == 1 || count == 0)
        return "none";
    if (count * sizeof(float) <= g->cfg.small_bytes)
        return "direct";
    return in_zero_copy(g, buf, count, &off) ? "ring" : "ring-copy";
}

static st_status allreduce_f32(st_group *g, float *buf, size_t count, st_reduce_op op)
{
    st_status st = check_usable(g);
    if (st != ST_OK)
        return st;
    if (op != ST_SUM && op != ST_AVG)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: unknown reduce op %d", (int)op);
    if (count && !buf)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: NULL buffer with count %zu", count);
    if (g->world == 1 || count == 0)
        return ST_OK;
    if (count * sizeof(float) <= g->cfg.small_bytes)
        return direct(g, buf, count, op);

    size_t off;
    if (in_zero_copy(g, buf, count, &off)) {
        for (int q = 0; q < g->world; q++)
            g->rank_ptrs[q] = (float *)(seg_at(g, q, g->zc_off) + off);
        return ring(g, g->rank_ptrs, count, op);
    }
    /* Ordinary buffer: stage it through shared memory piece by piece. */
    for (int q = 0; q < g->world; q++)
        g->rank_ptrs[q] = (float *)seg_at(g, q, g->staging_off);
    const size_t piece = g->cfg.staging_bytes / sizeof(float);
    for (size_t done = 0; done < count; done += piece) {
        size_t len = count - done < piece ? count - done : piece;
        memcpy(g->rank_ptrs[g->rank], buf + done, len * sizeof(float));
        if ((st = ring(g, g->rank_ptrs, len, op)) != ST_OK)
            return st;
        memcpy(buf + done, g->rank_ptrs[g->rank], len * sizeof(float));
    }
    return ST_OK;
}

/* ----------------------------------------------------- broadcast, barrier -- */

/* The root streams the message through the two halves of its staging area;
 * a half is rewritten only after every peer has consumed the piece before. */
static st_status broadcast(st_group *g, void *buf, size_t bytes, int root)
{
    st_status st = check_usable(g);
    if (st != ST_OK)
        return st;
    if (root < 0 || root >= g->world)
        return st_fail(ST_ERR_INVALID, "coll: broadcast: root %d is not a rank of a world of %d",
                       root, g->world);
    if (bytes && !buf)
        return st_fail(ST_ERR_INVALID, "coll: broadcast: NULL buffer with %zu bytes", bytes);
    if (g->world == 1 || bytes == 0)
        return ST_OK;

    const size_t half = g->cfg.staging_bytes / 2;
    const uint32_t base = g->base, pieces = (uint32_t)((bytes + half - 1) / half);
    char *data = buf;
    publish(g, base + 1);
    for (uint32_t i = 0; i < pieces; i++) {
        size_t off = (size_t)i * half, len = bytes - off < half ? bytes - off : half;
        char *stage = seg_at(g, root, g->staging_off + (i % 2) * half);
        if (g->rank == root) {
            if (i >= 2 && (st = wait_all(g, base + 1 + (i - 2) + 1)) != ST_OK)
                return st;
            memcpy(stage, data + off, len);
        } else {
            if ((st = wait_for(g, root, base + 1 + i + 1)) != ST_OK)
                return st;
            memcpy(data + off, stage, len);
        }
        publish(g, base + 1 + i + 1);
    }
    if (g->rank == root && (st = wait_all(g, base + 1 + pieces)) != ST_OK)
        return st;
    g->base = base + 1 + pieces;
    return ST_OK;
}

static st_status barrier(st_group *g)
{
    st_status st = check_usable(g);
    if (st != ST_OK)
        return st;
    if (g->world == 1)
        return ST_OK;
    const uint32_t base = g->base;
    publish(g, base + 1);
    if ((st = wait_all(g, base + 1)) != ST_OK)
        return st;
    g->base = base + 1;
    return ST_OK;
}

/* ---------------------------------------------------------------- join -- */

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static size_t env_size(const char *name, size_t fallback)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return fallback;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    return (errno || *end || x == 0) ? fallback : (size_t)x;
}

static double env_double(const char *name, double fallback)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return fallback;
    char *end;
    double x = strtod(v, &end);
    return (*end || !(x > 0)) ? fallback : x;
}

static st_status fill_config(st_group *g, const st_group_config *in)
{
    st_group_config c = *in;
    if (c.world_size < 1 || c.world_size > 4096)
        return st_fail(ST_ERR_INVALID, "coll: world size %d is not in 1..4096", c.world_size);
    if (c.rank < 0 || c.rank >= c.world_size)
        return st_fail(ST_ERR_INVALID, "coll: rank %d is not in 0..%d", c.rank, c.world_size - 1);
    if (!st_job_id_valid(c.job_id))
        return st_fail(ST_ERR_INVALID, "coll: job id '%s' is not usable: use 1-64 of [A-Za-z0-9_.-]",
                       c.job_id ? c.job_id : "(null)");
    if (!c.staging_bytes)
        c.staging_bytes = env_size("SHMTRAIN_STAGING_BYTES", 4u << 20);
    if (!c.chunk_bytes)
        c.chunk_bytes = env_size("SHMTRAIN_CHUNK_BYTES", 128u << 10);
    if (!c.small_bytes) {
        const char *v = getenv("SHMTRAIN_SMALL_BYTES");
        c.small_bytes = (v && !strcmp(v, "0")) ? ST_SMALL_NEVER
                                               : env_size("SHMTRAIN_SMALL_BYTES", 16u << 10);
    }
    if (c.small_bytes == ST_SMALL_NEVER)
        c.small_bytes = 0;
    if (!(c.timeout_s > 0))
        c.timeout_s = env_double("SHMTRAIN_TIMEOUT", 300.0);
    if (!(c.join_timeout_s > 0))
        c.join_timeout_s = env_double("SHMTRAIN_JOIN_TIMEOUT", 60.0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    g->oversubscribed = ncpu > 0 && c.world_size > ncpu;
    if (c.spin <= 0)
        c.spin = (int)env_size("SHMTRAIN_SPIN", g->oversubscribed ? 20 : 2000);
    c.staging_bytes = round_up(c.staging_bytes < 2 * PAGE ? 2 * PAGE : c.staging_bytes, 2 * PAGE);
    c.small_bytes = round_up(c.small_bytes, 64);
    if (c.chunk_bytes < 4096)
        c.chunk_bytes = 4096;
    g->cfg = c;
    g->rank = c.rank;
    g->world = c.world_size;
    snprintf(g->job_id, sizeof g->job_id, "%s", c.job_id);
    g->cfg.job_id = g->job_id;
    g->zc_off = PAGE;
    g->staging_off = g->zc_off + round_up(c.zero_copy_bytes, PAGE);
    g->slots_off = g->staging_off + c.staging_bytes;
    g->seg_bytes = g->slots_off + round_up(2 * c.small_bytes, PAGE);
    return ST_OK;
}

static void init_ctl(st_group *g)
{
    struct ctl *c = g->segs[g->rank].base;
    c->magic = CTL_MAGIC;
    c->rank = g->rank;
    c->world = g->world;
    c->pid = (int32_t)getpid();
    c->zero_copy_bytes = g->cfg.zero_copy_bytes;
    c->staging_bytes = g->cfg.staging_bytes;
    c->small_bytes = g->cfg.small_bytes;
    c->seg_bytes = g->seg_bytes;
    snprintf(c->job_id, sizeof c->job_id, "%s", g->job_id);
    atomic_store_explicit(&c->ready, 1, memory_order_release);
}

static st_status check_peer_ctl(st_group *g, int q)
{
    const struct ctl *c = g->ctl[q];
    if (c->magic != CTL_MAGIC || c->rank != q || c->world != g->world ||
        strcmp(c->job_id, g->job_id) != 0 || c->seg_bytes != g->seg_bytes)
        return st_fail(ST_ERR_MISMATCH,
                       "coll: rank %d's segment disagrees with rank %d (world %d vs %d, "
                       "job '%.64s' vs '%s'): ranks were started with different settings",
                       q, g->rank, (int)c->world, g->world, c->job_id, g->job_id);
    g->pids[q] = c->pid;
    return ST_OK;
}

/* Map peer q's segment, waiting until it exists and is initialised. */
static st_status attach_peer(st_group *g, int q, double deadline)
{
    char name[ST_SEGMENT_NAME_MAX];
    st_status st = st_segment_name(name, sizeof name, g->job_id, q);
    double nap = 0.0005;
    while (st == ST_OK) {
        st = st_segment_attach(&g->segs[q], name, g->seg_bytes,
                               (struct st_segment_mark){CTL_MAGIC, offsetof(struct ctl, magic)});
        if (st == ST_OK) {
            g->ctl[q] = g->segs[q].base;
            while (!atomic_load_explicit(&g->ctl[q]->ready, memory_order_acquire)) {
                if (now_s() > deadline)
                    return st_fail(ST_ERR_TIMEOUT, "coll: rank %d never initialised its segment", q);
                sleep_s(0.0005);
            }
            return check_peer_ctl(g, q);
        }
        if (st != ST_ERR_EXISTS)
            return st;
        if (now_s() > deadline)
            return st_fail(ST_ERR_TIMEOUT,
                           "coll: rank %d of job '%s': rank %d did not join within %.0f s "
                           "(SHMTRAIN_JOIN_TIMEOUT); was it started with the same job id?",
                           g->rank, g->job_id, q, g->cfg.join_timeout_s);
        sleep_s(nap);
        nap = nap < 0.01 ? nap * 2 : nap;
        st = ST_OK;
    }
    return st;
}

/* Everyone has mapped everyone once every `joined` flag is set; then each
 * owner can drop its segment's name. */
static st_status wait_joined(st_group *g, double deadline)
{
    for (int q = 0; q < g->world; q++) {
        while (!atomic_load_explicit(&g->ctl[q]->joined, memory_order_acquire)) {
            if (atomic_load(&g->ctl[q]->aborted) || !pid_alive(g->pids[q]))
                return st_fail(ST_ERR_PEER_DEAD, "coll: rank %d (pid %d) died while joining",
                               q, (int)g->pids[q]);
            if (now_s() > deadline)
                return st_fail(ST_ERR_TIMEOUT, "coll: rank %d did not finish joining", q);
            sleep_s(0.0002);
        }
    }
    return ST_OK;
}

static st_status alloc_arrays(st_group *g)
{
    g->segs = calloc((size_t)g->world, sizeof *g->segs);
    g->ctl = calloc((size_t)g->world, sizeof *g->ctl);
    g->pids = calloc((size_t)g->world, sizeof *g->pids);
    g->rank_ptrs = calloc((size_t)g->world, sizeof *g->rank_ptrs);
    if (!g->segs || !g->ctl || !g->pids || !g->rank_ptrs)
        return st_fail(ST_ERR_NOMEM, "coll: out of memory for a world of %d", g->world);
    return ST_OK;
}

/* On a failed join: our own name goes; so do the names of peers that died
 * holding theirs, so a crash while joining leaves nothing in /dev/shm. */
static void abandon_join(st_group *g)
{
    for (int q = 0; q < g->world; q++) {
        if (q != g->rank && g->ctl[q] && g->pids[q] > 0 && !pid_alive(g->pids[q])) {
            char name[ST_SEGMENT_NAME_MAX];
            if (st_segment_name(name, sizeof name, g->job_id, q) == ST_OK)
                shm_unlink(name);
        }
    }
    if (g->ctl[g->rank])
        atomic_store(&g->ctl[g->rank]->aborted, (uint32_t)g->rank + 1);
}

/* Segments of this job not created yet, ours included: what the space
 * check must still find room for (peers that joined first already took
 * theirs out of the free space). */
static size_t missing_segments(const st_group *g)
{
    size_t missing = 0;
    for (int q = 0; q < g->world; q++) {
        char name[ST_SEGMENT_NAME_MAX], path[ST_SEGMENT_NAME_MAX + 16];
        struct stat sb;
        st_segment_name(name, sizeof name, g->job_id, q);
        snprintf(path, sizeof path, "%s%s", ST_SHM_DIR, name);
        if (q == g->rank || stat(path, &sb) != 0)
            missing++;
    }
    return missing;
}

st_status st_group_create(st_group **out, const st_group_config *cfg)
{
    if (!out || !cfg)
        return st_fail(ST_ERR_INVALID, "coll: st_group_create: NULL argument");
    *out = NULL;
    st_group *g = calloc(1, sizeof *g);
    if (!g)
        return st_fail(ST_ERR_NOMEM, "coll: out of memory");
    g->hb.fd = -1;
    st_status st;
    if ((st = fill_config(g, cfg)) != ST_OK || (st = alloc_arrays(g)) != ST_OK)
        goto fail;
    if ((st = st_shm_space_check(g->seg_bytes * missing_segments(g), g->cfg.shm_limit_bytes,
                                 g->world, g->seg_bytes)) != ST_OK)
        goto fail;

    char name[ST_SEGMENT_NAME_MAX];
    if ((st = st_segment_name(name, sizeof name, g->job_id, g->rank)) != ST_OK ||
        (st = st_segment_create(&g->segs[g->rank], name, g->seg_bytes)) != ST_OK)
        goto fail;
    g->ctl[g->rank] = g->segs[g->rank].base;
    g->pids[g->rank] = getpid();
    init_ctl(g);

    const double deadline = now_s() + g->cfg.join_timeout_s;
    for (int q = 0; q < g->world; q++)
        if (q != g->rank && (st = attach_peer(g, q, deadline)) != ST_OK)
            goto fail;
    atomic_store_explicit(&g->ctl[g->rank]->joined, 1, memory_order_release);
    if ((st = wait_joined(g, deadline)) != ST_OK)
        goto fail;
    st_segment_unlink(&g->segs[g->rank]);
    st_heartbeat_open(&g->hb);
    *out = g;
    return ST_OK;

fail:
    if (g->segs)
        abandon_join(g);
    st_group_destroy(g);
    return st;
}

static int env_int(const char *a, const char *b, int fallback, bool *found)
{
    const char *v = getenv(a);
    if (!v || !*v)
        v = b ? getenv(b) : NULL;
    if (!v || !*v)
        return fallback;
    *found = true;
    char *end;
    long x = strtol(v, &end, 10);
    return (*end || x < INT_MIN || x > INT_MAX) ? -1 : (int)x;
}

st_status st_group_create_from_env(st_group **out, const st_group_config *defaults)
{
    st_group_config c = {0};
    if (defaults)
        c = *defaults;
    bool have_world = false, have_rank = false;
    c.world_size = env_int(ST_ENV_WORLD_SIZE, ST_ENV_GENERIC_WORLD_SIZE, 1, &have_world);
    c.rank = env_int(ST_ENV_RANK, ST_ENV_GENERIC_RANK, 0, &have_rank);
    if (c.world_size < 1)
        return st_fail(ST_ERR_INVALID, "coll: SHMTRAIN_WORLD_SIZE/WORLD_SIZE is not a positive integer");
    if (have_world && c.world_size > 1 && !have_rank)
        return st_fail(ST_ERR_INVALID, "coll: WORLD_SIZE is %d but SHMTRAIN_RANK/RANK is not set",
                       c.world_size);
    char local_job[32];
    c.job_id = getenv(ST_ENV_JOB_ID);
    if (!c.job_id || !*c.job_id) {
        if (c.world_size > 1)
            return st_fail(ST_ERR_INVALID,
                           "coll: SHMTRAIN_JOB_ID is not set (shmrun sets it; ranks of one job "
                           "must share it)");
        snprintf(local_job, sizeof local_job, "local-%d", (int)getpid());
        c.job_id = local_job;
    }
    return st_group_create(out, &c);
}

void st_group_destroy(st_group *g)
{
    if (!g)
        return;
    if (g->segs)
        for (int q = 0; q < g->world; q++)
            st_segment_close(&g->segs[q]);
    free(g->segs);
    free(g->ctl);
    free(g->pids);
    free(g->rank_ptrs);
    st_heartbeat_close(&g->hb);
    free(g);
}

int st_group_rank(const st_group *g) { return g->rank; }
int st_group_size(const st_group *g) { return g->world; }
const char *st_group_job_id(const st_group *g) { return g->job_id; }

void *st_group_buffer(st_group *g, size_t *bytes)
{
    if (bytes)
        *bytes = g->cfg.zero_copy_bytes;
    return g->cfg.zero_copy_bytes ? seg_at(g, g->rank, g->zc_off) : NULL;
}

const void *st_group_peer_buffer(const st_group *g, int peer)
{
    if (!g || peer < 0 || peer >= g->world || !g->cfg.zero_copy_bytes)
        return NULL;
    return seg_at(g, peer, g->zc_off);
}

/* ------------------------------------------------- the public collectives -- */

/* A collective that completed is progress the launcher can see. */
static st_status progressed(st_group *g, st_status st)
{
    if (st == ST_OK)
        st_heartbeat_beat(&g->hb, now_s());
    return st;
}

st_status st_allreduce_f32(st_group *g, float *buf, size_t count, st_reduce_op op)
{
    return progressed(g, allreduce_f32(g, buf, count, op));
}

st_status st_broadcast(st_group *g, void *buf, size_t bytes, int root)
{
    return progressed(g, broadcast(g, buf, bytes, root));
}

st_status st_barrier(st_group *g)
{
    return progressed(g, barrier(g));
}

void st_group_heartbeat(st_group *g)
{
    if (g)
        st_heartbeat_beat(&g->hb, now_s());
}
