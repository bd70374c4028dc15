/* Reduce-scatter from the peers' segments, then all-gather ("rsag").
 *
 * Rank r of N sums slice r of every rank's input, in rank order, straight
 * from the peers' segments, into slice r of its own input; then every rank
 * copies every other slice from its owner's input into the caller's
 * buffer.  Three synchronisations per piece whatever N (the ring takes
 * 2(N-1)):
 *   unit 1 "entered": this rank's input is in place;
 *   unit 2 "reduced": its slice holds the sum, and it has finished reading
 *          the peers' inputs (whose other slices they may then overwrite);
 *   unit 3 "gathered": it has finished reading the peers' slices, so each
 *          may return and its caller overwrite the buffer.
 * The sum lands in lines this rank already owns (its own input, just
 * written): a results area of its own would be written over lines the
 * peers read last call, each store an invalidation across cores, which
 * measured 2-3x slower than the ring at 1-4 MiB (docs/benchmarks.md, 0b).
 * A buffer in the zero-copy region goes in one piece; an ordinary one is
 * copied (for a bf16 wire, rounded) into staging in pieces of its size.
 *
 * The sums and copies are split over the rank's threads (par.c); each
 * element is summed by one thread in rank order, so every rank ends with
 * the same bits at any thread count.  A bf16 wire is summed in fp32 and
 * rounded once, the definition of shmtrain/bf16.h.
 */
#include <string.h>

#include "coll_internal.h"

bool coll_rsag_takes(const st_group *g, const struct coll_call *c)
{
    (void)c;  /* every payload and op */
    return g->world >= 2;
}

/* Elements per piece: all of a zero-copy buffer; staging's worth of an
 * ordinary one. */
static size_t piece_elems(const st_group *g, const struct coll_call *c)
{
    return c->zero_copy ? c->count : g->cfg.staging_bytes / coll_esize(c->wire);
}

/* This rank's slice [lo, hi) of every input (g->bases), summed into the
 * same slice of its own: divided for an average, or through the stage. */
static st_status reduce_slice(st_group *g, const struct coll_call *c, size_t lo, size_t hi)
{
    const size_t es = coll_esize(c->wire), n = hi - lo;
    for (int q = 0; q < g->world; q++)
        g->srcs[q] = g->bases[q] + lo * es;
    void *mine = g->bases[g->rank] + lo * es;
    struct coll_sum s = {g->srcs, g->owners, g->world, c->wire, c->wire,
                         c->op == ST_AVG && !c->sg ? (float)g->world : 1.0f, c->op == ST_AVG ? ST_SUM : c->op};
    if (!c->sg || c->wire == ST_DTYPE_F32) {
        coll_par_sum(g, &s, mine, n);
        return c->sg ? coll_run_stage(c->sg, mine, n, c->op) : ST_OK;
    }
    float *sums = coll_scratch_f32(g, n);  /* the stage takes fp32 sums, rounded after it */
    if (!sums)
        return st_fail(ST_ERR_NOMEM, "coll: out of memory for a rounded slice's sums");
    s.to = ST_DTYPE_F32;
    coll_par_sum(g, &s, sums, n);
    return coll_finish_rounded(g, sums, mine, c->wire, n, c->op, c->sg);
}

/* Every slice of the piece from its owner's input into the caller's
 * buffer (in the zero-copy region this rank's own is there already). */
static void gather(st_group *g, const struct coll_call *c, size_t done, size_t n)
{
    const size_t es = coll_esize(c->wire);
    int k = 0;
    for (int q = 0; q < g->world; q++) {
        size_t lo, hi;
        coll_part(n, g->world, q, &lo, &hi);
        if (q != g->rank || !c->zero_copy)
            g->spans[k++] =
                (struct coll_span){coll_elem(c->buf, c->user, done + lo), g->bases[q] + lo * es, hi - lo, q};
    }
    coll_par_gather(g, g->spans, k, c->user, c->wire, !c->zero_copy);
}

static st_status piece(st_group *g, const struct coll_call *c, size_t done, size_t n)
{
    const int N = g->world, r = g->rank;
    const uint32_t base = g->base;
    const size_t es = coll_esize(c->wire);
    for (int q = 0; q < N; q++) {
        g->bases[q] = c->zero_copy ? coll_seg_at(g, q, g->zc_off + c->zc_off) + done * es
                                   : coll_seg_at(g, q, g->staging_off);
        g->owners[q] = q;
    }
    if (!c->zero_copy) {
        const struct coll_span in = {g->bases[r], coll_elem(c->buf, c->user, done), n, -1};
        coll_par_gather(g, &in, 1, c->wire, c->user, false);
    }
    coll_publish(g, base + 1);
    st_status st = coll_wait_all(g, base + 1);
    if (st != ST_OK)
        return st;
    size_t lo, hi;
    coll_part(n, N, r, &lo, &hi);
    if ((st = reduce_slice(g, c, lo, hi)) != ST_OK)
        return coll_mark_broken(g, st, r);  /* the peers stop waiting for it */
    coll_publish(g, base + 2);
    if ((st = coll_wait_all(g, base + 2)) != ST_OK)
        return st;
    gather(g, c, done, n);
    coll_publish(g, base + 3);
    if ((st = coll_wait_all(g, base + 3)) != ST_OK)
        return st;
    g->base = base + 3;
    return ST_OK;
}

st_status coll_rsag_run(st_group *g, const struct coll_call *c)
{
    const size_t per_piece = piece_elems(g, c);
    for (size_t done = 0; done < c->count; done += per_piece) {
        const size_t n = c->count - done < per_piece ? c->count - done : per_piece;
        st_status st = piece(g, c, done, n);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}
