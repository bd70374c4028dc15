/* The ring all-reduce (fp32): 2(N-1) steps between neighbours, each cut
 * into chunks so the right neighbour works on chunk j while this rank does
 * chunk j+1.  Where it wins: 2 ranks of one thread, whose ring reads and
 * writes fewer bytes than any other algorithm (the reduce-scatter adds in
 * place), with no synchronisation across the group.
 *
 * An ordinary buffer is staged, but only what the right neighbour reads
 * enters the segment: its first step reads our segment r raw, so that is
 * all we copy in; every later value it reads is a partial sum or a final
 * segment, which we write into staging as we make it, adding our own
 * input where it lies.  Copying the whole buffer in and the whole result
 * out, as a ring over the segment would need, moved 6.5 n e per rank at 2
 * ranks where this moves 4.5 n e.
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

/* The final sums of [lo, hi), made in staging, into the caller's buffer. */
static void finish_into_user(st_group *g, float *user, const float *mine, size_t lo, size_t hi)
{
    const size_t bytes = (hi - lo) * sizeof(float);
    coll_copy_to_user(user + lo, mine + lo, bytes);
    coll_count_read(g, g->rank, bytes);
    coll_count_write(g, bytes);
}

/* One chunk of step t: add the left neighbour's partial sum into ours
 * (reduce-scatter), or copy its final values (all-gather).  Staged, `user`
 * is the caller's buffer: our input is read there and every final value
 * lands there; `mine` (staging) gets what the right neighbour reads next,
 * which after the last step is nothing. */
struct ring_step {
    bool scatter, last_scatter, last_step;
};

static void ring_chunk(st_group *g, float *mine, const float *theirs, float *user, size_t lo, size_t hi,
                       struct ring_step s, const struct coll_call *c)
{
    const int left = (g->rank + g->world - 1) % g->world;
    const size_t n = hi - lo, bytes = n * sizeof(float);
    coll_count_read(g, left, bytes);
    coll_count_write(g, bytes);
    if (!s.scatter) {
        coll_copy_to_user(user ? user + lo : mine + lo, theirs + lo, bytes);
        if (user && !s.last_step) {
            coll_copy_to_user(mine + lo, user + lo, bytes);
            coll_count_read(g, -1, bytes);
            coll_count_write(g, bytes);
        }
        return;
    }
    const float div = s.last_scatter && c->op == ST_AVG && !c->sg ? (float)g->world : 1.0f;
    coll_count_read(g, user ? -1 : g->rank, bytes);
    if (user)
        coll_add_out(mine + lo, user + lo, theirs + lo, n, div);
    else if (div != 1.0f)
        coll_add_into_div(mine + lo, theirs + lo, n, div);
    else
        coll_add_into(mine + lo, theirs + lo, n);
    if (user && s.last_scatter && !c->sg)  /* a stage changes the sums first (ring()) */
        finish_into_user(g, user, mine, lo, hi);
}

/* Ring all-reduce over buffers that every rank can read: bufs[q] is rank q's
 * buffer as mapped here (staged: user is the caller's, which only this rank
 * reads).  Step t < N-1 is reduce-scatter, t >= N-1 all-gather;
 * docs/collectives.md has the units each step waits for. */
static st_status ring(st_group *g, float *const *bufs, float *user, size_t n, const struct coll_call *c)
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
        const struct ring_step s = {t < N - 1, t == N - 2, t == 2 * N - 3};
        const int seg = s.scatter ? (r - t - 1 + 2 * N) % N : (r - (t - (N - 1)) + N) % N;
        for (uint32_t j = 0; j < K; j++) {
            /* The left neighbour finished step t-1 on this chunk. */
            uint32_t need_left = t == 0 ? base + 1 : base + 1 + (uint32_t)(t - 1) * K + j + 1;
            if ((st = coll_wait_for(g, left, need_left)) != ST_OK)
                return st;
            /* All-gather step s overwrites our partial sum of this chunk,
             * which the right neighbour reads in its reduce-scatter step s.
             * No wait is needed: following the left waits back N-1 steps
             * around the ring shows the right neighbour has finished step
             * t-(N-1) = s on this chunk before we get here. */
            size_t lo, hi;
            chunk_range(n, N, seg, j, k, &lo, &hi);
            ring_chunk(g, bufs[r], bufs[left], user, lo, hi, s, c);
            if (!(c->sg && s.last_scatter))  /* staged: the owned part is published whole, after the stage */
                coll_publish(g, base + 1 + (uint32_t)t * K + j + 1);
        }
        if (c->sg && s.last_scatter) {
            size_t lo, hi;
            chunk_range(n, N, seg, 0, 1, &lo, &hi);
            if ((st = coll_run_stage(c->sg, bufs[r] + lo, hi - lo, c->op)) != ST_OK)
                return coll_mark_broken(g, st, g->rank);  /* the peers stop waiting for it */
            if (user)
                finish_into_user(g, user, bufs[r], lo, hi);
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

/* A staged piece is at most world x RING_PART_BYTES: each rank's part of
 * it, copied in, summed into and read back, stays within one core's L2 (1
 * MiB on a Zen 4, 2 MiB on a Sapphire Rapids).  At 2 ranks the whole 4 MiB
 * staging area made each part 2 MiB, and 4-16 MiB calls ran 1.1-1.3x
 * slower on a Zen 4 guest (docs/benchmarks.md 0zj); half-MiB parts lost
 * 2-9% at 2 MiB (twice the pieces, each ring filling and draining).  From
 * 4 ranks the staging area's own pieces are this small. */
#define RING_PART_BYTES ((size_t)1024 << 10)

static size_t ring_piece_bytes(const st_group *g)
{
    const size_t cap = (size_t)g->world * RING_PART_BYTES;
    return g->cfg.staging_bytes < cap ? g->cfg.staging_bytes : cap;
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
        return ring(g, g->rank_ptrs, NULL, c->count, c);
    }
    /* Ordinary buffer: staged piece by piece, segment r of each copied in
     * (the only raw input a peer reads). */
    for (int q = 0; q < g->world; q++)
        g->rank_ptrs[q] = (float *)coll_seg_at(g, q, g->staging_off);
    float *mine = g->rank_ptrs[g->rank];
    const size_t piece = ring_piece_bytes(g) / sizeof(float);
    for (size_t done = 0; done < c->count; done += piece) {
        const size_t len = c->count - done < piece ? c->count - done : piece;
        size_t lo, hi;
        coll_part(len, g->world, g->rank, &lo, &hi);
        coll_copy_to_user(mine + lo, buf + done + lo, (hi - lo) * sizeof(float));
        coll_count_read(g, -1, (hi - lo) * sizeof(float));
        coll_count_write(g, (hi - lo) * sizeof(float));
        st_status st = ring(g, g->rank_ptrs, buf + done, len, c);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}
