/* The collectives across servers: a hierarchical group over MPI.
 *
 * Ranks on one node form a shared-memory group (include/shmtrain/coll.h);
 * the nodes are joined over MPI.  The all-reduce is Horovod's hierarchical
 * shape with shared memory inside the node: an in-node reduce-scatter, an
 * MPI_Allreduce of each rank's part among the ranks of the same local rank
 * on the other nodes, an in-node all-gather.  On one node it is exactly the
 * shared-memory path, with no MPI call.  Every rank of every node ends with
 * the same bits.
 *
 * Nodes are MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups, or, with
 * SHMTRAIN_NODE_SIZE=K, blocks of K consecutive ranks (simulated nodes on
 * one machine).  Every node must hold the same number of ranks.  The
 * caller initialises MPI before st_hgroup_create and finalises it after
 * st_hgroup_destroy.  Built only where MPI is (libshmtrain-coll-mpi); the
 * shared-memory library never links MPI.
 */
#ifndef SHMTRAIN_COLL_MPI_H
#define SHMTRAIN_COLL_MPI_H

#include <stddef.h>

#include "shmtrain/coll.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_hgroup st_hgroup;

/* Join: every rank of MPI_COMM_WORLD calls it.  `defaults` (may be NULL)
 * configures the node's shared-memory group; its rank, world and job id
 * are filled in (the job id from SHMTRAIN_JOB_ID, else made by rank 0,
 * with the node appended).  The caller owns *out. */
st_status st_hgroup_create(st_hgroup **out, const st_group_config *defaults);
void st_hgroup_destroy(st_hgroup *h);

int st_hgroup_rank(const st_hgroup *h);        /* in MPI_COMM_WORLD */
int st_hgroup_size(const st_hgroup *h);
int st_hgroup_nodes(const st_hgroup *h);
st_group *st_hgroup_local(st_hgroup *h);       /* this node's group (its zero-copy buffer) */

/* st_allreduce over every node, for the types a stage takes (fp32, bf16,
 * fp16, and fp32 on a bf16 or fp16 wire): summed in fp32 in the node, the
 * slices' fp32 sums across nodes over MPI, a rounding wire rounded once;
 * half the bytes inside the node on a rounding wire. */
st_status st_hallreduce(st_hgroup *h, void *buf, size_t count, st_dtype dtype, st_dtype wire, st_reduce_op op);
st_status st_hbroadcast(st_hgroup *h, void *buf, size_t bytes, int root);   /* root: a world rank */
st_status st_hbarrier(st_hgroup *h);

#ifdef __cplusplus
}
#endif
#endif
