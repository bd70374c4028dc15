/* The small-message all-reduce: every rank writes its payload into lines of
 * its own segment, each line carrying 56 payload bytes and the call's
 * sequence number (struct inline_line), then reads every rank's lines and
 * sums them in rank order.
 *
 * Why it is at the latency floor: a reader polls the data itself, so the
 * line that tells it the payload is there is the payload (the direct
 * algorithm polls a flag line, then fetches the slot line: two transfers
 * in a row).  One synchronisation per call, whatever the rank count (each
 * rank reads N-1 peers' lines; no 2(N-1) ring steps), and no barrier at the
 * end: calls alternate between two sets of lines, and a rank rewrites a set
 * at call c+2 only after it has read every peer's lines of call c+1, which
 * each peer wrote after it had finished reading call c.  A peer is thus at
 * most one call behind, and a late rank is simply waited for.
 *
 * Every rank sums the same values in the same order: all end with the same
 * bits, equal to the direct algorithm's (f32) and to the bf16 definition
 * (summed in fp32 in rank order, rounded once).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"
#include "shmtrain/bf16.h"

static struct inline_line *line_set(const st_group *g, int rank, int parity)
{
    return (struct inline_line *)coll_seg_at(g, rank, g->inline_off) + (size_t)parity * g->inline_lines;
}

/* Our payload into our lines of this call's set, each line's number last.
 * Whole lines copy a constant 56 bytes (inlined moves, not a call). */
static void write_lines(st_group *g, struct inline_line *mine, const void *buf, size_t bytes, uint64_t seq)
{
    const unsigned char *src = buf;
    size_t k = 0;
    for (; (k + 1) * INLINE_PAYLOAD <= bytes; k++) {
        memcpy(mine[k].data, src + k * INLINE_PAYLOAD, INLINE_PAYLOAD);
        atomic_store_explicit(&mine[k].seq, seq, memory_order_release);
    }
    if (k * INLINE_PAYLOAD < bytes) {
        memcpy(mine[k].data, src + k * INLINE_PAYLOAD, bytes - k * INLINE_PAYLOAD);
        atomic_store_explicit(&mine[k].seq, seq, memory_order_release);
        k++;
    }
    coll_wake_seq(g, &mine[k - 1].seq);
}

static inline st_status line_ready(st_group *g, int peer, struct inline_line *l, uint64_t seq)
{
    if (atomic_load_explicit(&l->seq, memory_order_acquire) == seq)
        return ST_OK;
    return coll_wait_seq(g, peer, &l->seq, seq);
}

/* out[0..n) = (first ? 0 : out) + the line's n values as fp32; inlined with
 * constant arguments, so whole lines run as straight vector code. */
static inline __attribute__((always_inline)) void add_line(float *restrict out, const unsigned char *data, size_t n,
                                                           st_dtype dtype, bool first)
{
    if (dtype == ST_DTYPE_BF16) {
        const st_bf16 *v = (const st_bf16 *)data;
        if (first)
            for (size_t i = 0; i < n; i++)
                out[i] = st_bf16_to_f32(v[i]);
        else
            for (size_t i = 0; i < n; i++)
                out[i] += st_bf16_to_f32(v[i]);
    } else {
        const float *v = (const float *)data;
        if (first)
            memcpy(out, v, n * sizeof *out);
        else
            for (size_t i = 0; i < n; i++)
                out[i] += v[i];
    }
}

/* sums[i] = element i of every rank's lines, added in rank order. */
static inline __attribute__((always_inline)) st_status sum_lines(st_group *g, int parity, uint64_t seq, size_t count,
                                                                 st_dtype dtype, float *sums)
{
    const size_t per_line = INLINE_PAYLOAD / (dtype == ST_DTYPE_BF16 ? sizeof(st_bf16) : sizeof(float));
    const size_t full = count / per_line, tail = count % per_line, last = full - (tail == 0);
    for (int q = 0; q < g->world; q++) {
        struct inline_line *lines = line_set(g, q, parity);
        const bool peer = q != g->rank;
        /* The last line first: polling line by line while the peer still
         * writes would pull each line away from the writer once more. */
        st_status st = peer ? line_ready(g, q, &lines[last], seq) : ST_OK;
        for (size_t k = 0; st == ST_OK && k < full; k++)
            if (!peer || k == last || (st = line_ready(g, q, &lines[k], seq)) == ST_OK) {
                if (q == 0)
                    add_line(sums + k * per_line, lines[k].data, per_line, dtype, true);
                else
                    add_line(sums + k * per_line, lines[k].data, per_line, dtype, false);
            }
        if (st == ST_OK && tail)
            add_line(sums + full * per_line, lines[full].data, tail, dtype, q == 0);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

static st_status sum_lines_f32(st_group *g, int parity, uint64_t seq, size_t count, float *sums)
{
    return sum_lines(g, parity, seq, count, ST_DTYPE_F32, sums);
}

static st_status sum_lines_bf16(st_group *g, int parity, uint64_t seq, size_t count, float *sums)
{
    return sum_lines(g, parity, seq, count, ST_DTYPE_BF16, sums);
}

st_status coll_inline_piece(st_group *g, void *buf, size_t count, st_dtype dtype, st_reduce_op op,
                            const struct coll_stage *sg)
{
    const size_t bytes = count * coll_esize(dtype);
    const int parity = g->inline_parity;
    uint64_t seq = g->inline_seq + 1;
    if (seq == 0)
        seq = 1;
    write_lines(g, line_set(g, g->rank, parity), buf, bytes, seq);
    /* Counted while the peers' lines are on their way: after the wait it
     * would lengthen the call. */
    coll_count_read(g, -1, bytes);
    coll_count_write(g, 2 * bytes);
    coll_count_read_all(g, bytes);
    g->ctr.syncs++;  /* one wait, on every peer's lines */
    st_status st = dtype == ST_DTYPE_BF16 ? sum_lines_bf16(g, parity, seq, count, g->inline_sums)
                                          : sum_lines_f32(g, parity, seq, count, g->inline_sums);
    if (st != ST_OK)
        return st;
    g->inline_seq = seq;
    g->inline_parity = parity ^ 1;
    float *sums = g->inline_sums;
    if (dtype == ST_DTYPE_BF16)
        st = coll_finish_rounded(g, sums, buf, ST_DTYPE_BF16, count, op, sg);
    else if (sg)
        st = coll_run_stage(sg, sums, count, op);
    else if (op == ST_AVG)
        for (size_t i = 0; i < count; i++)
            sums[i] /= (float)g->world;
    if (st != ST_OK)
        return coll_mark_broken(g, st, g->rank);
    if (dtype == ST_DTYPE_F32)
        memcpy(buf, sums, bytes);
    return ST_OK;
}

bool coll_inline_takes(const st_group *g, const struct coll_call *c)
{
    return g->world >= 2 && coll_fast_payload(c->wire, c->op);
}

/* Any count, in pieces of the lines' capacity (one, unless forced); fp32
 * values on a bf16 wire are rounded into a scratch piece and widened back. */
st_status coll_inline_run(st_group *g, const struct coll_call *c)
{
    const size_t cap = g->inline_lines * (c->wire == ST_DTYPE_BF16 ? INLINE_PAYLOAD / 2 : INLINE_PAYLOAD / 4);
    for (size_t done = 0; done < c->count; done += cap) {
        const size_t n = c->count - done < cap ? c->count - done : cap;
        void *mine = coll_elem(c->buf, c->user, done);
        if (c->user != c->wire)
            st_bf16_from_f32_n(g->inline_wire, mine, n);
        void *piece = c->user != c->wire ? (void *)g->inline_wire : mine;
        st_status st = coll_inline_piece(g, piece, n, c->wire, c->op, c->sg);
        if (st != ST_OK)
            return st;
        if (c->user != c->wire)
            st_bf16_to_f32_n(mine, g->inline_wire, n);
    }
    return ST_OK;
}
