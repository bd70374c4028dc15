/* Internal: the trainer's process group, on one node or several.
 *
 * Under shmrun (or alone) it is one node's shared-memory group.  Started by
 * mpirun or srun, and built with MPI, it is the hierarchical group of
 * shmtrain-coll-mpi (shared memory in the node, MPI between nodes); on one
 * node that makes no MPI call in a collective either.  The trainer calls
 * only these, so it does not care which.
 */
#ifndef SHMTRAIN_TRAIN_COMM_H
#define SHMTRAIN_TRAIN_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/coll.h"

struct st_hgroup;

struct train_comm {
    st_group *local;          /* this node's group: its zero-copy buffer, data sharing, heartbeat */
    struct st_hgroup *h;      /* the nodes joined over MPI, or NULL */
    bool mpi_started;         /* we called MPI_Init, so we finalise */
    bool any_thread;          /* another thread may run the collectives (MPI gave SERIALIZED) */
    int rank, world;          /* in the whole job */
    int local_rank, local_world;
    char launcher[16];        /* whose variables placed it: "shmrun", "mpirun", "srun", "torchrun", "none" */
    uint64_t allreduces;      /* comm_allreduce calls so far (the steps' share proves --balance independent) */
};

/* Join the job's group; `zero_copy_bytes` as in st_group_config. */
st_status comm_join(struct train_comm *c, size_t zero_copy_bytes);
/* After a failure MPI is not finalised (that would wait for peers that may
 * wait for us): the process exits non-zero and mpirun stops the job. */
void comm_leave(struct train_comm *c, bool failed);

/* Over the whole job. */
/* `count` floats, travelling as `wire` (fp32, or bf16: rounded, summed in
 * fp32, rounded once: st_allreduce). */
st_status comm_allreduce(struct train_comm *c, float *buf, size_t count, st_dtype wire, st_reduce_op op);
st_status comm_broadcast(struct train_comm *c, void *buf, size_t bytes, int root);

/* In this node: what its ranks share (decoded data published once per
 * node), the zero-copy gradient buffer, and the launcher's heartbeat. */
st_status comm_node_broadcast(struct train_comm *c, void *buf, size_t bytes, int root);
st_status comm_node_barrier(struct train_comm *c);
/* Every node rank's `bytes` at `send`, in local rank order, into `recv`. */
st_status comm_node_allgather(struct train_comm *c, const void *send, void *recv, size_t bytes);
/* The node's next work ticket below `end` (st_group_take). */
bool comm_take(struct train_comm *c, uint64_t end, uint64_t *ticket);
const char *comm_job_id(const struct train_comm *c);
void *comm_zero_copy_buffer(struct train_comm *c);
void comm_heartbeat(struct train_comm *c);
/* Seconds this rank has spent blocked waiting for its node's peers. */
double comm_wait_seconds(const struct train_comm *c);
/* A node rank's NUMA node (-1: unknown, or several). */
int comm_numa_node(const struct train_comm *c, int local_rank);
/* Did any rank of this node say `mine`? (a collective: every rank calls it) */
st_status comm_node_any(struct train_comm *c, bool mine, bool *any);


#endif
