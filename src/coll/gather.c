/* The halves of an all-reduce on their own, as PyTorch's process groups
 * offer them: all-gather (every rank's bytes to every rank) and
 * reduce-scatter (each rank one block of the reduction).  Both stage
 * through each rank's staging area in pieces: copy in, "entered", read the
 * peers' pieces, "read" (after which nobody reads this rank's staging, so
 * the next piece or collective may write it).  Two synchronisations a piece.
 */
#include <string.h>

#include "coll_internal.h"

/* A barrier-like step: publish `unit` of this collective and wait for everyone's. */
static st_status step(st_group *g, uint32_t unit)
{
    coll_publish(g, g->base + unit);
    return coll_wait_all(g, g->base + unit);
}

static st_status allgather(st_group *g, const char *send, char *recv, size_t bytes)
{
    const size_t piece = g->cfg.staging_bytes;
    char *mine = coll_seg_at(g, g->rank, g->staging_off);
    for (size_t done = 0; done < bytes; done += piece) {
        const size_t len = bytes - done < piece ? bytes - done : piece;
        memcpy(mine, send + done, len);
        coll_count_read(g, -1, len);
        coll_count_write(g, len);
        st_status st = step(g, 1);
        if (st != ST_OK)
            return st;
        for (int q = 0; q < g->world; q++)
            coll_copy_to_user(recv + (size_t)q * bytes + done, coll_seg_at(g, q, g->staging_off), len);
        coll_count_read_all(g, len);
        coll_count_write(g, len * (size_t)g->world);
        if ((st = step(g, 2)) != ST_OK)
            return st;
        g->base += 2;
    }
    return ST_OK;
}

st_status st_allgather(st_group *g, const void *send, void *recv, size_t bytes)
{
    st_status st = coll_check_usable(g);
    if (st != ST_OK)
        return st;
    if (bytes && (!send || !recv))
        return st_fail(ST_ERR_INVALID, "coll: allgather: NULL buffer with %zu bytes", bytes);
    if (bytes == 0)
        return ST_OK;
    g->ctr.calls++;
    if (g->world == 1) {
        if (send != recv)
            memmove(recv, send, bytes);
        return ST_OK;
    }
    return coll_progressed(g, allgather(g, send, recv, bytes));
}

/* Elements [c0, c0 + len) of every block of `send` into this rank's staging, block after block. */
static void stage_blocks(st_group *g, const char *send, size_t count, size_t c0, size_t len, size_t es)
{
    char *mine = coll_seg_at(g, g->rank, g->staging_off);
    for (int q = 0; q < g->world; q++)
        memcpy(mine + (size_t)q * len * es, send + ((size_t)q * count + c0) * es, len * es);
    coll_count_read(g, -1, len * es * (size_t)g->world);
    coll_count_write(g, len * es * (size_t)g->world);
}

static st_status reduce_scatter(st_group *g, const char *send, char *recv, size_t count, st_dtype t, st_reduce_op op)
{
    const size_t es = coll_esize(t), piece = g->cfg.staging_bytes / es / (size_t)g->world;
    for (size_t c0 = 0; c0 < count; c0 += piece) {
        const size_t len = count - c0 < piece ? count - c0 : piece;
        stage_blocks(g, send, count, c0, len, es);
        st_status st = step(g, 1);
        if (st != ST_OK)
            return st;
        for (int q = 0; q < g->world; q++) {
            g->srcs[q] = coll_seg_at(g, q, g->staging_off) + (size_t)g->rank * len * es;
            g->owners[q] = q;
        }
        const struct coll_sum s = {g->srcs, g->owners, g->world, t, t, op == ST_AVG ? (float)g->world : 1.0f,
                                   op == ST_AVG ? ST_SUM : op};
        coll_par_sum(g, &s, recv + c0 * es, len);
        if ((st = step(g, 2)) != ST_OK)
            return st;
        g->base += 2;
    }
    return ST_OK;
}

st_status st_reduce_scatter(st_group *g, const void *send, void *recv, size_t count, st_dtype dtype,
                            st_reduce_op op)
{
    st_status st = coll_check_usable(g);
    if (st != ST_OK)
        return st;
    if (count && (!send || !recv))
        return st_fail(ST_ERR_INVALID, "coll: reduce_scatter: NULL buffer with %zu elements", count);
    if ((st = coll_check_payload(dtype, op)) != ST_OK || count == 0)
        return st;
    g->ctr.calls++;
    if (g->world == 1) {
        if (send != recv)
            memmove(recv, send, count * coll_esize(dtype));
        return ST_OK;
    }
    return coll_progressed(g, reduce_scatter(g, send, recv, count, dtype, op));
}
