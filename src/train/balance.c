/* Who computes which micro-batch of a step (balance.h). */
#include "balance.h"

#include <stdlib.h>
#include <string.h>

st_status balance_init(struct balance *b, struct train_comm *comm, int accum, bool dynamic)
{
    memset(b, 0, sizeof *b);
    b->dynamic = dynamic;
    b->accum = accum;
    b->comm = comm;
    b->rank = comm->rank;
    b->node_world = comm->local_world;
    if (!dynamic)
        return ST_OK;
    if (!(b->node_ranks = malloc((size_t)b->node_world * sizeof *b->node_ranks)))
        return st_fail(ST_ERR_NOMEM, "--balance dynamic: out of memory");
    /* Over MPI a node's ranks need not be consecutive (a round-robin
     * mapping): the slots a node shares are those of the ranks it holds. */
    return comm_node_allgather(comm, &b->rank, b->node_ranks, sizeof b->rank);
}

void balance_free(struct balance *b)
{
    free(b->node_ranks);
    b->node_ranks = NULL;
}

void balance_step(struct balance *b)
{
    b->next_micro = 0;
    b->end += (uint64_t)b->node_world * (uint64_t)b->accum;
}

bool balance_next(struct balance *b, int *slot_rank, int *micro)
{
    if (!b->dynamic) {
        if (b->next_micro >= b->accum)
            return false;
        *slot_rank = b->rank;
        *micro = b->next_micro++;
        b->taken++;
        return true;
    }
    uint64_t ticket;
    if (!comm_take(b->comm, b->end, &ticket))
        return false;
    /* in static's order: every rank's first micro-batch, then the seconds */
    const uint64_t k = ticket - (b->end - (uint64_t)b->node_world * (uint64_t)b->accum);
    *slot_rank = b->node_ranks[k % (uint64_t)b->node_world];
    *micro = (int)(k / (uint64_t)b->node_world);
    b->taken++;
    return true;
}
