/* The ring all-reduce (fp32): 2(N-1) steps between neighbours, each cut
 * into chunks so the right neighbour works on chunk j while this rank does
 * chunk j+1.  Where it wins: 2 ranks of one thread, whose ring reads and
 * writes fewer bytes than any other algorithm (the reduce-scatter adds in
 * place), with no synchronisation across the group.
 */
#include <stdbool.h>
#include <string.h>

#include "coll_internal.h"

void coll_part(size_t n, int parts, int part, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)part / (size_t)parts;
    *hi = n * (size_t)(part + 1) / (size_t)parts;
}

/* Elements [lo, hi) of chunk `j` (of `k`) of segment `seg` (of `world`). */
static void chunk_range(size_t n, int world, int seg, size_t j, size_t k, size_t *lo, size_t *hi)
{
    size_t s0, s1;
    coll_part(n, world, seg, &s0, &s1);
    const size_t len = s1 - s0;
    *lo = s0 + len * j / k;
    *hi = s0 + len * (j + 1) / k;
}

/* One chunk of step t: add the left neighbour's partial sum into ours
 * (reduce-scatter), or copy its final values (all-gather). */
static void ring_chunk(st_group *g, float *mine, const float *theirs, size_t lo, size_t hi, bool scatter, bool last,
                       const struct coll_call *c)
{
    const int left = (g->rank + g->world - 1) % g->world;
    const size_t bytes = (hi - lo) * sizeof(float);
    coll_count_read(g, left, bytes);
    coll_count_write(g, bytes);
    if (!scatter) {
        memcpy(mine + lo, theirs + lo, bytes);
        return;
    }
    coll_count_read(g, g->rank, bytes);
    if (last && c->op == ST_AVG && !c->sg)
        coll_add_into_div(mine + lo, theirs + lo, hi - lo, (float)g->world);
    else
        coll_add_into(mine + lo, theirs + lo, hi - lo);
}

/* Ring all-reduce over buffers that every rank can read: bufs[q] is rank q's
 * buffer as mapped here.  Step t < N-1 is reduce-scatter, t >= N-1
 * all-gather; docs/collectives.md has the units each step waits for. */
static st_status ring(st_group *g, float *const *bufs, size_t n, const struct coll_call *c)
{
    const int N = g->world, r = g->rank, left = (r + N - 1) % N, right = (r + 1) % N;
    const size_t max_seg = (n + (size_t)N - 1) / (size_t)N;
    size_t k = (max_seg * sizeof(float) + g->cfg.chunk_bytes - 1) / g->cfg.chunk_bytes;
    if (k == 0)
        k = 1;
    const uint32_t base = g->base, K = (uint32_t)k;
    st_status st;

    coll_publish(g, base + 1);
    for (int t = 0; t < 2 * N - 2; t++) {
        const bool scatter = t < N - 1, last = t == N - 2;
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
            ring_chunk(g, bufs[r], bufs[left], lo, hi, scatter, last, c);
            if (!(c->sg && last))  /* staged: the owned part is published whole, after the stage */
                coll_publish(g, base + 1 + (uint32_t)t * K + j + 1);
        }
        if (c->sg && last) {
            size_t lo, hi;
            chunk_range(n, N, seg, 0, 1, &lo, &hi);
            if ((st = coll_run_stage(c->sg, bufs[r] + lo, hi - lo, c->op)) != ST_OK)
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

bool coll_ring_takes(const st_group *g, const struct coll_call *c)
{
    return g->world >= 2 && c->user == ST_DTYPE_F32 && c->wire == ST_DTYPE_F32 && coll_fast_payload(c->wire, c->op);
}

st_status coll_ring_run(st_group *g, const struct coll_call *c)
{
    float *buf = c->buf;
    if (c->zero_copy) {
        for (int q = 0; q < g->world; q++)
            g->rank_ptrs[q] = (float *)(coll_seg_at(g, q, g->zc_off) + c->zc_off);
        return ring(g, g->rank_ptrs, c->count, c);
    }
    /* Ordinary buffer: stage it through shared memory piece by piece. */
    for (int q = 0; q < g->world; q++)
        g->rank_ptrs[q] = (float *)coll_seg_at(g, q, g->staging_off);
    float *mine = g->rank_ptrs[g->rank];
    const size_t piece = g->cfg.staging_bytes / sizeof(float);
    for (size_t done = 0; done < c->count; done += piece) {
        const size_t len = c->count - done < piece ? c->count - done : piece;
        memcpy(mine, buf + done, len * sizeof(float));
        coll_count_read(g, -1, len * sizeof(float));
        coll_count_write(g, len * sizeof(float));
        st_status st = ring(g, g->rank_ptrs, len, c);
        if (st != ST_OK)
            return st;
        coll_copy_to_user(buf + done, mine, len * sizeof *buf);
        coll_count_read(g, g->rank, len * sizeof(float));
        coll_count_write(g, len * sizeof(float));
    }
    return ST_OK;
}
