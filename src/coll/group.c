/* Joining and leaving a group: the configuration (its defaults; the
 * environment is the main()'s, src/common/env.c), creating this rank's segment and mapping the peers', the
 * control pages, and dropping every name once all ranks have mapped them. */
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

#include "coll_internal.h"
#include "shmtrain/env.h"

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static size_t larger(size_t a, size_t b) { return a > b ? a : b; }

/* A threshold as a size: "never" holds nothing. */
static size_t held(size_t v, size_t never) { return v == never ? 0 : v; }

/* This rank's NUMA node from the launcher's list: one number, else -1
 * (unknown, or an instance spanning several nodes). */
static int one_numa_node(const char *list)
{
    if (!list || !*list)
        return -1;
    long v = 0;
    for (const char *p = list; *p; p++) {
        if (*p < '0' || *p > '9' || v > 1 << 20)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return (int)v;
}

/* The threads one call may split over: the program's choice, or the
 * OpenMP pool capped so the ranks' threads do not outnumber the CPUs. */
static int default_threads(const st_group_config *c)
{
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int world = c->world_size;
    int t = c->team ? 1 : coll_omp_pool_size();  /* a host's pool: the host says how many */
    const long cap = ncpu > 0 ? ncpu / world : 1;
    if (t > cap)
        t = (int)cap;
    return t < 1 ? 1 : t;
}

static st_status check_config(const st_group_config *c, enum coll_algo *forced)
{
    if (c->world_size < 1 || c->world_size > 4096)
        return st_fail(ST_ERR_INVALID, "coll: world size %d is not in 1..4096", c->world_size);
    if (c->rank < 0 || c->rank >= c->world_size)
        return st_fail(ST_ERR_INVALID, "coll: rank %d is not in 0..%d", c->rank, c->world_size - 1);
    if (!st_job_id_valid(c->job_id))
        return st_fail(ST_ERR_INVALID, "coll: job id '%s' is not usable: use 1-64 of [A-Za-z0-9_.-]",
                       c->job_id ? c->job_id : "(null)");
    if (held(c->inline_bytes, ST_INLINE_NEVER) > ST_INLINE_MAX)
        return st_fail(ST_ERR_INVALID, "coll: inline_bytes %zu is above the inline all-reduce's %d",
                       c->inline_bytes, ST_INLINE_MAX);
    *forced = COLL_TABLE;
    if (c->algorithm && *c->algorithm && (*forced = coll_algo_parse(c->algorithm)) == COLL_TABLE)
        return st_fail(ST_ERR_INVALID,
                       "coll: algorithm '%.32s' (%s) is not one of inline, direct, ring, rsag, two-level",
                       c->algorithm, ST_ENV_ALLREDUCE_ALGORITHM);
    return ST_OK;
}

/* Each ordered pair's ring for st_send / st_recv: 256 KiB (a message of
 * 64 KiB pieces passes without the sides waiting on each other), less
 * from 9 ranks so an inbox stays 2 MiB, never under 16 KiB. */
static size_t p2p_ring_bytes(const st_group_config *c)
{
    if (c->p2p_bytes)
        return round_up(larger(c->p2p_bytes, 16u << 10), PAGE);
    const size_t peers = c->world_size > 1 ? (size_t)c->world_size - 1 : 1;
    const size_t share = (2u << 20) / peers / PAGE * PAGE;
    return share > (256u << 10) ? 256u << 10 : larger(share, 16u << 10);
}

/* The segment's regions: control page, zero-copy, staging, results, the
 * direct slots, the inline lines, the point-to-point inbox. */
static void lay_out(st_group *g)
{
    const st_group_config *c = &g->cfg;
    g->slot_bytes = round_up(larger(larger(held(c->small_bytes, ST_SMALL_NEVER),
                                           held(c->small_zero_copy_bytes, ST_SMALL_NEVER)),
                                    coll_table_max_bytes(COLL_DIRECT)), 64);
    const size_t inline_cap = larger(held(c->inline_bytes, ST_INLINE_NEVER), coll_table_max_bytes(COLL_INLINE));
    g->zc_off = PAGE;
    g->staging_off = g->zc_off + round_up(c->zero_copy_bytes, PAGE);
    g->results_off = g->staging_off + c->staging_bytes;
    g->results_bytes = round_up(c->staging_bytes / 2, PAGE);
    g->slots_off = g->results_off + g->results_bytes;
    g->inline_off = g->slots_off + round_up(2 * g->slot_bytes, PAGE);
    g->inline_lines = (inline_cap + INLINE_PAYLOAD - 1) / INLINE_PAYLOAD;
    g->p2p_off = g->inline_off + round_up(2 * g->inline_lines * sizeof(struct inline_line), PAGE);
    g->p2p_ring_bytes = p2p_ring_bytes(c);
    g->seg_bytes = g->p2p_off + (size_t)(g->world - 1) * (PAGE + g->p2p_ring_bytes);
}

/* Defaults into the numeric fields left 0; the algorithm thresholds stay
 * as given (0: choose.c's table decides). */
static st_status fill_config(st_group *g, const st_group_config *in)
{
    st_group_config c = *in;
    st_status st = check_config(&c, &g->forced);
    if (st != ST_OK)
        return st;
    if (!c.staging_bytes)
        c.staging_bytes = 4u << 20;
    if (!c.chunk_bytes)
        c.chunk_bytes = 128u << 10;
    if (!(c.timeout_s > 0))
        c.timeout_s = 300.0;
    if (!(c.join_timeout_s > 0))
        c.join_timeout_s = 60.0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    g->oversubscribed = ncpu > 0 && c.world_size > ncpu;
    if (c.spin <= 0)
        c.spin = g->oversubscribed ? 20 : 2000;
    c.staging_bytes = round_up(c.staging_bytes < 2 * PAGE ? 2 * PAGE : c.staging_bytes, 2 * PAGE);
    if (c.chunk_bytes < 4096)
        c.chunk_bytes = 4096;
    if (!c.thread_bytes)  /* below this per thread, a fork and join costs more than it gives back */
        c.thread_bytes = 256u << 10;
    g->threads = c.threads > 0 ? c.threads : default_threads(&c);
    c.threads = g->threads;
    g->cfg = c;
    g->rank = c.rank;
    g->world = c.world_size;
    snprintf(g->job_id, sizeof g->job_id, "%s", c.job_id);
    g->cfg.job_id = g->job_id;
    g->cfg.numa_nodes = NULL;  /* the caller's string; read once, in init_ctl */
    g->cfg.algorithm = g->forced == COLL_TABLE ? NULL : coll_algo_name(g->forced);
    lay_out(g);
    return ST_OK;
}

static void init_ctl(st_group *g, const char *numa_nodes)
{
    struct ctl *c = g->segs[g->rank].base;
    c->magic = CTL_MAGIC;
    c->rank = g->rank;
    c->world = g->world;
    c->pid = (int32_t)getpid();
    c->zero_copy_bytes = g->cfg.zero_copy_bytes;
    c->staging_bytes = g->cfg.staging_bytes;
    c->small_bytes = g->cfg.small_bytes;
    c->small_zero_copy_bytes = g->cfg.small_zero_copy_bytes;
    c->inline_bytes = g->cfg.inline_bytes;
    c->seg_bytes = g->seg_bytes;
    c->p2p_bytes = g->p2p_ring_bytes;
    c->numa = one_numa_node(numa_nodes);
    snprintf(c->job_id, sizeof c->job_id, "%s", g->job_id);
    snprintf(c->algorithm, sizeof c->algorithm, "%s", g->cfg.algorithm ? g->cfg.algorithm : "");
    atomic_store_explicit(&c->ready, 1, memory_order_release);
}

static st_status check_peer_ctl(st_group *g, int q)
{
    const struct ctl *c = g->ctl[q];
    if (c->magic != CTL_MAGIC || c->rank != q || c->world != g->world ||
        strcmp(c->job_id, g->job_id) != 0 || c->seg_bytes != g->seg_bytes || c->p2p_bytes != g->p2p_ring_bytes ||
        c->small_bytes != g->cfg.small_bytes || c->small_zero_copy_bytes != g->cfg.small_zero_copy_bytes ||
        c->inline_bytes != g->cfg.inline_bytes ||
        strcmp(c->algorithm, g->cfg.algorithm ? g->cfg.algorithm : "") != 0)
        return st_fail(ST_ERR_MISMATCH,
                       "coll: rank %d's segment disagrees with rank %d (world %d vs %d, "
                       "job '%.64s' vs '%s'): ranks were started with different settings",
                       q, g->rank, (int)c->world, g->world, c->job_id, g->job_id);
    g->pids[q] = c->pid;
    g->numa[q] = c->numa;
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
                if (st_now_s() > deadline)
                    return st_fail(ST_ERR_TIMEOUT, "coll: rank %d never initialised its segment", q);
                coll_sleep_s(0.0005);
            }
            return check_peer_ctl(g, q);
        }
        if (st != ST_ERR_EXISTS)
            return st;
        if (st_now_s() > deadline)
            return st_fail(ST_ERR_TIMEOUT,
                           "coll: rank %d of job '%s': rank %d did not join within %.0f s "
                           "(%s); was it started with the same job id?",
                           g->rank, g->job_id, q, g->cfg.join_timeout_s, ST_ENV_JOIN_TIMEOUT);
        coll_sleep_s(nap);
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
            /* Gone now, but it may have joined since the loop's test, then
             * left (a fast peer with nothing more to do): only a peer that
             * never set its flag died while joining. */
            if ((atomic_load(&g->ctl[q]->aborted) || !coll_pid_alive(g->pids[q])) &&
                !atomic_load_explicit(&g->ctl[q]->joined, memory_order_acquire))
                return st_fail(ST_ERR_PEER_DEAD, "coll: rank %d (pid %d) died while joining",
                               q, (int)g->pids[q]);
            if (st_now_s() > deadline)
                return st_fail(ST_ERR_TIMEOUT, "coll: rank %d did not finish joining", q);
            coll_sleep_s(0.0002);
        }
    }
    return ST_OK;
}

/* Ranks on 2+ NUMA nodes, every node with the same 2+ ranks: the layout
 * of the two-level all-reduce (nodes in increasing number, ranks in rank
 * order within each).  Anything else is one level. */
static void two_level_layout(st_group *g)
{
    int nodes = 0, *first = g->lv.rank_at;  /* scratch: each node's first rank, then the layout */
    for (int q = 0; q < g->world; q++) {
        if (g->numa[q] < 0)
            return;
        int k = 0;
        while (k < nodes && g->numa[first[k]] != g->numa[q])
            k++;
        if (k == nodes)
            first[nodes++] = q;
    }
    if (nodes < 2 || g->world % nodes || g->world / nodes < 2)
        return;
    const int per = g->world / nodes;
    int at = 0;
    for (int node = INT_MIN, m = 0; m < nodes; m++) {
        int next = INT_MAX;  /* the smallest node number above the last one placed */
        for (int q = 0; q < g->world; q++)
            if (g->numa[q] > node && g->numa[q] < next)
                next = g->numa[q];
        int count = 0;
        for (int q = 0; q < g->world; q++)
            if (g->numa[q] == next) {
                if (q == g->rank)
                    g->lv.node_index = m, g->lv.local_index = count;
                count++;
                first[at++] = q;
            }
        if (count != per)
            return;
        node = next;
    }
    g->lv = (struct coll_levels){2, nodes, per, g->lv.node_index, g->lv.local_index, g->lv.rank_at};
}

static st_status find_levels(st_group *g)
{
    g->lv.levels = 1;
    if (g->world > 1)
        two_level_layout(g);
    for (int q = 0; q < g->world; q++)
        g->remote_ranks += g->numa[q] >= 0 && g->numa[g->rank] >= 0 && g->numa[q] != g->numa[g->rank];
    coll_choose_small(g);
    if (g->forced == COLL_TWO_LEVEL && g->world > 1 && g->lv.levels != 2)
        return st_fail(ST_ERR_INVALID,
                       "coll: algorithm two-level needs the ranks on 2 or more NUMA nodes with the same "
                       "number (2 or more) on each, and these are not (rank %d: node %d; numa_nodes, %s)",
                       g->rank, g->numa[g->rank], ST_ENV_NUMA_NODES);
    return ST_OK;
}

static st_status alloc_arrays(st_group *g)
{
    g->segs = calloc((size_t)g->world, sizeof *g->segs);
    g->ctl = calloc((size_t)g->world, sizeof *g->ctl);
    g->pids = calloc((size_t)g->world, sizeof *g->pids);
    const size_t w = (size_t)g->world;
    g->rank_ptrs = calloc(w, sizeof *g->rank_ptrs);
    g->srcs = calloc(w, sizeof *g->srcs);
    g->owners = calloc(w, sizeof *g->owners);
    g->peers = calloc(w, sizeof *g->peers);
    g->bases = calloc(w, sizeof *g->bases);
    g->spans = calloc(w, sizeof *g->spans);
    g->numa = calloc(w, sizeof *g->numa);
    g->lv.rank_at = calloc(w, sizeof *g->lv.rank_at);
    /* an inline payload's fp32 sums, and a piece rounded to bf16: bf16 holds twice fp32's elements */
    const size_t inline_elems = g->inline_lines * (INLINE_PAYLOAD / sizeof(uint16_t)) + 1;
    g->inline_sums = malloc(inline_elems * sizeof(float));
    g->inline_wire = malloc(inline_elems * sizeof(st_bf16));
    if (!g->segs || !g->ctl || !g->pids || !g->rank_ptrs || !g->srcs || !g->owners || !g->peers || !g->bases ||
        !g->spans || !g->numa || !g->lv.rank_at || !g->inline_sums || !g->inline_wire)
        return st_fail(ST_ERR_NOMEM, "coll: out of memory for a world of %d", g->world);
    return ST_OK;
}

/* On a failed join every name of the job goes, not only those of peers
 * found dead: a peer killed before it initialised its segment has no pid
 * to find dead, and one stopped past the deadline may be killed later.
 * No group can form once one rank fails, so a live peer loses nothing: it
 * fails its join too (ours is aborted or gone), and its own unlink of a
 * name already dropped is no error.  A peer not yet started creates its
 * name afterwards and drops it when its join fails.  A rank that could not
 * make its own segment (its name taken: a second process given the same
 * rank) leaves the job's names alone: the group may be another's. */
static void abandon_join(st_group *g)
{
    if (!g->ctl[g->rank])
        return;
    for (int q = 0; q < g->world; q++) {
        char name[ST_SEGMENT_NAME_MAX];
        if (q != g->rank && st_segment_name(name, sizeof name, g->job_id, q) == ST_OK)
            shm_unlink(name);
    }
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
    /* A job mpirun killed while it joined left names no launcher of ours
     * removed: the next job on the node does (their space counts below). */
    st_segment_reap_stale(g->cfg.join_timeout_s * 2 > 600 ? g->cfg.join_timeout_s * 2 : 600);
    if ((st = st_shm_space_check(g->seg_bytes * missing_segments(g), g->cfg.shm_limit_bytes,
                                 g->world, g->seg_bytes)) != ST_OK)
        goto fail;

    char name[ST_SEGMENT_NAME_MAX];
    if ((st = st_segment_name(name, sizeof name, g->job_id, g->rank)) != ST_OK ||
        (st = st_segment_create(&g->segs[g->rank], name, g->seg_bytes)) != ST_OK)
        goto fail;
    g->ctl[g->rank] = g->segs[g->rank].base;
    g->pids[g->rank] = getpid();
    init_ctl(g, cfg->numa_nodes);
    g->numa[g->rank] = g->ctl[g->rank]->numa;

    const double deadline = st_now_s() + g->cfg.join_timeout_s;
    for (int q = 0; q < g->world; q++)
        if (q != g->rank && (st = attach_peer(g, q, deadline)) != ST_OK)
            goto fail;
    atomic_store_explicit(&g->ctl[g->rank]->joined, 1, memory_order_release);
    if ((st = wait_joined(g, deadline)) != ST_OK || (st = find_levels(g)) != ST_OK)
        goto fail;
    st_segment_unlink(&g->segs[g->rank]);
    st_heartbeat_open(&g->hb, g->cfg.heartbeat_path);
    *out = g;
    return ST_OK;

fail:
    if (g->segs)
        abandon_join(g);
    st_group_destroy(g);
    return st;
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
    free(g->srcs);
    free(g->owners);
    free(g->peers);
    free(g->bases);
    free(g->spans);
    free(g->numa);
    free(g->lv.rank_at);
    free(g->inline_wire);
    free(g->stage_f32);
    free(g->inline_sums);
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
    return g->cfg.zero_copy_bytes ? coll_seg_at(g, g->rank, g->zc_off) : NULL;
}

const void *st_group_peer_buffer(const st_group *g, int peer)
{
    if (!g || peer < 0 || peer >= g->world || !g->cfg.zero_copy_bytes)
        return NULL;
    return coll_seg_at(g, peer, g->zc_off);
}

void st_group_counters(const st_group *g, st_coll_counters *out)
{
    *out = g->ctr;
    out->p2p_sent = atomic_load(&g->p2p.sent);
    out->p2p_sent_bytes = atomic_load(&g->p2p.sent_bytes);
    out->p2p_received = atomic_load(&g->p2p.received);
    out->p2p_received_bytes = atomic_load(&g->p2p.received_bytes);
}

void st_group_counters_reset(st_group *g)
{
    g->ctr = (st_coll_counters){0};
    atomic_store(&g->p2p.sent, 0);
    atomic_store(&g->p2p.sent_bytes, 0);
    atomic_store(&g->p2p.received, 0);
    atomic_store(&g->p2p.received_bytes, 0);
}

int st_group_levels(const st_group *g) { return g->lv.levels; }

int st_group_threads(const st_group *g) { return g->threads; }

int st_group_numa_node(const st_group *g, int rank)
{
    return g && rank >= 0 && rank < g->world ? g->numa[rank] : -1;
}
