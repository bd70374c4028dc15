/* The direct all-reduce (fp32): every rank copies its input into a slot,
 * then sums all slots in rank order.  One synchronisation, identical bits
 * everywhere; each rank reads N times the message, so it wins only while
 * the message is small next to the cost of a synchronisation.  Two slots
 * alternate, so a slot is rewritten only after every peer has entered the
 * collective that followed its last use, i.e. finished reading it.
 * Forced past its slot (st_group_config.algorithm), it goes in pieces.
 */
#include <string.h>

#include "coll_internal.h"

static st_status direct(st_group *g, float *buf, size_t n, const struct coll_call *c)
{
    const int p = g->parity;
    const uint32_t base = g->base;
    st_status st;
    if (g->slot_used[p] && (st = coll_wait_all(g, g->slot_base[p] + 2)) != ST_OK)
        return st;
    const size_t slot_off = g->slots_off + (size_t)p * g->slot_bytes, bytes = n * sizeof(float);
    memcpy(coll_seg_at(g, g->rank, slot_off), buf, bytes);
    coll_publish(g, base + 1);
    /* Counted while the peers' slots are on their way (the copy in, the
     * N slots read, the sum written). */
    coll_count_read(g, -1, bytes);
    coll_count_write(g, 2 * bytes);
    coll_count_read_all(g, bytes);
    if ((st = coll_wait_all(g, base + 1)) != ST_OK)
        return st;
    coll_copy_to_user(buf, coll_seg_at(g, 0, slot_off), bytes);
    for (int q = 1; q < g->world; q++)
        coll_add_to_user(buf, (const float *)coll_seg_at(g, q, slot_off), n);
    if (c->sg) {
        /* Every rank holds the whole sum: each runs the stage on all of it. */
        if ((st = coll_run_stage(c->sg, buf, n, c->op)) != ST_OK)
            return coll_mark_broken(g, st, g->rank);
    } else if (c->op == ST_AVG) {
        for (size_t i = 0; i < n; i++)
            buf[i] /= (float)g->world;
    }
    g->slot_base[p] = base;
    g->slot_used[p] = true;
    g->parity ^= 1;
    g->base = base + 1;
    return ST_OK;
}

bool coll_direct_takes(const st_group *g, const struct coll_call *c)
{
    return g->world >= 2 && c->user == ST_DTYPE_F32 && c->wire == ST_DTYPE_F32 && coll_fast_payload(c->wire, c->op);
}

st_status coll_direct_run(st_group *g, const struct coll_call *c)
{
    const size_t piece = g->slot_bytes / sizeof(float);
    float *buf = c->buf;
    for (size_t done = 0; done < c->count; done += piece) {
        const size_t n = c->count - done < piece ? c->count - done : piece;
        st_status st = direct(g, buf + done, n, c);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}
