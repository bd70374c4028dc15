/* Internal: the collectives' shared state and the all-reduce algorithms'
 * one interface.
 *
 * coll.c       the public collectives: checks, the wire conversions, the
 *              stage, broadcast and barrier
 * choose.c     the one place an all-reduce algorithm is chosen: the
 *              measured table (bytes x ranks x threads x levels)
 * inline.c     small payloads: data and sequence number in one cache line
 * direct.c     every rank sums every rank's slot: one synchronisation
 * ring.c       the pipelined ring: 2(N-1) neighbour steps
 * rsag.c       reduce-scatter from the peers' segments, then all-gather:
 *              two synchronisations at any N, every thread of the rank
 * two_level.c  the same within each NUMA node, then across: each byte
 *              crosses the interconnect once
 * par.c        the sums and copies split over a rank's threads (OpenMP)
 * kernels.c    the single-thread sums and copies the algorithms run
 * sync.c       the clock, peer liveness, the wait/publish protocol
 * group.c      joining and leaving a group: configuration, segments, the
 *              control pages, the NUMA layout
 * segment.c    one POSIX shared-memory segment
 * heartbeat.c  progress for the launcher's stall watch
 * p2p.c        point-to-point messages, through a ring a pair
 */
#ifndef SHMTRAIN_COLL_INTERNAL_H
#define SHMTRAIN_COLL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shmtrain/clock.h"
#include "heartbeat.h"
#include "segment.h"
#include "shmtrain/bf16.h"
#include "shmtrain/coll.h"

#define LINE 128 /* two cache lines: the adjacent-line prefetcher pairs them */

#define PAGE 4096

#define CTL_MAGIC 0x53484d5452414e31ull /* "SHMTRAN1" */

/* One rank's control page, at the start of its segment. */
struct ctl {
    /* Written by the owner only, except `sleepers` (waiters register there
     * so the owner knows a FUTEX_WAKE is needed). */
    _Alignas(LINE) _Atomic uint32_t progress;
    _Atomic uint32_t sleepers;
    _Atomic uint32_t aborted;     /* 0, or 1 + rank that failed first */
    _Atomic uint32_t joined;
    /* Written once by the owner before `ready`. */
    _Alignas(LINE) _Atomic uint32_t ready;
    uint64_t magic;
    int32_t rank, world, pid;
    int32_t numa;                 /* its NUMA node, -1 unknown or several */
    uint64_t zero_copy_bytes, staging_bytes, small_bytes, small_zero_copy_bytes, inline_bytes, seg_bytes, p2p_bytes;
    char job_id[72];
    char algorithm[24];           /* the forced algorithm, "" for the table */
    /* Rank 0's only: the work tickets every rank takes (st_group_take),
     * on a line of its own so taking one does not slow `progress`. */
    _Alignas(LINE) _Atomic uint64_t tickets;
};

/* One line of the inline all-reduce: 56 payload bytes and the number of the
 * call that wrote them, stored last with release order, so a reader that
 * sees its call's number has the payload in the same cache-line transfer
 * (NCCL's LL protocol carries a flag beside each word for the same reason).
 * 64 bits never wrap in practice; numbering skips 0, the zeroed segment. */
#define INLINE_PAYLOAD 56
struct inline_line {
    _Alignas(64) unsigned char data[INLINE_PAYLOAD];
    _Atomic uint64_t seq;
};

/* The all-reduce algorithms, written once: each one file of its own
 * (coll_<file>_takes, coll_<file>_run), the name a program forces it by
 * (SHMTRAIN_ALLREDUCE_ALGO, st_allreduce_algorithms), the name its
 * copying path reports (a buffer outside the zero-copy region), and its
 * one-piece call for small messages, where it has one (coll_small_piece). */
#define COLL_ALGORITHMS(X)                                                   \
    X(INLINE, inline, "inline", "inline", coll_inline_piece)                 \
    X(DIRECT, direct, "direct", "direct", NULL)                              \
    X(RING, ring, "ring", "ring-copy", NULL)                                 \
    X(RSAG, rsag, "rsag", "rsag-copy", NULL)                                 \
    X(TWO_LEVEL, two_level, "two-level", "two-level-copy", NULL)

struct coll_stage;
/* An algorithm's one piece of a payload of the wire's type, reduced in place. */
typedef st_status (*coll_piece_fn)(st_group *g, void *buf, size_t count, st_dtype dtype, st_reduce_op op,
                                   const struct coll_stage *sg);

enum coll_algo {
#define COLL_ALGO_ENUM(KIND, file, name, copying, piece) COLL_##KIND,
    COLL_ALGORITHMS(COLL_ALGO_ENUM)
#undef COLL_ALGO_ENUM
    COLL_NALGOS,
    COLL_TABLE = -1
};

/* The NUMA layout the two-level all-reduce runs over: ranks grouped by
 * node (nodes in increasing number, ranks in rank order within one), every
 * node holding `per_node` ranks. */
struct coll_levels {
    int levels;                   /* 1, or 2 when the layout below is usable */
    int nodes, per_node;
    int node_index, local_index;  /* this rank's (m, i) */
    int *rank_at;                 /* [nodes * per_node]: rank_at[m * per_node + i] */
};

struct st_group {
    int rank, world;
    char job_id[72];
    st_group_config cfg;          /* with defaults filled in */
    enum coll_algo forced;        /* COLL_TABLE: the table chooses */
    int threads;                  /* most threads a call splits over */
    struct {                      /* choose.c's last answer: calls repeat */
        size_t count;
        st_dtype user, wire;
        st_reduce_op op;
        bool zero_copy;
        int pool;                 /* the caller's OpenMP pool then, or 0 when the size uses one thread */
        enum coll_algo algo;
    } last;
    int *numa;                    /* [world] each rank's NUMA node, -1 unknown */
    int remote_ranks;             /* ranks known to sit on another NUMA node than this one */
    struct {                      /* small calls, which skip the choice (coll_choose_small's) */
        size_t upto[2];           /* [wire f32, bf16]: counts up to which the table's answer is `piece`'s
                                     algorithm on either path */
        coll_piece_fn piece;      /* that algorithm's one-piece call */
    } small;
    struct coll_levels lv;
    st_coll_counters ctr;
    size_t seg_bytes, zc_off, staging_off, results_off, results_bytes, slots_off, inline_off;
    size_t inline_lines;          /* lines per set (two sets per rank) */
    size_t p2p_off, p2p_ring_bytes; /* the inbox: a page of counters and a ring from each peer */
    struct {                      /* st_send / st_recv's, atomic: they may run on other threads */
        _Atomic uint64_t sent, sent_bytes, received, received_bytes;
        _Atomic uint32_t cancelled;  /* st_p2p_cancel: waits give up */
    } p2p;
    uint64_t inline_seq;          /* number of the last inline call */
    int inline_parity;            /* the set the next inline call writes */
    float *inline_sums;           /* fp32 sums of an inline payload */
    struct st_segment *segs;      /* [world]; segs[rank] is ours */
    struct ctl **ctl;             /* [world] */
    pid_t *pids;                  /* [world] */
    float **rank_ptrs;            /* scratch [world]: the ring's buffers */
    const void **srcs;            /* scratch [world]: a sum's sources */
    int *owners;                  /* scratch [world]: whose memory each is */
    int *peers;                   /* scratch [world]: the ranks a phase waits for */
    char **bases;                 /* scratch [world]: each rank's input */
    struct coll_span *spans;      /* scratch [world]: a gather's runs */
    st_bf16 *inline_wire;         /* an inline piece rounded to a bf16 wire */
    float *stage_f32;             /* a bf16 slice's fp32 sums, for a stage */
    size_t stage_f32_len;
    uint32_t base;                /* progress value before the current collective */
    uint32_t known_all_ge;        /* every peer's progress is known to be >= this */
    size_t slot_bytes;            /* each of the direct algorithm's two slots */
    uint32_t slot_base[2];        /* base of the last direct collective per slot */
    bool slot_used[2];
    int parity;
    bool oversubscribed;
    double waited_s;              /* time blocked in wait_for */
    struct st_heartbeat hb;       /* progress for the launcher's stall watch */
    st_status broken;             /* ST_OK while usable */
    char broken_msg[256];
};

/* What runs between the reduce-scatter and the all-gather halves of a
 * staged all-reduce (st_allreduce_staged): `fn` on the part this rank
 * owns, summed over the group, then the division of an average by
 * `divisor` (the whole job's rank count), so the all-gather spreads final
 * values and every rank ends with the same bits. */
struct coll_stage {
    st_shard_fn fn;
    void *ctx;
    float divisor;
};

/* One all-reduce as an algorithm sees it. */
struct coll_call {
    void *buf;                    /* the caller's values */
    size_t count;                 /* elements */
    st_dtype user, wire;          /* buf's element type; the type in the segments */
    st_reduce_op op;
    const struct coll_stage *sg;  /* NULL, or what runs between the halves */
    bool zero_copy;               /* buf lies in the zero-copy region (user == wire) */
    size_t zc_off;                /* ... at this offset in every rank's */
};

/* Each algorithm: can it run this call (element types, layout), and the
 * call itself, any count (an algorithm with a capacity goes in pieces).
 * choose.c holds the table of them. */
bool coll_inline_takes(const st_group *g, const struct coll_call *c);
st_status coll_inline_run(st_group *g, const struct coll_call *c);
/* One inline piece of a payload of the wire's type (at most the lines' capacity). */
st_status coll_inline_piece(st_group *g, void *buf, size_t count, st_dtype dtype, st_reduce_op op,
                            const struct coll_stage *sg);
/* choose.c: the group's small calls (g->small), once its layout is known. */
void coll_choose_small(st_group *g);
bool coll_direct_takes(const st_group *g, const struct coll_call *c);
st_status coll_direct_run(st_group *g, const struct coll_call *c);
bool coll_ring_takes(const st_group *g, const struct coll_call *c);
st_status coll_ring_run(st_group *g, const struct coll_call *c);
bool coll_rsag_takes(const st_group *g, const struct coll_call *c);
st_status coll_rsag_run(st_group *g, const struct coll_call *c);
bool coll_two_level_takes(const st_group *g, const struct coll_call *c);
st_status coll_two_level_run(st_group *g, const struct coll_call *c);

/* choose.c: the algorithm a call takes (the table's answer; and the same
 * through the group's memory of its last call), running one, names. */
enum coll_algo coll_choose(const st_group *g, const struct coll_call *c);
enum coll_algo coll_choose_again(st_group *g, const struct coll_call *c);
st_status coll_run_algorithm(st_group *g, enum coll_algo a, const struct coll_call *c);
const char *coll_algo_name(enum coll_algo a);
enum coll_algo coll_algo_parse(const char *name);  /* COLL_TABLE if unknown */
/* The most bytes any row of the table gives `a` (the inline lines and
 * direct slots are sized for it). */
size_t coll_table_max_bytes(enum coll_algo a);

/* coll.c: can an all-reduce take this payload and op?  (ST_OK, or why not) */
st_status coll_check_payload(st_dtype t, st_reduce_op op);
/* st: a collective's outcome; a success beats the launcher's heartbeat. */
st_status coll_progressed(st_group *g, st_status st);
/* coll.c: the stage (if any) on n fp32 sums, and the average's division. */
st_status coll_run_stage(const struct coll_stage *sg, float *part, size_t n, st_reduce_op op);
/* Round fp32 sums into the wire's type (bf16 or fp16) after the stage (if
 * any) and the average. */
st_status coll_finish_rounded(st_group *g, float *sums, void *out, st_dtype wire, size_t n, st_reduce_op op,
                              const struct coll_stage *sg);
/* n floats of room the group keeps (a bf16 slice's fp32 sums), or NULL. */
float *coll_scratch_f32(st_group *g, size_t n);
/* Elements [lo, hi) of part `part` of `parts` of n (n * part / parts). */
void coll_part(size_t n, int parts, int part, size_t *lo, size_t *hi);
/* The address of offset off in rank q's segment. */
char *coll_seg_at(const st_group *g, int q, size_t off);
/* The caller's element i (of type t) and rank q's zero-copy element i. */
static inline size_t coll_esize(st_dtype t)
{
    return t == ST_DTYPE_BF16 || t == ST_DTYPE_F16 ? 2 : t == ST_DTYPE_I64 || t == ST_DTYPE_F64 ? 8 : 4;
}
/* The payloads of the table's fast paths: fp32 and bf16 sums and averages. */
static inline bool coll_fast_payload(st_dtype wire, st_reduce_op op)
{
    return (wire == ST_DTYPE_F32 || wire == ST_DTYPE_BF16) && (op == ST_SUM || op == ST_AVG);
}
static inline void *coll_elem(void *base, st_dtype t, size_t i) { return (char *)base + i * coll_esize(t); }

/* ------------------------------------------------------------ counters -- */

/* Bytes a loop read from rank `owner`'s memory (-1: the caller's own
 * buffer), and bytes it wrote: counted where each loop is issued, once. */
static inline void coll_count_read(st_group *g, int owner, size_t bytes)
{
    g->ctr.bytes_read += bytes;
    if (owner >= 0 && owner != g->rank) {
        g->ctr.peer_bytes_read += bytes;
        if (g->numa[owner] >= 0 && g->numa[g->rank] >= 0 && g->numa[owner] != g->numa[g->rank])
            g->ctr.remote_numa_bytes_read += bytes;
    }
}
static inline void coll_count_write(st_group *g, size_t bytes) { g->ctr.bytes_written += bytes; }
/* The same bytes read from every rank's memory, this one's included. */
static inline void coll_count_read_all(st_group *g, size_t bytes)
{
    g->ctr.bytes_read += bytes * (size_t)g->world;
    g->ctr.peer_bytes_read += bytes * (size_t)(g->world - 1);
    g->ctr.remote_numa_bytes_read += bytes * (size_t)g->remote_ranks;
}

/* ------------------------------------------------------------- threads -- */

/* The pool a call splits over: the host's own (st_group_config.team: the
 * PyTorch binding's, whose process brings its own runtime) of the
 * configured threads, else OpenMP's; built without OpenMP and no host
 * pool, one thread. */
#ifdef _OPENMP
#include <omp.h>
static inline int coll_omp_pool_size(void) { return omp_get_max_threads(); }
static inline int coll_team_size(void) { return omp_get_num_threads(); }
static inline int coll_team_member(void) { return omp_get_thread_num(); }
#else
static inline int coll_omp_pool_size(void) { return 1; }
static inline int coll_team_size(void) { return 1; }
static inline int coll_team_member(void) { return 0; }
#endif
static inline int coll_pool_size(const st_group_config *c)
{
    return c->team ? (c->threads > 0 ? c->threads : 1) : coll_omp_pool_size();
}

/* par.c: how many threads a phase that moves `bytes` is split over (1
 * below a few hundred KiB: a fork and join would cost more than it saves). */
int coll_threads_for(const st_group *g, size_t bytes);

/* One run of a gather: n elements from `src` (rank `owner`'s memory, -1
 * the caller's) to `dst`. */
struct coll_span {
    void *dst;
    const void *src;
    size_t n;
    int owner;
};
/* Every span's elements from type `from` to type `to` (a copy, a bf16
 * widening or a rounding), the total split evenly over the threads; the
 * destination is the caller's buffer when `to_user` (written in the order
 * that does not alias). */
void coll_par_gather(st_group *g, const struct coll_span *spans, int nspans, st_dtype to, st_dtype from,
                     bool to_user);
/* out[i] = src[0][i] + ... + src[nsrc-1][i], i < n, in fp32 in source
 * order, divided by div when div != 1, stored as `to` (rounded once for
 * bf16).  The sources are of type `from`; owners[q] is the rank whose
 * memory src[q] is. */
struct coll_sum {
    const void *const *src;
    const int *owners;
    int nsrc;
    st_dtype from, to;
    float div;
    st_reduce_op op;  /* SUM (AVG: div), MAX or MIN; beyond fp32/bf16 sums, from == to */
};
void coll_par_sum(st_group *g, const struct coll_sum *s, void *out, size_t n);

/* ---------------------------------------------------------------- time -- */

/* sync.c: the coarse clock (st_now_s is the fine one), peer liveness and
 * the wait/publish protocol. */
double coll_coarse_now_s(void);
void coll_sleep_s(double s);
bool coll_pid_alive(pid_t pid);
/* This rank has finished unit `value`: its counter, and a wake if a peer sleeps on it. */
void coll_publish(st_group *g, uint32_t value);
/* Until `peer` (or every peer) has published `target`: spin, yield, then
 * sleep; ST_ERR_PEER_DEAD or ST_ERR_TIMEOUT (the group broken) if it never does. */
st_status coll_wait_for(st_group *g, int peer, uint32_t target);
st_status coll_wait_all(st_group *g, uint32_t target);
/* ... or until each of n ranks in `peers` has (this rank may be among them). */
st_status coll_wait_set(st_group *g, const int *peers, int n, uint32_t target);
/* Until `peer`'s sequence word `seq` reads `want` (acquire): the same
 * spin, yield, sleep and liveness checks.  The writer wakes a sleeper
 * with coll_wake_seq after storing it. */
st_status coll_wait_seq(st_group *g, int peer, _Atomic uint64_t *seq, uint64_t want);
void coll_wake_seq(st_group *g, _Atomic uint64_t *seq);
/* The group unusable from now on (st), failed_rank told to the peers. */
st_status coll_mark_broken(st_group *g, st_status st, int failed_rank);
/* ST_OK, or why g cannot run a collective (NULL, or broken earlier). */
st_status coll_check_usable(const st_group *g);

/* coll.c: the address of offset off in rank q's segment. */
char *coll_seg_at(const st_group *g, int q, size_t off);

/* kernels.c: dst += src; dst = (dst + src) / div; and into a caller's
 * buffer from a segment array, last element first where the forward order
 * would alias (4K aliasing: the caller's buffer just above the source). */
void coll_add_into(float *restrict dst, const float *restrict src, size_t n);
void coll_add_into_div(float *restrict dst, const float *restrict src, size_t n, float div);
void coll_copy_to_user(void *dst, const void *src, size_t bytes);
void coll_add_to_user(float *dst, const float *src, size_t n);
/* dst = (own + theirs) / div (div 1: the plain sum), own a caller's buffer. */
void coll_add_out(float *dst, const float *own, const float *theirs, size_t n, float div);
/* bf16 payloads: sums[i - lo] = bufs[0][i] + ... + bufs[world-1][i] in
 * fp32, rank order, for i in [lo, hi), bit for bit the scalar definition
 * (bf16.h); rounding them is st_bf16_from_f32_n. */
void coll_bf16_sum(float *restrict sums, uint16_t *const *bufs, int world, size_t lo, size_t hi);
/* out[i] = round(sum / div) for i in [lo, hi), without a slice-long fp32 buffer. */
void coll_bf16_reduce(uint16_t *restrict out, uint16_t *const *bufs, int world, size_t lo, size_t hi, float div);

#endif
