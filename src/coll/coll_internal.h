/* Internal: the collectives' shared state.
 *
 * coll.c       the algorithms (direct, ring, bf16 slices, broadcast,
 *              barrier) and the public collectives
 * inline.c     the small-message all-reduce: data and sequence number in
 *              one cache line, no separate flag, no closing barrier
 * sync.c       the clock, peer liveness, the wait/publish protocol
 * kernels.c    the sums and copies the algorithms run
 * group.c      joining and leaving a group: configuration, segments, the
 *              control pages, the environment
 * segment.c    one POSIX shared-memory segment
 * heartbeat.c  progress for the launcher's stall watch
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
    uint64_t zero_copy_bytes, staging_bytes, small_bytes, small_zero_copy_bytes, inline_bytes, seg_bytes;
    char job_id[72];
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

struct st_group {
    int rank, world;
    char job_id[72];
    st_group_config cfg;          /* with defaults filled in */
    size_t seg_bytes, zc_off, staging_off, slots_off, inline_off;
    size_t inline_lines;          /* lines per set (two sets per rank) */
    uint64_t inline_seq;          /* number of the last inline call */
    int inline_parity;            /* the set the next inline call writes */
    float *inline_sums;           /* fp32 sums of an inline payload */
    struct st_segment *segs;      /* [world]; segs[rank] is ours */
    struct ctl **ctl;             /* [world] */
    pid_t *pids;                  /* [world] */
    float **rank_ptrs;            /* scratch [world] */
    uint16_t **bf16_ptrs;         /* scratch [world], for bf16 payloads */
    float *stage_f32;             /* a bf16 slice's fp32 sums, for a stage */
    size_t stage_f32_len;
    uint32_t base;                /* progress value before the current collective */
    uint32_t known_all_ge;        /* every peer's progress is known to be >= this */
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
 * staged all-reduce (st_allreduce_f32_staged): `fn` on the part this rank
 * owns, summed over the group, then the division of an average by
 * `divisor` (the whole job's rank count), so the all-gather spreads final
 * values and every rank ends with the same bits. */
struct coll_stage {
    st_shard_fn fn;
    void *ctx;
    float divisor;
};

/* coll.c: the stage (if any) on n fp32 sums, and the average's division. */
st_status coll_run_stage(const struct coll_stage *sg, float *part, size_t n, st_reduce_op op);
/* Round fp32 sums into bf16 after the stage (if any) and the average. */
st_status coll_finish_bf16(st_group *g, float *sums, uint16_t *out, size_t n, st_reduce_op op,
                           const struct coll_stage *sg);

/* inline.c: does a payload of `bytes` take the inline all-reduce? */
bool coll_uses_inline(const st_group *g, size_t bytes);
/* The inline all-reduce of `count` elements of `dtype` (f32 or bf16). */
st_status coll_inline_allreduce(st_group *g, void *buf, size_t count, st_dtype dtype, st_reduce_op op,
                                const struct coll_stage *sg);

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
/* bf16 payloads: sums[i - lo] = bufs[0][i] + ... + bufs[world-1][i] in
 * fp32, rank order, for i in [lo, hi), bit for bit the scalar definition
 * (bf16.h); rounding them is st_bf16_from_f32_n. */
void coll_bf16_sum(float *restrict sums, uint16_t *const *bufs, int world, size_t lo, size_t hi);
/* out[i] = round(sum / div) for i in [lo, hi), without a slice-long fp32 buffer. */
void coll_bf16_reduce(uint16_t *restrict out, uint16_t *const *bufs, int world, size_t lo, size_t hi, float div);

#endif
