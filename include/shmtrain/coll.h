/* shmtrain collectives: a process group over POSIX shared memory.
 *
 * N processes on one machine form a group; each owns one shared-memory
 * segment (created O_CREAT|O_EXCL, mode 0600, named /shmtrain.<uid>.<job>.<rank>,
 * first touched by its owner) and maps its peers' segments.  Every segment is
 * unlinked as soon as all ranks have mapped it, so no crash can leak it.
 *
 * Collectives must be called by every rank in the same order with the same
 * arguments (SPMD).  They are blocking, not thread-safe per group, and return
 * a status; on failure st_last_error() says which rank or call failed.  After
 * ST_ERR_PEER_DEAD or ST_ERR_TIMEOUT the group is broken: every later call
 * returns the same error, and the caller should destroy it.
 *
 * The API is transport-neutral: nothing here exposes the segment layout, so
 * an inter-node stage (e.g. MPI) can be added behind the same calls.
 */
#ifndef SHMTRAIN_COLL_H
#define SHMTRAIN_COLL_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include "shmtrain/dtype.h"
#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_group st_group;

/* AVG: the sum divided by the ranks, for floating-point payloads; MAX and
 * MIN: a NaN anywhere gives a NaN. */
typedef enum st_reduce_op { ST_SUM = 0, ST_AVG = 1, ST_MAX = 2, ST_MIN = 3 } st_reduce_op;

/* Zero means "use the default" for every numeric field. */
typedef struct st_group_config {
    int rank;                /* 0 .. world_size-1 */
    int world_size;          /* >= 1 */
    const char *job_id;      /* [A-Za-z0-9_.-]{1,64}; same on all ranks */
    size_t zero_copy_bytes;  /* size of the caller-owned region st_group_buffer()
                                returns; 0 = none */
    size_t staging_bytes;    /* per-rank staging for ordinary buffers (default
                                4 MiB; larger messages go in pieces) */
    size_t chunk_bytes;      /* ring pipelining unit (default 128 KiB) */
    size_t small_bytes;      /* messages up to this use the direct algorithm
                                (default 32 KiB; 0 keeps the default, use
                                ST_SMALL_NEVER to always use the ring) */
    size_t small_zero_copy_bytes; /* the same for a buffer in the zero-copy
                                region, where the ring needs no staging copy
                                (default 2 KiB, at most small_bytes) */
    size_t inline_bytes;     /* messages up to this use the inline algorithm, data
                                and sequence number in one cache line (default
                                ST_INLINE_DEFAULT, at most ST_INLINE_MAX;
                                ST_INLINE_NEVER: never) */
    double timeout_s;        /* longest wait for any single peer (default 300 s) */
    double join_timeout_s;   /* longest wait for peers to appear (default 60 s) */
    int spin;                /* busy-wait iterations before yielding/sleeping
                                (default: 2000, or 20 when ranks outnumber CPUs) */
    size_t shm_limit_bytes;  /* pretend the shm filesystem holds at most this
                                much (testing Docker's 64 MB /dev/shm); 0 = off */
    const char *heartbeat_path; /* the launcher's heartbeat file (env.h has its
                                   record); NULL = none */
    int threads;             /* threads one call's copies and sums are split over
                                (OpenMP; at most the calling thread's
                                omp_get_max_threads()); default: that, capped so
                                that ranks x threads <= the CPUs */
    size_t thread_bytes;     /* a phase of a call is split over threads only
                                where each moves at least this much (default
                                256 KiB: a fork and join costs 1-2 us) */
    const char *numa_nodes;  /* this rank's NUMA node(s) as the launcher gives
                                them ("1", "0-1"); NULL = unknown.  Ranks on two
                                or more nodes in equal numbers enable the
                                two-level all-reduce and count bytes read across
                                nodes (st_coll_counters) */
    const char *algorithm;   /* force one all-reduce algorithm at every size
                                (st_allreduce_algorithms() names them); NULL =
                                the measured table of src/coll/choose.c */
    /* A host's own thread pool for a call's copies and sums, where OpenMP's
     * is not the process's (the torch.distributed backend runs them on
     * PyTorch's): team(team_ctx, n, body, arg) must call body(arg, m, n)
     * once for each m in 0..n-1, on any threads, and return when all have
     * returned.  `threads` is then how many it may use (default 1).  NULL:
     * OpenMP's.  The split, and so the bits, are the same either way. */
    void (*team)(void *team_ctx, int threads, void (*body)(void *arg, int member, int size), void *arg);
    void *team_ctx;
    size_t p2p_bytes;        /* each ordered pair's ring for st_send/st_recv
                                (default 256 KiB, less from 9 ranks: an inbox of
                                2 MiB; at least 16 KiB); messages of any length
                                stream through it */
} st_group_config;

#define ST_SMALL_NEVER ((size_t)-1)
#define ST_INLINE_NEVER ((size_t)-1)
#define ST_INLINE_DEFAULT 128
#define ST_INLINE_MAX 65536

/* Join a group.  Blocks until all world_size ranks have joined (or
 * join_timeout_s passes).  On success *out is a group the caller owns and
 * releases with st_group_destroy(). */
st_status st_group_create(st_group **out, const st_group_config *cfg);

/* A program started by a launcher fills the config from the environment
 * first: st_group_config_from_env (include/shmtrain/env.h). */

/* Leave the group and unmap everything.  Safe on NULL.  Does not synchronise:
 * call st_barrier() first if peers may still read this rank's memory. */
void st_group_destroy(st_group *g);

int st_group_rank(const st_group *g);
int st_group_size(const st_group *g);
const char *st_group_job_id(const st_group *g);

/* The zero-copy region (zero_copy_bytes long, 64-byte aligned, zeroed at
 * join), or NULL if none was requested.  It belongs to the group.  An
 * all-reduce on a buffer inside it reads peers' regions directly instead of
 * copying through staging; the buffer must sit at the same offset on every
 * rank. */
void *st_group_buffer(st_group *g, size_t *bytes);

/* Rank `peer`'s zero-copy region as mapped in this process (read-only use),
 * or NULL if there is none or the peer's memory is not mapped here (a future
 * inter-node transport).  For custom zero-copy exchanges and benchmarks. */
const void *st_group_peer_buffer(const st_group *g, int peer);

/* In-place all-reduce of `count` elements of `dtype` at buf, travelling as
 * `wire`.  All ranks end with bitwise identical values; the same inputs give
 * the same bits on every run.
 *   wire == dtype: the payload reduced as its own type.  ST_DTYPE_F32
 *     (float *) in fp32; ST_DTYPE_BF16 and ST_DTYPE_F16 (uint16_t *:
 *     shmtrain/bf16.h, fp16.h) summed in fp32 in rank order and rounded
 *     once; ST_DTYPE_F64 in fp64; ST_DTYPE_I32 and ST_DTYPE_I64 in two's
 *     complement (a sum wraps as the hardware's does).
 *   dtype ST_DTYPE_F32, wire ST_DTYPE_BF16 or ST_DTYPE_F16: each rank's
 *     floats are rounded to the wire's type as they enter the segment
 *     (staging, in pieces), reduced as that payload is, and widened as
 *     they leave: buf ends with the bits of the rounded payload's
 *     reduction, half the bytes moving (what a trainer calls with fp32
 *     gradients and --allreduce-dtype).
 * Any op; ST_AVG for the floating types only (divided in fp32 before the
 * rounding).  fp32 and bf16 payloads take the measured table of
 * algorithms; the rest go by rsag.  Any other pair is refused by name. */
st_status st_allreduce(st_group *g, void *buf, size_t count, st_dtype dtype, st_dtype wire, st_reduce_op op);

/* Every rank's `bytes` at `send`, in rank order, into `recv` (world x
 * bytes; it may hold send at rank x bytes, MPI_IN_PLACE's layout). */
st_status st_allgather(st_group *g, const void *send, void *recv, size_t bytes);

/* The reduction over the ranks of `send` (world blocks of `count`
 * elements), block r into this rank's `recv` (`count` elements): the first
 * half of an all-reduce.  Types and ops as st_allreduce. */
st_status st_reduce_scatter(st_group *g, const void *send, void *recv, size_t count, st_dtype dtype,
                            st_reduce_op op);

/* Each rank's block for each rank, as MPI_Alltoallv in bytes: this rank's
 * send[q] (send_len[q] bytes) lands in rank q's recv[this rank], which holds
 * recv_len[this rank] there.  Every rank states both sides, and where a
 * pair disagrees (p sends q n bytes, q expects m) every rank refuses the
 * call, naming the pair, before a byte moves (ST_ERR_INVALID; the group
 * stays usable).  No send block may overlap a recv block.  Its own block is
 * copied directly; the rest in pieces of staging / world a peer. */
st_status st_alltoall(st_group *g, const void *const *send, const size_t *send_len, void *const *recv,
                      const size_t *recv_len);

/* Point-to-point, as MPI_Send and MPI_Recv: `bytes` at buf to rank `peer`
 * as one message with `tag`, and the next message from `peer` into buf.
 * Messages between two ranks arrive in the order sent; a recv whose
 * length or tag differs from the next message's is refused by name
 * (ST_ERR_MISMATCH) and the message is left for the next recv.  st_send
 * returns once the message is in the peer's inbox (a ring of
 * st_group_config.p2p_bytes; a longer one streams through it as the peer
 * takes it), so the caller may reuse buf; st_recv once all of it is in buf.
 * Unlike the collectives, these may run on other threads than the group's
 * collectives and concurrently with them, one thread at a time sending to
 * a given peer and one receiving from it; a failure (a dead peer:
 * ST_ERR_PEER_DEAD; nothing moving for timeout_s) leaves the collectives
 * usable. */
st_status st_send(st_group *g, int peer, int tag, const void *buf, size_t bytes);
st_status st_recv(st_group *g, int peer, int tag, void *buf, size_t bytes);
/* Would a st_send of `bytes` to `peer` (sending) finish now without
 * waiting (the inbox has room for it), or a st_recv of `bytes` from it
 * (the whole message is there, or the next one is another: refused at
 * once)?  Stays true until this rank's own next call on that side. */
bool st_p2p_ready(const st_group *g, int peer, bool sending, size_t bytes);
/* From now on a st_send or st_recv of g that has to wait (for room, for
 * its message) gives up within 20 ms with ST_ERR_INTERRUPTED; one that can
 * finish without waiting still does.  For a program leaving, or destroying
 * the group, with calls it never waited for (any thread may call it). */
void st_p2p_cancel(st_group *g);

/* An all-reduce with a stage between its two halves, for a transport
 * beyond this machine (the hierarchical all-reduce of shmtrain-coll-mpi):
 * after the in-group reduce-scatter, `between(ctx, part, n)` runs on the
 * part of buf this rank owns as fp32 sums over the group (a rounding
 * wire's before the rounding; with the direct algorithm of small messages,
 * on all of it, on every rank), and may add other nodes' sums to them; an
 * average is then divided by `divisor` (the whole job's rank count) there,
 * a rounding wire rounds once, and the all-gather spreads the result.
 * Whatever `between` leaves in the part is what every rank of the group
 * ends with, bit for bit.  A failing `between` fails the collective with
 * its status.  Types as st_allreduce, for the payloads a sum in fp32 can
 * become: fp32, bf16 and fp16. */
typedef st_status (*st_shard_fn)(void *ctx, float *part, size_t count);
st_status st_allreduce_staged(st_group *g, void *buf, size_t count, st_dtype dtype, st_dtype wire, st_reduce_op op,
                              st_shard_fn between, void *ctx, int divisor);

/* Copy `bytes` from `root`'s buf into every other rank's buf. */
st_status st_broadcast(st_group *g, void *buf, size_t bytes, int root);

/* Return only when every rank has entered the barrier. */
st_status st_barrier(st_group *g);

/* Take the group's next work ticket if it is below `end`: *ticket is then
 * its number and the answer true; false once every ticket below `end` is
 * taken.  Tickets count from 0 when the group is created and are shared by
 * every rank (one counter in rank 0's segment), so each number goes to
 * exactly one caller; raising `end` after a collective hands out the next
 * batch (the trainer's --balance dynamic takes a step's micro-batches so). */
bool st_group_take(st_group *g, uint64_t end, uint64_t *ticket);

/* Tell the launcher this rank is making progress outside collectives (a
 * long evaluation or checkpoint).  Every completed collective counts
 * already; this is cheap enough to call per batch.  Safe on NULL. */
void st_group_heartbeat(st_group *g);

/* Seconds this rank has spent blocked waiting for peers (spinning, yielding
 * or sleeping) since it joined: the "wait" part of collective time. */
double st_group_wait_seconds(const st_group *g);

/* Which algorithm an all-reduce of `count` elements of `dtype` at `buf`
 * would use: "inline", "direct", "ring", "rsag" (reduce-scatter from the
 * peers' segments, then all-gather) or "two-level" (the same within each
 * NUMA node, then across), with "-copy" appended where an ordinary buffer
 * is staged through the segment; "none" for nothing to do (for benchmarks
 * and logs).  `dtype` is the wire's: fp32 on a bf16 wire makes the bf16 choice. */
const char *st_allreduce_algorithm(const st_group *g, const void *buf, size_t count, st_dtype dtype);

/* The algorithms st_group_config.algorithm may force, NULL-terminated. */
const char *const *st_allreduce_algorithms(void);

/* What the collectives did since the group was created (or the counters
 * reset), for this rank: the structure of a call on any machine, where a
 * timing depends on the machine.  Bytes are those the call's own loops
 * read and wrote (the caller's buffer, this rank's segment and its peers'),
 * counted where each loop is issued; docs/collectives.md has every
 * algorithm's formula. */
typedef struct st_coll_counters {
    uint64_t calls;               /* collectives (all-reduce, broadcast, barrier) */
    uint64_t syncs;               /* waits for peers' progress: one per point where
                                     this rank cannot go on until others have
                                     published (on one peer or on a set) */
    uint64_t bytes_read, bytes_written;
    uint64_t peer_bytes_read;     /* of bytes_read, from other ranks' segments */
    uint64_t remote_numa_bytes_read; /* of those, from ranks on another NUMA node */
    uint64_t tickets;             /* work tickets this rank took (st_group_take) */
    uint64_t p2p_sent, p2p_sent_bytes;         /* st_send's messages and their bytes */
    uint64_t p2p_received, p2p_received_bytes; /* st_recv's */
} st_coll_counters;

void st_group_counters(const st_group *g, st_coll_counters *out);
void st_group_counters_reset(st_group *g);

/* How many NUMA levels the group's all-reduce sees (1, or 2 when its ranks
 * sit on several NUMA nodes in equal numbers), and the threads a call may
 * use (st_group_config.threads after its default). */
int st_group_levels(const st_group *g);
int st_group_threads(const st_group *g);

/* Rank `rank`'s NUMA node as it joined (st_group_config.numa_nodes: one
 * node), or -1 when unknown or several. */
int st_group_numa_node(const st_group *g, int rank);

/* The segment name of `rank` for a job, as created by st_group_create, into
 * `name` (at least 128 bytes).  Used by the launcher to clean up after a gang
 * that was killed while joining. */
st_status st_segment_name(char *name, size_t len, const char *job_id, int rank);

/* Remove every segment of `job_id` still in /dev/shm (the ranks' segments of
 * a world of `world_size` and anything else named for the job, such as a
 * shared dataset); returns how many were removed (>= 0), -1 on a bad job id. */
int st_segment_cleanup(const char *job_id, int world_size);

/* Remove this user's shmtrain names in /dev/shm that have not changed for
 * `older_than_s` seconds: what a job killed while joining left behind when no
 * launcher of ours cleaned up after it (mpirun, srun).  A live job's names
 * exist only while it starts (each goes once every peer has mapped it, at
 * most the join timeout), so anything much older is stale; mappings of a
 * running job are not affected by a name's removal.  st_group_create calls
 * it with max(600 s, 2 x the join timeout).  Returns how many it removed. */
int st_segment_reap_stale(double older_than_s);

/* The collectives' tuning from the environment (SHMTRAIN_STAGING_BYTES ...
 * SHMTRAIN_SPIN, SHMTRAIN_COLL_THREADS, SHMTRAIN_ALLREDUCE_ALGORITHM; "0"
 * means "never" for the three algorithm thresholds; names in env.h), the
 * launcher's heartbeat file and this instance's NUMA node(s)
 * (SHMTRAIN_NUMA_NODES) into the fields of *c the program left 0: its own
 * choices win.  ST_ERR_INVALID naming the variable when a value is not a
 * positive number.  For main()s (src/coll/coll_env.c). */
st_status st_group_tuning_from_env(st_group_config *c);

/* A whole shared-memory group's config from the environment: rank and world
 * from st_placement_from_env (env.h; one node only), the job id
 * (SHMTRAIN_JOB_ID; "local-<pid>", kept in job_id[ST_JOB_ID_MAX + 1], for a
 * world of one without it) and the tuning above.  What a program started by
 * shmrun passes to st_group_create. */
st_status st_group_config_from_env(st_group_config *c, char *job_id);

#ifdef __cplusplus
}
#endif
#endif
