/* The collectives beside the all-reduce, as PyTorch's process groups offer
 * them: all-gather (every rank's bytes to every rank), reduce-scatter (each
 * rank one block of the reduction) and all-to-all (each rank's block for
 * each peer to that peer).  All stage through each rank's staging area in
 * pieces: copy in, "entered", read the peers' pieces, "read" (after which
 * nobody reads this rank's staging, so the next piece or collective may
 * write it).  Two synchronisations a piece.
 */
#include <stdint.h>
#include <stdlib.h>
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

/* ---------------------------------------------------------- all-to-all -- */

static size_t part_of(size_t len, size_t done, size_t piece)
{
    return len > done ? (len - done < piece ? len - done : piece) : 0;
}

/* Every rank's lengths, both sides, to every rank: each checks every pair
 * (what p sends q against what q expects from p), so all refuse together
 * or none does; *longest is the largest block between two ranks. */
static st_status agree_lengths(st_group *g, const size_t *send_len, const size_t *recv_len, size_t *longest)
{
    const size_t w = (size_t)g->world, row = 2 * w;
    uint64_t *all = malloc((w + 1) * row * sizeof *all);
    if (!all)
        return st_fail(ST_ERR_NOMEM, "coll: alltoall: out of memory for %zu ranks' lengths", w);
    uint64_t *mine = all + w * row;
    for (size_t q = 0; q < w; q++)
        mine[q] = send_len[q], mine[w + q] = recv_len[q];
    st_status st = allgather(g, (const char *)mine, (char *)all, row * sizeof *all);
    *longest = 0;
    for (size_t p = 0; p < w && st == ST_OK; p++)
        for (size_t q = 0; q < w && st == ST_OK; q++) {
            const uint64_t sends = all[p * row + q], expects = all[q * row + w + p];
            if (sends != expects)
                st = st_fail(ST_ERR_INVALID, "coll: alltoall: rank %zu sends rank %zu %llu bytes, rank %zu expects "
                                             "%llu", p, q, (unsigned long long)sends, q, (unsigned long long)expects);
            else if (p != q && sends > *longest)
                *longest = (size_t)sends;
        }
    free(all);
    return st;
}

static st_status alltoall(st_group *g, const char *const *send, const size_t *send_len, char *const *recv,
                          const size_t *recv_len, size_t longest)
{
    const size_t piece = g->cfg.staging_bytes / (size_t)g->world;
    char *mine = coll_seg_at(g, g->rank, g->staging_off);
    if (send_len[g->rank])  /* its own block never leaves it (a NULL block may have no bytes) */
        memmove(recv[g->rank], send[g->rank], send_len[g->rank]);
    coll_count_read(g, -1, send_len[g->rank]);
    coll_count_write(g, send_len[g->rank]);
    for (size_t done = 0; done < longest; done += piece) {
        for (int q = 0; q < g->world; q++) {
            const size_t n = q == g->rank ? 0 : part_of(send_len[q], done, piece);
            if (n)
                memcpy(mine + (size_t)q * piece, send[q] + done, n);
            coll_count_read(g, -1, n);
            coll_count_write(g, n);
        }
        st_status st = step(g, 1);
        if (st != ST_OK)
            return st;
        for (int p = 0; p < g->world; p++) {
            const size_t n = p == g->rank ? 0 : part_of(recv_len[p], done, piece);
            if (n)
                coll_copy_to_user(recv[p] + done, coll_seg_at(g, p, g->staging_off) + (size_t)g->rank * piece, n);
            coll_count_read(g, p, n);
            coll_count_write(g, n);
        }
        if ((st = step(g, 2)) != ST_OK)
            return st;
        g->base += 2;
    }
    return ST_OK;
}

st_status st_alltoall(st_group *g, const void *const *send, const size_t *send_len, void *const *recv,
                      const size_t *recv_len)
{
    st_status st = coll_check_usable(g);
    if (st != ST_OK)
        return st;
    if (!send || !send_len || !recv || !recv_len)
        return st_fail(ST_ERR_INVALID, "coll: alltoall: NULL block list");
    for (int q = 0; q < g->world; q++)
        if ((send_len[q] && !send[q]) || (recv_len[q] && !recv[q]))
            return st_fail(ST_ERR_INVALID, "coll: alltoall: NULL block for rank %d", q);
    if (g->cfg.staging_bytes < (size_t)g->world)
        return st_fail(ST_ERR_INVALID, "coll: alltoall: %zu staging bytes for %d ranks", g->cfg.staging_bytes,
                       g->world);
    g->ctr.calls++;
    size_t longest = 0;
    if (g->world == 1 && send_len[0] != recv_len[0])
        return st_fail(ST_ERR_INVALID, "coll: alltoall: rank 0 sends rank 0 %zu bytes, rank 0 expects %zu",
                       send_len[0], recv_len[0]);
    if (g->world > 1 && (st = agree_lengths(g, send_len, recv_len, &longest)) != ST_OK)
        return coll_progressed(g, st);
    return coll_progressed(g, alltoall(g, (const char *const *)send, send_len, (char *const *)recv, recv_len,
                                       longest));
}
