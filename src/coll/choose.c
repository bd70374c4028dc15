/* The one place an all-reduce algorithm is chosen.
 *
 * A call is described by its payload in bytes (as it travels: bf16 wire
 * bytes are half fp32's), the group's ranks, the threads the call may use,
 * the NUMA levels the ranks sit on, and whether the buffer lies in the
 * zero-copy region (the copying path stages it through the segment).  The
 * table below maps that to an algorithm; bench/run-allreduce-switch.sh
 * measures every algorithm forced at each size and prints the rows that
 * belong here (docs/benchmarks.md, section 0b, has the measurement each
 * row comes from).  A config's inline and direct thresholds, set by a
 * program or SHMTRAIN_INLINE_BYTES / SHMTRAIN_SMALL_BYTES /
 * SHMTRAIN_SMALL_ZERO_COPY_BYTES, win over the table for those two;
 * st_group_config.algorithm (SHMTRAIN_ALLREDUCE_ALGORITHM) forces one
 * algorithm at every size it can run.
 */
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"

enum path { ANY_PATH, ZERO_COPY, COPYING };

struct coll_rule {
    int min_ranks, max_ranks;      /* inclusive */
    int min_threads, max_threads;  /* the threads the call may use (par.c), inclusive */
    int levels;                    /* 1 or 2; 0 for either */
    enum path path;
    size_t max_bytes;              /* payload bytes, inclusive */
    enum coll_algo algo;
};

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define ALL SIZE_MAX
#define MANY (1 << 20)

/* First row that matches and whose algorithm can take the call wins.  The
 * rows for 2 ranks of one thread come from this machine's 2-vCPU
 * measurements (benchmarks-history.md, sections 1 and 10); the others from
 * bench/run-many-ranks.sh on a 16-core Xeon (docs/benchmarks.md, 0e): rsag
 * wherever a call has threads to split over or a group many ranks, the ring
 * for the middle sizes of a one-thread call in the zero-copy region, whose
 * pipelined neighbour reads beat rsag's three group-wide synchronisations
 * by 1.1-1.35x at 128 KiB-1 MiB (16x1, 4x1). */
static const struct coll_rule TABLE[] = {
    /* ranks     threads   levels path       up to      algorithm */
    {2, MANY,    1, MANY,  0,     ANY_PATH,  128,       COLL_INLINE},
    {2, 2,       1, MANY,  0,     ZERO_COPY, 2 * KiB,   COLL_DIRECT},
    {2, 2,       1, MANY,  0,     COPYING,   32 * KiB,  COLL_DIRECT},
    {2, 2,       1, 1,     0,     ANY_PATH,  ALL,       COLL_RING},
    {3, MANY,    1, MANY,  0,     ANY_PATH,  64 * KiB,  COLL_RSAG},
    {3, MANY,    1, 1,     1,     ZERO_COPY, 1 * MiB,   COLL_RING},
    {3, MANY,    2, MANY,  1,     ZERO_COPY, 512 * KiB, COLL_RING},
    {4, MANY,    1, MANY,  2,     ANY_PATH,  ALL,       COLL_TWO_LEVEL},
    {2, MANY,    1, MANY,  0,     ANY_PATH,  ALL,       COLL_RSAG},
};

static const struct {
    const char *name;
    bool (*takes)(const st_group *g, const struct coll_call *c);
    st_status (*run)(st_group *g, const struct coll_call *c);
    coll_piece_fn piece;
} ALGORITHMS[COLL_NALGOS] = {
#define ALGORITHM(KIND, file, name, copying, piece) [COLL_##KIND] = {name, coll_##file##_takes, coll_##file##_run, piece},
    COLL_ALGORITHMS(ALGORITHM)
#undef ALGORITHM
};

static const char *const NAMES[] = {
#define NAME(KIND, file, name, copying, piece) name,
    COLL_ALGORITHMS(NAME)
#undef NAME
    NULL};

const char *const *st_allreduce_algorithms(void) { return NAMES; }

size_t coll_table_max_bytes(enum coll_algo a)
{
    size_t most = 0;
    for (size_t i = 0; i < sizeof TABLE / sizeof *TABLE; i++)
        if (TABLE[i].algo == a && TABLE[i].max_bytes > most)
            most = TABLE[i].max_bytes;
    return most;
}

enum coll_algo coll_algo_parse(const char *name)
{
    for (int a = 0; a < COLL_NALGOS; a++)
        if (!strcmp(name, ALGORITHMS[a].name))
            return (enum coll_algo)a;
    return COLL_TABLE;
}

static bool rule_matches(const struct coll_rule *r, const st_group *g, int threads, bool zc, size_t bytes)
{
    return g->world >= r->min_ranks && g->world <= r->max_ranks && threads >= r->min_threads &&
           threads <= r->max_threads &&
           (!r->levels || r->levels == g->lv.levels) && bytes <= r->max_bytes &&
           (r->path == ANY_PATH || (r->path == ZERO_COPY) == zc);
}

/* A program's own thresholds (0: the table's rows decide).  Set, the
 * inline threshold replaces the table's inline rows, and a direct one the
 * direct rows of its path; small_bytes also caps the zero-copy path's, as
 * it always has ("never" is never on either). */
struct thresholds {
    bool inline_set, direct_set;
    size_t inline_max, direct_max, direct_cap;
};

static size_t limit(size_t v, size_t never) { return v == never ? 0 : v; }

static struct thresholds thresholds_for(const st_group *g, bool zc)
{
    const st_group_config *k = &g->cfg;
    struct thresholds t = {.inline_set = k->inline_bytes != 0, .inline_max = limit(k->inline_bytes, ST_INLINE_NEVER),
                           .direct_cap = SIZE_MAX};
    const size_t small = limit(k->small_bytes, ST_SMALL_NEVER);
    if (k->small_bytes)
        t.direct_cap = small;
    if (zc && k->small_zero_copy_bytes) {
        t.direct_set = true;
        t.direct_max = limit(k->small_zero_copy_bytes, ST_SMALL_NEVER);
    } else if (!zc && k->small_bytes) {
        t.direct_set = true;
        t.direct_max = small;
    }
    if (t.direct_max > t.direct_cap)
        t.direct_max = t.direct_cap;
    return t;
}

/* May the table's row give `a` for this many bytes, or does a program's
 * threshold decide that algorithm instead? */
static bool row_allowed(const struct thresholds *t, enum coll_algo a, size_t bytes)
{
    if (a == COLL_INLINE)
        return !t->inline_set;
    if (a == COLL_DIRECT)
        return !t->direct_set && bytes <= t->direct_cap;
    return true;
}

enum coll_algo coll_choose(const st_group *g, const struct coll_call *c)
{
    if (g->forced != COLL_TABLE && ALGORITHMS[g->forced].takes(g, c))
        return g->forced;
    const size_t bytes = c->count * coll_esize(c->wire);
    const struct thresholds t = thresholds_for(g, c->zero_copy);
    if (bytes <= t.inline_max && coll_inline_takes(g, c))
        return COLL_INLINE;
    if (bytes <= t.direct_max && coll_direct_takes(g, c))
        return COLL_DIRECT;
    const int threads = coll_threads_for(g, bytes);
    for (size_t i = 0; i < sizeof TABLE / sizeof *TABLE; i++) {
        const struct coll_rule *r = &TABLE[i];
        if (rule_matches(r, g, threads, c->zero_copy, bytes) && row_allowed(&t, r->algo, bytes) &&
            ALGORITHMS[r->algo].takes(g, c))
            return r->algo;
    }
    return COLL_RSAG;  /* takes every call */
}

st_status coll_run_algorithm(st_group *g, enum coll_algo a, const struct coll_call *c)
{
    return ALGORITHMS[a].run(g, c);
}

const char *coll_algo_name(enum coll_algo a) { return ALGORITHMS[a].name; }

/* Calls repeat (a trainer's buckets, a bench's sizes): the last answer is
 * kept, keyed by everything the choice reads, so a small message costs a
 * comparison here instead of a walk down the table. */
enum coll_algo coll_choose_again(st_group *g, const struct coll_call *c)
{
    const size_t bytes = c->count * coll_esize(c->wire);
    const int pool = bytes < 2 * g->cfg.thread_bytes || g->threads == 1 ? 0 : coll_pool_size(&g->cfg);
    if (g->last.count == c->count && g->last.user == c->user && g->last.wire == c->wire && g->last.op == c->op &&
        g->last.zero_copy == c->zero_copy && g->last.pool == pool && g->last.count)
        return g->last.algo;
    const enum coll_algo a = coll_choose(g, c);
    g->last.count = c->count;
    g->last.user = c->user;
    g->last.wire = c->wire;
    g->last.op = c->op;
    g->last.zero_copy = c->zero_copy;
    g->last.pool = pool;
    g->last.algo = a;
    return a;
}

/* The counts up to which every call of a payload type is inline, whichever
 * its path (the table's own answer, asked once), so a small call skips
 * the choice (and its cost, a sixth of a 4-byte call's) altogether and
 * goes straight to the inline algorithm's one piece. */
void coll_choose_small(st_group *g)
{
    g->small.piece = ALGORITHMS[COLL_INLINE].piece;
    for (int w = 0; w < 2; w++) {
        const st_dtype t = w ? ST_DTYPE_BF16 : ST_DTYPE_F32;
        const size_t cap = g->inline_lines * (INLINE_PAYLOAD / coll_esize(t));
        size_t n = 0;
        while (n < cap && g->world > 1) {
            const struct coll_call zc = {NULL, n + 1, t, t, ST_SUM, NULL, true, 0};
            const struct coll_call copying = {NULL, n + 1, t, t, ST_SUM, NULL, false, 0};
            if (coll_choose(g, &zc) != COLL_INLINE || coll_choose(g, &copying) != COLL_INLINE)
                break;
            n++;
        }
        g->small.upto[w] = n;
    }
}
