/* The launcher <-> instance contract: the environment shmrun gives each
 * instance, and the exit codes and files the instances answer with.
 *
 * Every name lives here once.  The writer is launcher/gang.c (one table,
 * rank_environment); the readers are named beside each variable.  A program
 * started without shmrun sees none of them and runs as a world of one.
 *
 *   variable                       value                         read by
 *   SHMTRAIN_RANK                  rank in ring order            placement, lifeline
 *   SHMTRAIN_WORLD_SIZE            number of instances           placement, lifeline
 *   SHMTRAIN_LOCAL_RANK            rank on this node             placement
 *   SHMTRAIN_LOCAL_WORLD_SIZE      instances on this node        placement
 *   SHMTRAIN_JOB_ID                names shm segments            coll's config, placement (the
 *                                                                run folder's name), lifeline,
 *                                                                coll-mpi (hier.c)
 *   SHMTRAIN_CORES                 its PUs, "0-15"               (programs)
 *   SHMTRAIN_NUMA_NODES            its NUMA node(s)              coll's config
 *   SHMTRAIN_RESTART_COUNT         0 on the first attempt        train (resume), the run folder
 *   SHMTRAIN_MAX_RESTARTS          --max-restarts                (programs)
 *   SHMTRAIN_LOG_DIR               this attempt's log directory  train (metrics), the run folder
 *                                                                (its link), shmtrain_torch's report
 *   SHMTRAIN_HEARTBEAT_FILE        where to publish progress     coll's config
 *   SHMTRAIN_CONSOLE_TTY           "1": rank 0 may draw bars     train
 *   SHMTRAIN_LAUNCHER_PID          shmrun's pid: die with it     train (lifeline)
 *
 * Every C reader goes through env.c (st_env_text and the typed readers
 * below): getenv appears nowhere else (tests/env_read_once.sh).
 *
 * The sweep adds to a PyTorch script's environment (not shmrun's table):
 *   SHMTRAIN_TORCH_BACKEND         "shm" or "gloo": init_process_group's   shmtrain_torch
 *   SHMTRAIN_INDEPENDENT           "1": the ceiling run: no all-reduce     shmtrain_torch (backend.cpp,
 *                                  leaves a rank                           report.py)
 *   SHMTRAIN_GRAD_ACCUM            --sweep-global-batch's share            the script
 *   RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE   torchrun's names (always)
 *   MASTER_ADDR MASTER_PORT        127.0.0.1 and a free port     PyTorch's env:// rendezvous
 *                                  per attempt, unless set      (init_process_group)
 *   OMP_NUM_THREADS OMP_PLACES OMP_PROC_BIND      OpenMP, unless set
 *
 * shmrun starts the instances of one machine: the local rank and size equal
 * the global ones (mpirun and srun span machines, under their own names).
 */
#ifndef SHMTRAIN_ENV_H
#define SHMTRAIN_ENV_H

#define ST_ENV_RANK "SHMTRAIN_RANK"
#define ST_ENV_WORLD_SIZE "SHMTRAIN_WORLD_SIZE"
#define ST_ENV_LOCAL_RANK "SHMTRAIN_LOCAL_RANK"
#define ST_ENV_LOCAL_WORLD_SIZE "SHMTRAIN_LOCAL_WORLD_SIZE"
#define ST_ENV_JOB_ID "SHMTRAIN_JOB_ID"
#define ST_ENV_CORES "SHMTRAIN_CORES"
#define ST_ENV_NUMA_NODES "SHMTRAIN_NUMA_NODES"
#define ST_ENV_RESTART_COUNT "SHMTRAIN_RESTART_COUNT"
#define ST_ENV_MAX_RESTARTS "SHMTRAIN_MAX_RESTARTS"
#define ST_ENV_LOG_DIR "SHMTRAIN_LOG_DIR"
#define ST_ENV_HEARTBEAT_FILE "SHMTRAIN_HEARTBEAT_FILE"
#define ST_ENV_CONSOLE_TTY "SHMTRAIN_CONSOLE_TTY"
#define ST_ENV_LAUNCHER_PID "SHMTRAIN_LAUNCHER_PID"
#define ST_ENV_INDEPENDENT "SHMTRAIN_INDEPENDENT"
#define ST_ENV_TORCH_REGION_MB "SHMTRAIN_TORCH_REGION_MB"  /* the torch backend's zero-copy region (64) */

/* Fallbacks a program started by another launcher may carry. */
#define ST_ENV_GENERIC_RANK "RANK"
#define ST_ENV_GENERIC_WORLD_SIZE "WORLD_SIZE"
#define ST_ENV_GENERIC_LOCAL_RANK "LOCAL_RANK"
#define ST_ENV_GENERIC_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define ST_ENV_MASTER_ADDR "MASTER_ADDR"
#define ST_ENV_MASTER_PORT "MASTER_PORT"

/* The exit status of an instance that stopped because another rank failed
 * (a peer died, aborted, or could not load what everyone needed).  The
 * launcher then waits a moment for the rank that failed first, so the root
 * cause it reports is the real one.  75 is sysexits' EX_TEMPFAIL. */
#define ST_EXIT_PEER_FAILED 75

/* The exit status of an instance that left because its launcher died
 * (shmtrain's lifeline, include/shmtrain/lifeline.h).  Nobody is left to
 * read it but a log or a shell; 76 is sysexits' EX_PROTOCOL. */
#define ST_EXIT_LAUNCHER_GONE 76

/* Open MPI's and Slurm's names for the same facts (read, never written). */
#define ST_ENV_OMPI_RANK "OMPI_COMM_WORLD_RANK"
#define ST_ENV_OMPI_WORLD_SIZE "OMPI_COMM_WORLD_SIZE"
#define ST_ENV_OMPI_LOCAL_RANK "OMPI_COMM_WORLD_LOCAL_RANK"
#define ST_ENV_OMPI_LOCAL_SIZE "OMPI_COMM_WORLD_LOCAL_SIZE"
#define ST_ENV_SLURM_RANK "SLURM_PROCID"
#define ST_ENV_SLURM_WORLD_SIZE "SLURM_NTASKS"
#define ST_ENV_SLURM_LOCAL_RANK "SLURM_LOCALID"
#define ST_ENV_SLURM_NODE "SLURM_NODEID"
#define ST_ENV_SLURM_NODES "SLURM_NNODES"
#define ST_ENV_SLURM_TASKS_PER_NODE "SLURM_TASKS_PER_NODE"  /* "4(x2),3": per node, run-length */
#define ST_ENV_TORCH_NODE "GROUP_RANK"
/* What each launcher names its job by, the same on every process of it:
 * a run folder's name (shmtrain's run folders) where shmrun gives none. */
#define ST_ENV_TORCH_JOB "TORCHELASTIC_RUN_ID"
#define ST_ENV_SLURM_JOB "SLURM_JOB_ID"
#define ST_ENV_PMIX_JOB "PMIX_NAMESPACE"
#define ST_ENV_OMPI_JOB "OMPI_MCA_ess_base_jobid"

/* The user's choice of the Python that runs shmrun --compare-torch's PyTorch
 * peer (and the bench scripts', bench/peer.sh): an interpreter path. */
#define ST_ENV_PYTHON "SHMTRAIN_PYTHON"
/* ... and the peer's script (bench/torch_ddp.py, wherever it was installed). */
#define ST_ENV_TORCH_DDP "SHMTRAIN_TORCH_DDP"

/* Tests and single-machine experiments: split the world into "nodes" of
 * this many consecutive ranks (each with its own shared-memory group). */
#define ST_ENV_NODE_SIZE "SHMTRAIN_NODE_SIZE"

/* The collectives' tuning (st_group_config's fields, read by
 * st_group_tuning_from_env, coll.h, for a main(); docs/collectives.md). */
#define ST_ENV_STAGING_BYTES "SHMTRAIN_STAGING_BYTES"
#define ST_ENV_CHUNK_BYTES "SHMTRAIN_CHUNK_BYTES"
#define ST_ENV_SMALL_BYTES "SHMTRAIN_SMALL_BYTES"    /* "0": never the direct algorithm */
#define ST_ENV_SMALL_ZERO_COPY_BYTES "SHMTRAIN_SMALL_ZERO_COPY_BYTES"
#define ST_ENV_INLINE_BYTES "SHMTRAIN_INLINE_BYTES"  /* "0": never the inline algorithm */
#define ST_ENV_TIMEOUT "SHMTRAIN_TIMEOUT"
#define ST_ENV_JOIN_TIMEOUT "SHMTRAIN_JOIN_TIMEOUT"
#define ST_ENV_SPIN "SHMTRAIN_SPIN"
#define ST_ENV_COLL_THREADS "SHMTRAIN_COLL_THREADS"        /* threads one call splits over */
#define ST_ENV_COLL_THREAD_BYTES "SHMTRAIN_COLL_THREAD_BYTES" /* ... where each moves this much */
#define ST_ENV_ALLREDUCE_ALGORITHM "SHMTRAIN_ALLREDUCE_ALGORITHM" /* force one: inline ... two-level */

/* The engine's switches (tuning.h), read by st_nn_tuning_from_env for a
 * main() to put in st_net_config.tuning. */
#define ST_ENV_ONEDNN_NO_CHUNKS "SHMTRAIN_ONEDNN_NO_CHUNKS"
#define ST_ENV_ONEDNN_BRGCONV "SHMTRAIN_ONEDNN_BRGCONV"
#define ST_ENV_ONEDNN_IP_ANY "SHMTRAIN_ONEDNN_IP_ANY"
#define ST_ENV_ONEDNN_IP_PLAIN "SHMTRAIN_ONEDNN_IP_PLAIN"
#define ST_ENV_ONEDNN_WGRAD_IP "SHMTRAIN_ONEDNN_WGRAD_IP"
#define ST_ENV_ONEDNN_REORDERED_COPIES "SHMTRAIN_ONEDNN_REORDERED_COPIES"
#define ST_ENV_ONEDNN_POOL "SHMTRAIN_ONEDNN_POOL"
#define ST_ENV_ONEDNN_SEQ_TN "SHMTRAIN_ONEDNN_SEQ_TN"
#define ST_ENV_ONEDNN_LAYERNORM "SHMTRAIN_ONEDNN_LAYERNORM"
#define ST_ENV_ONEDNN_UNFUSED_LOSS "SHMTRAIN_ONEDNN_UNFUSED_LOSS"
#define ST_ENV_ONEDNN_STEM "SHMTRAIN_ONEDNN_STEM"
#define ST_ENV_ATTENTION_FP32 "SHMTRAIN_ATTENTION_FP32"
#define ST_ENV_ATTENTION_MATMUL "SHMTRAIN_ATTENTION_MATMUL"
#define ST_ENV_ATTENTION_DOT "SHMTRAIN_ATTENTION_DOT"
#define ST_ENV_ATTENTION_TILES "SHMTRAIN_ATTENTION_TILES"
#define ST_ENV_NN_VERBOSE "SHMTRAIN_NN_VERBOSE"
#define ST_ENV_BF16_ANY_ISA "SHMTRAIN_BF16_ANY_ISA"

/* Where the trainer keeps the kernels st_nn_tune chose (src/train/kernels.c):
 * $XDG_CACHE_HOME/shmtrain, else $HOME/.cache/shmtrain, as the XDG base
 * directories say. */
#define ST_ENV_XDG_CACHE_HOME "XDG_CACHE_HOME"
#define ST_ENV_HOME "HOME"

/* The heartbeat file: one fixed-size text record rewritten in place,
 *   "beats=<n> state=<run|wait> peer=<rank or -1>\n"  padded to 63 bytes + '\n'.
 * beats grows while the instance makes progress (collectives complete, or
 * the program calls st_group_heartbeat); state=wait says it has been blocked
 * for 0.1 s or more waiting for rank `peer`.  The launcher creates the
 * file empty and reads it; the instance only writes it. */
#define ST_HEARTBEAT_RECORD 64

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/shmname.h"
#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where this process sits, whoever started it. */
typedef struct st_placement {
    int rank, world;              /* global */
    int local_rank, local_world;  /* among the processes of this node */
    int node, nodes;              /* this node's index and the node count; -1 when the launcher does not say */
    char launcher[16];            /* "shmrun", "mpirun", "srun", "torchrun" or "none" */
} st_placement;

/* Read the placement from the first launcher whose variables are set:
 * shmrun (SHMTRAIN_*), Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_*),
 * torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK); a
 * world of one when none is.  A later launcher's variables that are also set
 * must agree (mpirun under srun, shmrun's own torchrun names).  With
 * SHMTRAIN_NODE_SIZE=K the world is cut into nodes of K consecutive ranks.
 * Fails with ST_ERR_INVALID and one line naming the variables when they are
 * incomplete, out of range or disagree. */
st_status st_placement_from_env(st_placement *out);

/* The first launcher other than shmrun whose rank variable is set
 * ("mpirun", "srun", "torchrun"), or NULL: the placement's own list. */
const char *st_env_other_launcher(void);

/* The job id every process of this launch sees (shmrun's, then torchrun's,
 * Slurm's, PMIx's, Open MPI's), or NULL.  torchrun's "none" (no rendezvous
 * id given) is made its agent's: "torchrun-<its pid>". */
const char *st_env_shared_job_id(void);

/* The id a shared-memory group meets under: shmrun's, else torchrun's for
 * the processes torchrun started; NULL when neither launched this one. */
const char *st_env_group_job_id(void);

/* Readers for the modules that own what the variables configure (the
 * collectives' coll_env.c, the engine's tuning.c): env.c knows how a value
 * is written, not the structs.  Each leaves *field alone when the variable
 * is unset or empty (and st_env_bytes and st_env_seconds when the program
 * set the field already), and returns false with a message naming the
 * variable when its value is not what it should be. */
bool st_env_set(const char *name);   /* set and not empty */
const char *st_env_text(const char *name);  /* its value; NULL when unset or empty (the one getenv) */
bool st_env_flag(const char *name);  /* set to anything but "" or "0" */
bool st_env_int(const char *name, int min, int *field);                /* a whole number >= min */
bool st_env_bytes(const char *name, size_t never, size_t *field);      /* > 0; "0" is `never` if not 0 */
bool st_env_seconds(const char *name, double *field);                  /* > 0 */

#ifdef __cplusplus
}
#endif
#endif
