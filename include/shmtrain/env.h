/* The launcher <-> instance contract: the environment shmrun gives each
 * instance, and the exit codes and files the instances answer with.
 *
 * Every name lives here once.  The writer is launcher/gang.c (one table,
 * rank_environment); the readers are named beside each variable.  A program
 * started without shmrun sees none of them and runs as a world of one.
 *
 *   variable                       value                         read by
 *   SHMTRAIN_RANK                  rank in ring order            coll (join)
 *   SHMTRAIN_WORLD_SIZE            number of instances           coll (join)
 *   SHMTRAIN_LOCAL_RANK            rank on this node             (programs)
 *   SHMTRAIN_LOCAL_WORLD_SIZE      instances on this node        (programs)
 *   SHMTRAIN_JOB_ID                names shm segments            coll, train
 *   SHMTRAIN_CORES                 its PUs, "0-15"               (programs)
 *   SHMTRAIN_NUMA_NODES            its NUMA node(s)              (programs)
 *   SHMTRAIN_RESTART_COUNT         0 on the first attempt        train (resume)
 *   SHMTRAIN_MAX_RESTARTS          --max-restarts                (programs)
 *   SHMTRAIN_LOG_DIR               this attempt's log directory  train (metrics)
 *   SHMTRAIN_HEARTBEAT_FILE        where to publish progress     coll (heartbeat)
 *   SHMTRAIN_CONSOLE_TTY           "1": rank 0 may draw bars     train
 *   RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE   torchrun's names, unless set
 *   OMP_NUM_THREADS OMP_PLACES OMP_PROC_BIND      OpenMP, unless set
 *
 * One machine today: the local rank and size equal the global ones.
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

/* Fallbacks a program started by another launcher may carry. */
#define ST_ENV_GENERIC_RANK "RANK"
#define ST_ENV_GENERIC_WORLD_SIZE "WORLD_SIZE"
#define ST_ENV_GENERIC_LOCAL_RANK "LOCAL_RANK"
#define ST_ENV_GENERIC_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"

/* The exit status of an instance that stopped because another rank failed
 * (a peer died, aborted, or could not load what everyone needed).  The
 * launcher then waits a moment for the rank that failed first, so the root
 * cause it reports is the real one.  75 is sysexits' EX_TEMPFAIL. */
#define ST_EXIT_PEER_FAILED 75

/* The heartbeat file: one fixed-size text record rewritten in place,
 *   "beats=<n> state=<run|wait> peer=<rank or -1>\n"  padded to 63 bytes + '\n'.
 * beats grows while the instance makes progress (collectives complete, or
 * the program calls st_group_heartbeat); state=wait says it has been blocked
 * for a second or more waiting for rank `peer`.  The launcher creates the
 * file empty and reads it; the instance only writes it. */
#define ST_HEARTBEAT_RECORD 64

#endif
