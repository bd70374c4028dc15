/* The public collectives: argument checks, the call an algorithm runs
 * (choose.c picks it), one rank alone, broadcast and barrier, written
 * against the wait/publish protocol of sync.c (which says how it works;
 * docs/collectives.md has diagrams).  The top of src/coll: what the
 * algorithms share is below them all, in parts.c.
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

/* ------------------------------------------------------------ the call -- */

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

/* The call, its buffer's path decided: a payload of the wire's own type in
 * the zero-copy region is reduced in place there (at an offset of whole
 * elements, bf16's of 4 bytes, so its slices' fp32 sums line up). */
static struct coll_call describe(const st_group *g, void *buf, size_t count, st_dtype user, st_dtype wire,
                                 st_reduce_op op, const struct coll_stage *sg)
{
    struct coll_call c = {buf, count, user, wire, op, sg, false, 0};
    size_t off;
    if (user == wire && in_zero_copy(g, buf, count * coll_esize(wire), &off) &&
        off % (wire == ST_DTYPE_BF16 ? sizeof(float) : coll_esize(wire)) == 0) {
        c.zero_copy = true;
        c.zc_off = off;
    }
    return c;
}


static st_status check_allreduce(const st_group *g, const void *buf, size_t count)
{
    st_status st = coll_check_usable(g);
    if (st != ST_OK)
        return st;
    if (count && !buf)
        return st_fail(ST_ERR_INVALID, "coll: allreduce: NULL buffer with count %zu", count);
    return ST_OK;
}

/* A world of one: nothing to exchange, but fp32 values on a rounding wire
 * still round once and a stage (other nodes' sums) still runs. */
static st_status alone(st_group *g, const struct coll_call *c)
{
    if (!st_dtype_is_rounding(c->wire))
        return c->sg ? coll_run_stage(c->sg, c->buf, c->count, c->op) : ST_OK;
    if (c->user == c->wire && !c->sg)
        return ST_OK;  /* a reduction of one value is the value */
    float *sums = c->user == ST_DTYPE_F32 ? c->buf : coll_scratch_f32(g, c->count);
    if (!sums)
        return st_fail(ST_ERR_NOMEM, "coll: out of memory for a %s stage", st_dtype_name(c->wire));
    if (c->user == ST_DTYPE_F32)
        st_dtype_round_n(sums, c->wire, c->count);  /* the value as it enters the wire */
    else
        st_dtype_convert_n(sums, ST_DTYPE_F32, c->buf, c->user, c->count);
    st_status st = c->sg ? coll_run_stage(c->sg, sums, c->count, c->op) : ST_OK;
    if (c->user == ST_DTYPE_F32)
        st_dtype_round_n(sums, c->wire, c->count);  /* rounded once, as the sum of many */
    else
        st_dtype_convert_n(c->buf, c->user, sums, ST_DTYPE_F32, c->count);
    return st;
}

static st_status allreduce(st_group *g, void *buf, size_t count, st_dtype user, st_dtype wire, st_reduce_op op,
                           const struct coll_stage *sg)
{
    st_status st = check_allreduce(g, buf, count);
    if (st == ST_OK)
        st = coll_check_payload(wire, op);
    if (st != ST_OK)
        return st;
    if (count == 0)
        return ST_OK;
    g->ctr.calls++;
    if (user == wire && coll_fast_payload(wire, op) && count <= g->small.upto[wire == ST_DTYPE_BF16])
        return g->small.piece(g, buf, count, wire, op, sg);  /* coll_choose's answer, kept */
    const struct coll_call c = describe(g, buf, count, user, wire, op, sg);
    if (g->world == 1)
        return alone(g, &c);
    return coll_run_algorithm(g, coll_choose_again(g, &c), &c);
}

static const char *const PATH_NAMES[COLL_NALGOS][2] = {
#define PATHS(KIND, file, name, copying, piece) [COLL_##KIND] = {copying, name},
    COLL_ALGORITHMS(PATHS)
#undef PATHS
};

const char *st_allreduce_algorithm(const st_group *g, const void *buf, size_t count, st_dtype dtype)
{
    if (!g || g->world == 1 || count == 0)
        return "none";
    const struct coll_call c = describe(g, (void *)buf, count, dtype, dtype, ST_SUM, NULL);
    return PATH_NAMES[coll_choose(g, &c)][c.zero_copy];
}

/* The pairs a call may name: a payload reduced as its own type, or fp32
 * values carried as a rounding type; a stage takes fp32 sums, so only the
 * floating types a sum can round into. */
static st_status check_types(st_dtype dtype, st_dtype wire, bool staged)
{
    if (wire != dtype && !(dtype == ST_DTYPE_F32 && st_dtype_is_rounding(wire)))
        return st_fail(ST_ERR_INVALID, "coll: allreduce: %s values cannot travel as %s (fp32 may travel as bf16 or fp16)",
                       st_dtype_name(dtype), st_dtype_name(wire));
    if (staged && wire != ST_DTYPE_F32 && !st_dtype_is_rounding(wire))
        return st_fail(ST_ERR_INVALID, "coll: staged allreduce: %s payloads take no stage (fp32, bf16 and fp16 do)",
                       st_dtype_name(wire));
    return ST_OK;
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
    g->ctr.calls++;

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
            coll_count_read(g, -1, len);
        } else {
            if ((st = coll_wait_for(g, root, base + 1 + i + 1)) != ST_OK)
                return st;
            coll_copy_to_user(data + off, stage, len);
            coll_count_read(g, root, len);
        }
        coll_count_write(g, len);
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
    g->ctr.calls++;
    const uint32_t base = g->base;
    coll_publish(g, base + 1);
    if ((st = coll_wait_all(g, base + 1)) != ST_OK)
        return st;
    g->base = base + 1;
    return ST_OK;
}


/* ------------------------------------------------- the public collectives -- */


static st_status make_stage(st_shard_fn between, void *ctx, int divisor, struct coll_stage *out)
{
    if (!between || divisor < 1)
        return st_fail(ST_ERR_INVALID, "coll: staged allreduce: no stage function, or divisor %d", divisor);
    *out = (struct coll_stage){between, ctx, (float)divisor};
    return ST_OK;
}

st_status st_allreduce(st_group *g, void *buf, size_t count, st_dtype dtype, st_dtype wire, st_reduce_op op)
{
    st_status st = check_types(dtype, wire, false);
    return st != ST_OK ? st : coll_progressed(g, allreduce(g, buf, count, dtype, wire, op, NULL));
}

st_status st_allreduce_staged(st_group *g, void *buf, size_t count, st_dtype dtype, st_dtype wire, st_reduce_op op,
                              st_shard_fn between, void *ctx, int divisor)
{
    struct coll_stage sg;
    st_status st = check_types(dtype, wire, true);
    if (st == ST_OK)
        st = make_stage(between, ctx, divisor, &sg);
    return st != ST_OK ? st : coll_progressed(g, allreduce(g, buf, count, dtype, wire, op, &sg));
}

st_status st_broadcast(st_group *g, void *buf, size_t bytes, int root)
{
    return coll_progressed(g, broadcast(g, buf, bytes, root));
}

st_status st_barrier(st_group *g)
{
    return coll_progressed(g, barrier(g));
}

/* Compare-and-swap, never a fetch-add: a rank that finds the step's
 * tickets gone must leave the counter at `end`, where the next step's
 * numbering begins. */
bool st_group_take(st_group *g, uint64_t end, uint64_t *ticket)
{
    _Atomic uint64_t *counter = &g->ctl[0]->tickets;
    uint64_t seen = atomic_load_explicit(counter, memory_order_relaxed);
    while (seen < end)
        if (atomic_compare_exchange_weak_explicit(counter, &seen, seen + 1, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            g->ctr.tickets++;
            *ticket = seen;
            return true;
        }
    return false;
}

void st_group_heartbeat(st_group *g)
{
    if (g)
        st_heartbeat_beat(&g->hb, coll_coarse_now_s());
}
