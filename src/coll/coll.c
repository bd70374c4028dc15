/* Shared-memory collectives: the all-reduce (direct and ring, fp32 and
 * bf16), broadcast and barrier, written against the wait/publish protocol
 * of sync.c (which says how it works; docs/collectives.md has diagrams).
 */
#define _GNU_SOURCE
#include "shmtrain/coll.h"

#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"
#include "shmtrain/bf16.h"
#include "shmtrain/env.h"

/* --------------------------------------------------------------- stage -- */

st_status coll_run_stage(const struct coll_stage *sg, float *part, size_t n, st_reduce_op op)
{
    st_status st = n ? sg->fn(sg->ctx, part, n) : ST_OK;
    if (st == ST_OK && op == ST_AVG)
        for (size_t i = 0; i < n; i++)
            part[i] /= sg->divisor;
    return st;
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
static st_status ring(st_group *g, float *const *bufs, size_t n, st_reduce_op op, const struct coll_stage *sg)
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

    coll_publish(g, base + 1);
    for (int t = 0; t < 2 * N - 2; t++) {
        const bool scatter = t < N - 1;
        const int seg = scatter ? (r - t - 1 + 2 * N) % N : (r - (t - (N - 1)) + N) % N;
        for (uint32_t j = 0; j < K; j++) {
            /* The left neighbour finished step t-1 on this chunk. */
            uint32_t need_left = t == 0 ? base + 1 : base + 1 + (uint32_t)(t - 1) * K + j + 1;
            if ((st = coll_wait_for(g, left, need_left)) != ST_OK)
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
            else if (t == N - 2 && op == ST_AVG && !sg)
                coll_add_into_div(mine + lo, theirs + lo, hi - lo, (float)N);
            else
                coll_add_into(mine + lo, theirs + lo, hi - lo);
            if (!(sg && t == N - 2))  /* staged: the owned part is published whole, after the stage */
                coll_publish(g, base + 1 + (uint32_t)t * K + j + 1);
        }
        if (sg && t == N - 2) {
            size_t lo, hi;
            chunk_range(n, N, seg, 0, 1, &lo, &hi);
            if ((st = coll_run_stage(sg, mine + lo, hi - lo, op)) != ST_OK)
                return coll_mark_broken(g, st, g->rank);  /* the peers stop waiting for it */
            coll_publish(g, base + 1 + (uint32_t)t * K + K);
        }
    }
    const uint32_t units = 1 + 2 * (uint32_t)(N - 1) * K;
    /* The right neighbour reads our buffer until its last step; the caller
     * may overwrite it as soon as we return. */
    if ((st = coll_wait_for(g, right, base + units)) != ST_OK)
        return st;
    g->base = base + units;
    return ST_OK;
}

/* -------------------------------------------------------------- direct -- */

char *coll_seg_at(const st_group *g, int q, size_t off)
{
    return (char *)g->segs[q].base + off;
}

/* Every rank copies its input into a slot, then sums all slots in rank
 * order: one synchronisation, identical bits everywhere.  Two slots
 * alternate, so a slot is rewritten only after every peer has entered the
 * collective that followed its last use, i.e. finished reading it. */
static st_status direct(st_group *g, float *buf, size_t n, st_reduce_op op, const struct coll_stage *sg)
{
    const int p = g->parity;
    const uint32_t base = g->base;
    st_status st;
    if (g->slot_used[p] && (st = coll_wait_all(g, g->slot_base[p] + 2)) != ST_OK)
        return st;
    const size_t slot_off = g->slots_off + (size_t)p * g->cfg.small_bytes;
    memcpy(coll_seg_at(g, g->rank, slot_off), buf, n * sizeof(float));
    coll_publish(g, base + 1);
    if ((st = coll_wait_all(g, base + 1)) != ST_OK)
        return st;
    const float *first = (const float *)coll_seg_at(g, 0, slot_off);
    coll_copy_to_user(buf, first, n * sizeof *buf);
    for (int q = 1; q < g->world; q++)
        coll_add_to_user(buf, (const float *)coll_seg_at(g, q, slot_off), n);
    if (sg) {
        /* Every rank holds the whole sum: each runs the stage on all of it. */
        if ((st = coll_run_stage(sg, buf, n, op)) != ST_OK)
            return coll_mark_broken(g, st, g->rank);
    } else if (op == ST_AVG) {
        for (size_t i = 0; i < n; i++)
            buf[i] /= (float)g->world;
    }
    g->slot_base[p] = base;
    g->slot_used[p] = true;
    g->parity ^= 1;
    g->base = base + 1;
    return ST_OK;
}

/* ---------------------------------------------------------- all-reduce -- */

/* Do `bytes` at buf lie inside this rank's zero-copy region?  Then *off is
 * where, and every peer's payload sits at the same offset in its own. */
static bool in_zero_copy(const st_group *g, const void *buf, size_t bytes, size_t *off)
{
    const char *zc = coll_seg_at(g, g->rank, g->zc_off), *b = (const char *)buf;
    if (!g->cfg.zero_copy_bytes || b < zc || b >= zc + g->cfg.zero_copy_bytes)
        return false;
    *off = (size_t)(b - zc);
    return *off + bytes <= g->cfg.zero_copy_bytes;
}

/* A bf16 payload reduces in place when it lies in the zero-copy region at
 * a 4-byte offset (its slices then sit at the same offset in every peer). */
static bool bf16_in_zero_copy(const st_group *g, const void *buf, size_t count, size_t *off)
{
    return in_zero_copy(g, buf, count * sizeof(st_bf16), off) && *off % sizeof(float) == 0;
}

/* The one place the direct/ring choice is made: what runs is what is
 * reported (st_allreduce_algorithm), at every count. */
static bool uses_direct(const st_group *g, size_t count, bool zero_copy)
{
    return count * sizeof(float) <= (zero_copy ? g->cfg.small_zero_copy_bytes : g->cfg.small_bytes);
}

const char *st_allreduce_algorithm(const st_group *g, const void *buf, size_t count, st_dtype dtype)
{
    size_t off;
    if (!g || g->world == 1 || count == 0)
        return "none";
    if (coll_uses_inline(g, count * (dtype == ST_DTYPE_BF16 ? sizeof(st_bf16) : sizeof(float))))
        return "inline";
    if (dtype == ST_DTYPE_BF16)  /* the zero-copy test of allreduce_bf16 */
        return bf16_in_zero_copy(g, buf, count, &off) ? "slices" : "slices-copy";
    const bool zc = in_zero_copy(g, buf, count * sizeof(float), &off);
    if (uses_direct(g, count, zc))
        return "direct";
    return zc ? "ring" : "ring-copy";
}

static st_status check_allreduce(const st_group *g, const void *buf, size_t count, st_reduce_op op)
{
    st_status st = coll_check_usable(g);
    if (st != ST_OK)
        return st;
    if (op != ST_SUM && op != ST_AVG)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: unknown reduce op %d", (int)op);
    if (count && !buf)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: NULL buffer with count %zu", count);
    return ST_OK;
}

static st_status allreduce_f32(st_group *g, float *buf, size_t count, st_reduce_op op, const struct coll_stage *sg)
{
    st_status st = check_allreduce(g, buf, count, op);
    if (st != ST_OK)
        return st;
    if (count == 0)
        return ST_OK;
    if (g->world == 1)
        return sg ? coll_run_stage(sg, buf, count, op) : ST_OK;
    if (coll_uses_inline(g, count * sizeof(float)))
        return coll_inline_allreduce(g, buf, count, ST_DTYPE_F32, op, sg);
    size_t off;
    const bool zc = in_zero_copy(g, buf, count * sizeof(float), &off);
    if (uses_direct(g, count, zc))
        return direct(g, buf, count, op, sg);
    if (zc) {
        for (int q = 0; q < g->world; q++)
            g->rank_ptrs[q] = (float *)(coll_seg_at(g, q, g->zc_off) + off);
        return ring(g, g->rank_ptrs, count, op, sg);
    }
    /* Ordinary buffer: stage it through shared memory piece by piece. */
    for (int q = 0; q < g->world; q++)
        g->rank_ptrs[q] = (float *)coll_seg_at(g, q, g->staging_off);
    const size_t piece = g->cfg.staging_bytes / sizeof(float);
    for (size_t done = 0; done < count; done += piece) {
        size_t len = count - done < piece ? count - done : piece;
        memcpy(g->rank_ptrs[g->rank], buf + done, len * sizeof(float));
        if ((st = ring(g, g->rank_ptrs, len, op, sg)) != ST_OK)
            return st;
        coll_copy_to_user(buf + done, g->rank_ptrs[g->rank], len * sizeof *buf);
    }
    return ST_OK;
}

/* ---------------------------------------------------------------- bf16 -- */

/* bf16 payloads summed in fp32 and rounded once (DeepSpeed's shared-memory
 * all-reduce does the same): rank r sums slice r of every rank's buffer in
 * rank order, in fp32, rounds it into its own buffer, and everyone then
 * copies every slice.  Each element is computed by one rank in one order,
 * so all ranks end with the same bits; the bytes moved are half fp32's.
 * Units: 1 inputs in place, 2 slices reduced, 3 slices copied (after which
 * nobody reads this rank's buffer: the caller may overwrite it). */
/* fp32 room for n values (a bf16 slice's sums, before a stage). */
static float *stage_scratch(st_group *g, size_t n)
{
    if (n == 0)
        n = 1;  /* a slice may be empty; its scratch still exists */
    if (n > g->stage_f32_len) {
        float *p = realloc(g->stage_f32, n * sizeof *p);
        if (!p)
            return NULL;
        g->stage_f32 = p;
        g->stage_f32_len = n;
    }
    return g->stage_f32;
}

st_status coll_finish_bf16(st_group *g, float *sums, st_bf16 *out, size_t n, st_reduce_op op, const struct coll_stage *sg)
{
    if (sg) {
        st_status st = coll_run_stage(sg, sums, n, op);
        if (st != ST_OK)
            return st;
    } else if (op == ST_AVG) {
        for (size_t i = 0; i < n; i++)
            sums[i] /= (float)g->world;
    }
    st_bf16_from_f32_n(out, sums, n);
    return ST_OK;
}

static st_status slices_bf16(st_group *g, st_bf16 *const *bufs, size_t n, st_reduce_op op, const struct coll_stage *sg)
{
    const int N = g->world, r = g->rank;
    const uint32_t base = g->base;
    st_status st;
    coll_publish(g, base + 1);
    if ((st = coll_wait_all(g, base + 1)) != ST_OK)
        return st;
    size_t lo, hi;
    chunk_range(n, N, r, 0, 1, &lo, &hi);
    st_bf16 *mine = bufs[r];
    if (sg) {  /* the stage takes the slice's fp32 sums whole */
        float *sums = stage_scratch(g, hi - lo);
        if (!sums)
            return coll_mark_broken(g, st_fail(ST_ERR_NOMEM, "coll: out of memory for a bf16 slice"), g->rank);
        coll_bf16_sum(sums, bufs, N, lo, hi);
        if ((st = coll_finish_bf16(g, sums, mine + lo, hi - lo, op, sg)) != ST_OK)
            return coll_mark_broken(g, st, g->rank);
    } else {
        coll_bf16_reduce(mine, bufs, N, lo, hi, op == ST_AVG ? (float)N : 1.0f);
    }
    coll_publish(g, base + 2);
    if ((st = coll_wait_all(g, base + 2)) != ST_OK)
        return st;
    for (int q = 0; q < N; q++) {
        if (q == r)
            continue;
        chunk_range(n, N, q, 0, 1, &lo, &hi);
        memcpy(mine + lo, bufs[q] + lo, (hi - lo) * sizeof *mine);
    }
    coll_publish(g, base + 3);
    if ((st = coll_wait_all(g, base + 3)) != ST_OK)
        return st;
    g->base = base + 3;
    return ST_OK;
}

static st_status allreduce_bf16(st_group *g, st_bf16 *buf, size_t count, st_reduce_op op, const struct coll_stage *sg)
{
    st_status st = check_allreduce(g, buf, count, op);
    if (st != ST_OK)
        return st;
    if (count == 0 || (g->world == 1 && !sg))
        return ST_OK;  /* a sum of one, rounded once: itself */
    if (g->world == 1) {
        float *sums = stage_scratch(g, count);
        if (!sums)
            return st_fail(ST_ERR_NOMEM, "coll: out of memory for a bf16 stage");
        for (size_t i = 0; i < count; i++)
            sums[i] = st_bf16_to_f32(buf[i]);
        return coll_finish_bf16(g, sums, buf, count, op, sg);
    }
    if (coll_uses_inline(g, count * sizeof(st_bf16)))
        return coll_inline_allreduce(g, buf, count, ST_DTYPE_BF16, op, sg);
    st_bf16 **ptrs = g->bf16_ptrs;
    size_t off;
    if (bf16_in_zero_copy(g, buf, count, &off)) {
        for (int q = 0; q < g->world; q++)
            ptrs[q] = (st_bf16 *)(coll_seg_at(g, q, g->zc_off) + off);
        return slices_bf16(g, ptrs, count, op, sg);
    }
    for (int q = 0; q < g->world; q++)
        ptrs[q] = (st_bf16 *)coll_seg_at(g, q, g->staging_off);
    const size_t piece = g->cfg.staging_bytes / sizeof(st_bf16);
    for (size_t done = 0; done < count; done += piece) {
        size_t len = count - done < piece ? count - done : piece;
        memcpy(ptrs[g->rank], buf + done, len * sizeof *buf);
        if ((st = slices_bf16(g, ptrs, len, op, sg)) != ST_OK)
            return st;
        coll_copy_to_user(buf + done, ptrs[g->rank], len * sizeof *buf);
    }
    return ST_OK;
}

/* Floats that travel as bf16: each piece is rounded into this rank's
 * staging as it enters (the copy the staged path makes anyway), reduced
 * there as bf16 (the rounded values summed in fp32 in rank order, rounded
 * once) and widened as it leaves: st_allreduce_bf16's bits on the rounded
 * values, with no bf16 copy of the caller's and no pass of its own. */
static st_status allreduce_as_bf16(st_group *g, float *buf, size_t count, st_reduce_op op, const struct coll_stage *sg)
{
    st_status st = check_allreduce(g, buf, count, op);
    if (st != ST_OK)
        return st;
    st_bf16 **ptrs = g->bf16_ptrs;
    for (int q = 0; q < g->world; q++)
        ptrs[q] = (st_bf16 *)coll_seg_at(g, q, g->staging_off);
    st_bf16 *mine = ptrs[g->rank];
    const size_t piece = g->cfg.staging_bytes / sizeof(st_bf16);
    for (size_t done = 0; done < count; done += piece) {
        const size_t len = count - done < piece ? count - done : piece;
        st_bf16_from_f32_n(mine, buf + done, len);
        /* One rank or an inline size: the in-place algorithms (neither
         * reads staging); else the slices straight over staging. */
        st = g->world == 1 || coll_uses_inline(g, len * sizeof(st_bf16)) ? allreduce_bf16(g, mine, len, op, sg)
                                                                          : slices_bf16(g, ptrs, len, op, sg);
        if (st != ST_OK)
            return st;
        st_bf16_to_f32_n(buf + done, mine, len);
    }
    return ST_OK;
}

static st_status allreduce_as(st_group *g, float *buf, size_t count, st_dtype wire, st_reduce_op op,
                              const struct coll_stage *sg)
{
    switch (wire) {
    case ST_DTYPE_F32: return allreduce_f32(g, buf, count, op, sg);
    case ST_DTYPE_BF16: return allreduce_as_bf16(g, buf, count, op, sg);
    default: return st_fail(ST_ERR_INVALID, "coll: allreduce: wire type %s is not fp32 or bf16", st_dtype_name(wire));
    }
}

/* ----------------------------------------------------- broadcast, barrier -- */

/* The root streams the message through the two halves of its staging area;
 * a half is rewritten only after every peer has consumed the piece before. */
static st_status broadcast(st_group *g, void *buf, size_t bytes, int root)
{
    st_status st = coll_check_usable(g);
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
    coll_publish(g, base + 1);
    for (uint32_t i = 0; i < pieces; i++) {
        size_t off = (size_t)i * half, len = bytes - off < half ? bytes - off : half;
        char *stage = coll_seg_at(g, root, g->staging_off + (i % 2) * half);
        if (g->rank == root) {
            if (i >= 2 && (st = coll_wait_all(g, base + 1 + (i - 2) + 1)) != ST_OK)
                return st;
            memcpy(stage, data + off, len);
        } else {
            if ((st = coll_wait_for(g, root, base + 1 + i + 1)) != ST_OK)
                return st;
            coll_copy_to_user(data + off, stage, len);
        }
        coll_publish(g, base + 1 + i + 1);
    }
    if (g->rank == root && (st = coll_wait_all(g, base + 1 + pieces)) != ST_OK)
        return st;
    g->base = base + 1 + pieces;
    return ST_OK;
}

static st_status barrier(st_group *g)
{
    st_status st = coll_check_usable(g);
    if (st != ST_OK)
        return st;
    if (g->world == 1)
        return ST_OK;
    const uint32_t base = g->base;
    coll_publish(g, base + 1);
    if ((st = coll_wait_all(g, base + 1)) != ST_OK)
        return st;
    g->base = base + 1;
    return ST_OK;
}


/* ------------------------------------------------- the public collectives -- */

/* A collective that completed is progress the launcher can see. */
static st_status progressed(st_group *g, st_status st)
{
    if (st == ST_OK)
        st_heartbeat_beat(&g->hb, coll_coarse_now_s());
    return st;
}

static st_status make_stage(st_shard_fn between, void *ctx, int divisor, struct coll_stage *out)
{
    if (!between || divisor < 1)
        return st_fail(ST_ERR_INVALID, "coll: staged allreduce: no stage function, or divisor %d", divisor);
    *out = (struct coll_stage){between, ctx, (float)divisor};
    return ST_OK;
}

st_status st_allreduce_f32(st_group *g, float *buf, size_t count, st_reduce_op op)
{
    return progressed(g, allreduce_f32(g, buf, count, op, NULL));
}

st_status st_allreduce_bf16(st_group *g, uint16_t *buf, size_t count, st_reduce_op op)
{
    return progressed(g, allreduce_bf16(g, buf, count, op, NULL));
}

st_status st_allreduce_bf16_staged(st_group *g, uint16_t *buf, size_t count, st_reduce_op op, st_shard_fn between,
                                   void *ctx, int divisor)
{
    struct coll_stage sg;
    st_status st = make_stage(between, ctx, divisor, &sg);
    return st != ST_OK ? st : progressed(g, allreduce_bf16(g, buf, count, op, &sg));
}

st_status st_allreduce(st_group *g, void *buf, size_t count, st_dtype dtype, st_reduce_op op)
{
    switch (dtype) {
    case ST_DTYPE_F32: return st_allreduce_f32(g, buf, count, op);
    case ST_DTYPE_BF16: return st_allreduce_bf16(g, buf, count, op);
    default: return st_fail(ST_ERR_INVALID, "coll: allreduce: element type %d is not f32 or bf16", (int)dtype);
    }
}

st_status st_allreduce_as(st_group *g, float *buf, size_t count, st_dtype wire, st_reduce_op op)
{
    return progressed(g, allreduce_as(g, buf, count, wire, op, NULL));
}

st_status st_allreduce_as_staged(st_group *g, float *buf, size_t count, st_dtype wire, st_reduce_op op,
                                 st_shard_fn between, void *ctx, int divisor)
{
    struct coll_stage sg;
    st_status st = make_stage(between, ctx, divisor, &sg);
    return st != ST_OK ? st : progressed(g, allreduce_as(g, buf, count, wire, op, &sg));
}

st_status st_allreduce_f32_staged(st_group *g, float *buf, size_t count, st_reduce_op op, st_shard_fn between,
                                  void *ctx, int divisor)
{
    struct coll_stage sg;
    st_status st = make_stage(between, ctx, divisor, &sg);
    return st != ST_OK ? st : progressed(g, allreduce_f32(g, buf, count, op, &sg));
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
        st_heartbeat_beat(&g->hb, coll_coarse_now_s());
}
