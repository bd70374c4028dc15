/* The two-level all-reduce: reduce-scatter within each NUMA node, then
 * across nodes, so that each byte crosses the interconnect once.
 *
 * M nodes of L ranks each; rank (m, i) is the i-th rank of node m
 * (group.c's layout).  A piece of n elements is cut into L parts, part i
 * into M sub-slices:
 *   A  rank (m, i) sums part i of its node's L inputs (local reads) into
 *      its A area, in fp32 whatever the wire (a bf16 wire rounds once, at B);
 *   B  it sums sub-slice m of part i of the M nodes' A areas (node order;
 *      M-1 sub-slices cross the interconnect) into its C area, divided for
 *      an average or through the stage, as the wire type;
 *   C1 it copies the other M-1 final sub-slices of part i from the ranks
 *      (m', i) into its C area (M-1 more cross);
 *   C2 it copies every part j from rank (m, j)'s C area into the caller's
 *      buffer (local reads).
 * Per node 2 (M-1)/M of the message crosses, where the flat rsag moves
 * L times that.  Four synchronisations, each on the ranks the next phase
 * reads (the first on everyone: the results region is written next, and
 * any peer may still be gathering the collective before from it).  Each
 * element is summed in one order (node-local rank order, then node order)
 * by one thread of one rank: every rank ends with the same bits.
 */
#include <string.h>

#include "coll_internal.h"

bool coll_two_level_takes(const st_group *g, const struct coll_call *c)
{
    return g->lv.levels == 2 && coll_fast_payload(c->wire, c->op);
}

static int rank_at(const st_group *g, int node, int local) { return g->lv.rank_at[node * g->lv.per_node + local]; }

/* Byte offsets in staging of the input (an ordinary buffer's piece) and
 * the A area, and the piece's elements. */
struct layout {
    size_t per_piece, a_off;
};

static struct layout layout_for(const st_group *g, const struct coll_call *c)
{
    const size_t L = (size_t)g->lv.per_node, es = coll_esize(c->wire), as = sizeof(float);
    const size_t S = g->cfg.staging_bytes, R = g->results_bytes;
    struct layout l;
    if (c->zero_copy) {
        l.per_piece = (S - as) / as * L;
        l.a_off = 0;
    } else {
        l.per_piece = (S - 64 - as) * L / (es * L + as);
        l.a_off = (l.per_piece * es + 63) / 64 * 64;
    }
    if (l.per_piece > (R / es) * L)
        l.per_piece = (R / es) * L;
    return l;
}

/* The peers a phase waits for: the M ranks of this rank's local index, or
 * the L ranks of its node. */
static void across(const st_group *g, int *out)
{
    for (int m = 0; m < g->lv.nodes; m++)
        out[m] = rank_at(g, m, g->lv.local_index);
}

static void within(const st_group *g, int *out)
{
    for (int i = 0; i < g->lv.per_node; i++)
        out[i] = rank_at(g, g->lv.node_index, i);
}

/* Phase A: part i of the node's inputs (ins[q] at the piece's start) into the A area. */
static void node_sum(st_group *g, const struct coll_call *c, size_t a_off, size_t pl, size_t ph)
{
    const size_t es = coll_esize(c->wire);
    within(g, g->owners);
    for (int i = 0; i < g->lv.per_node; i++)
        g->srcs[i] = g->bases[g->owners[i]] + pl * es;
    const struct coll_sum s = {g->srcs, g->owners, g->lv.per_node, c->wire, ST_DTYPE_F32, 1.0f, ST_SUM};
    coll_par_sum(g, &s, coll_seg_at(g, g->rank, g->staging_off + a_off), ph - pl);
}

/* Phase B: sub-slice [sl, sh) of part i (offsets within the part) over the
 * nodes' A areas into this rank's C area. */
static st_status cross_sum(st_group *g, const struct coll_call *c, size_t a_off, size_t sl, size_t sh)
{
    across(g, g->owners);
    for (int m = 0; m < g->lv.nodes; m++)
        g->srcs[m] = coll_seg_at(g, g->owners[m], g->staging_off + a_off) + sl * sizeof(float);
    char *out = coll_seg_at(g, g->rank, g->results_off) + sl * coll_esize(c->wire);
    struct coll_sum s = {g->srcs, g->owners, g->lv.nodes, ST_DTYPE_F32, c->wire,
                         c->op == ST_AVG && !c->sg ? (float)g->world : 1.0f, ST_SUM};
    const size_t n = sh - sl;
    if (!c->sg || c->wire == ST_DTYPE_F32) {
        coll_par_sum(g, &s, out, n);
        return c->sg ? coll_run_stage(c->sg, (float *)out, n, c->op) : ST_OK;
    }
    float *sums = coll_scratch_f32(g, n);
    if (!sums)
        return st_fail(ST_ERR_NOMEM, "coll: out of memory for a bf16 slice's sums");
    s.to = ST_DTYPE_F32;
    coll_par_sum(g, &s, sums, n);
    return coll_finish_rounded(g, sums, out, c->wire, n, c->op, c->sg);
}

/* Phase C1: the other nodes' final sub-slices of part i (of length len) into our C area. */
static void cross_gather(st_group *g, const struct coll_call *c, size_t len)
{
    const size_t es = coll_esize(c->wire);
    int k = 0;
    across(g, g->owners);
    for (int m = 0; m < g->lv.nodes; m++) {
        if (m == g->lv.node_index)
            continue;
        size_t sl, sh;
        coll_part(len, g->lv.nodes, m, &sl, &sh);
        g->spans[k++] = (struct coll_span){coll_seg_at(g, g->rank, g->results_off) + sl * es,
                                           coll_seg_at(g, g->owners[m], g->results_off) + sl * es, sh - sl,
                                           g->owners[m]};
    }
    coll_par_gather(g, g->spans, k, c->wire, c->wire, false);
}

/* Phase C2: every part from its node-local owner's C area into the caller's buffer. */
static void node_gather(st_group *g, const struct coll_call *c, size_t done, size_t n)
{
    within(g, g->owners);
    for (int i = 0; i < g->lv.per_node; i++) {
        size_t pl, ph;
        coll_part(n, g->lv.per_node, i, &pl, &ph);
        g->spans[i] = (struct coll_span){coll_elem(c->buf, c->user, done + pl),
                                         coll_seg_at(g, g->owners[i], g->results_off), ph - pl, g->owners[i]};
    }
    coll_par_gather(g, g->spans, g->lv.per_node, c->user, c->wire, !c->zero_copy);
}

static st_status piece(st_group *g, const struct coll_call *c, const struct layout *l, size_t done, size_t n)
{
    const uint32_t base = g->base;
    const size_t es = coll_esize(c->wire);
    for (int q = 0; q < g->world; q++)  /* each rank's input at the piece's start */
        g->bases[q] = c->zero_copy ? coll_seg_at(g, q, g->zc_off + c->zc_off) + done * es
                                   : coll_seg_at(g, q, g->staging_off);
    if (!c->zero_copy) {
        const struct coll_span in = {g->bases[g->rank], coll_elem(c->buf, c->user, done), n, -1};
        coll_par_gather(g, &in, 1, c->wire, c->user, false);
    }
    size_t pl, ph, sl, sh;
    coll_part(n, g->lv.per_node, g->lv.local_index, &pl, &ph);
    coll_part(ph - pl, g->lv.nodes, g->lv.node_index, &sl, &sh);
    int *peers = g->peers;
    st_status st;
    coll_publish(g, base + 1);
    if ((st = coll_wait_all(g, base + 1)) != ST_OK)
        return st;
    node_sum(g, c, l->a_off, pl, ph);
    coll_publish(g, base + 2);
    across(g, peers);
    if ((st = coll_wait_set(g, peers, g->lv.nodes, base + 2)) != ST_OK)
        return st;
    if ((st = cross_sum(g, c, l->a_off, sl, sh)) != ST_OK)
        return coll_mark_broken(g, st, g->rank);
    coll_publish(g, base + 3);
    if ((st = coll_wait_set(g, peers, g->lv.nodes, base + 3)) != ST_OK)
        return st;
    cross_gather(g, c, ph - pl);
    coll_publish(g, base + 4);
    within(g, peers);
    if ((st = coll_wait_set(g, peers, g->lv.per_node, base + 4)) != ST_OK)
        return st;
    node_gather(g, c, done, n);
    g->base = base + 4;
    return ST_OK;
}

st_status coll_two_level_run(st_group *g, const struct coll_call *c)
{
    const struct layout l = layout_for(g, c);
    for (size_t done = 0; done < c->count; done += l.per_piece) {
        const size_t n = c->count - done < l.per_piece ? c->count - done : l.per_piece;
        st_status st = piece(g, c, &l, done, n);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}
