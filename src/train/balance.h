/* Internal: who computes which micro-batch of a step (--balance).
 *
 * A step's global batch is W x N micro-batches of --batch-size samples
 * ("slots"; slot m x W + r is what rank r computes as its micro-batch m
 * under static balance, train_fill_batch's numbering).  Static: each rank
 * computes its own N, and the step waits for the slowest rank.  Dynamic:
 * the ranks of a node take the node's slots from the group's tickets
 * (st_group_take) until none is left, so a fast rank computes more and a
 * slow one (a shared core, a noisy neighbour) fewer; the samples, the slot
 * boundaries and each slot's dropout seed are static's, so the step's
 * gradient is the same sum in another order.  Across nodes (MPI) each
 * node takes its own ranks' slots: balancing stays inside a node.
 *
 * Ownership: struct balance owns node_ranks; the group is the comm's. */
#ifndef SHMTRAIN_TRAIN_BALANCE_H
#define SHMTRAIN_TRAIN_BALANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "shmtrain/status.h"

struct balance {
    bool dynamic;
    int accum;                /* micro-batches per rank per step (N) */
    int node_world;           /* ranks sharing the node's tickets */
    int *node_ranks;          /* [node_world]: each local rank's global rank */
    int rank;                 /* this one's, global */
    struct train_comm *comm;
    uint64_t end;             /* tickets handed out up to here (this step's end) */
    int next_micro;           /* static: this rank's next micro-batch */
    uint64_t taken;           /* micro-batches this rank computed, over the run */
};

st_status balance_init(struct balance *b, struct train_comm *comm, int accum, bool dynamic);
void balance_free(struct balance *b);

/* A step begins: its micro-batches are open to take. */
void balance_step(struct balance *b);
/* The next micro-batch this rank computes: the slot's rank and micro-batch
 * (train_fill_batch's), or false when the step has none left for it. */
bool balance_next(struct balance *b, int *slot_rank, int *micro);

#endif
