/* The hierarchical group (include/shmtrain/coll_mpi.h): shared memory in
 * the node, MPI between nodes. */
#define _GNU_SOURCE
#include "shmtrain/coll_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/env.h"
#include "shmtrain/shmname.h"

struct st_hgroup {
    int rank, world, local_rank, local_world, node, nodes;
    MPI_Comm node_comm;    /* this node's ranks */
    MPI_Comm cross;        /* the ranks of this local rank on every node */
    st_group *local;
};

static st_status mpi_failed(const char *call, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return st_fail(ST_ERR_BACKEND, "coll-mpi: %s failed: %s", call, msg);
}

#define MPI_TRY(call)                                                                    \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != MPI_SUCCESS)                                                          \
            return mpi_failed(#call, rc_);                                               \
    } while (0)

/* Nodes: shared-memory domains, or SHMTRAIN_NODE_SIZE blocks. */
static st_status split_nodes(st_hgroup *h)
{
    st_placement pl;
    st_status st = st_placement_from_env(&pl);
    if (st != ST_OK)
        return st;
    if (st_env_set(ST_ENV_NODE_SIZE)) {
        if (pl.world != h->world)
            return st_fail(ST_ERR_INVALID, "coll-mpi: %s is set but the environment's world (%d) is not MPI's (%d)",
                           ST_ENV_NODE_SIZE, pl.world, h->world);
        MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, h->rank / pl.local_world, h->rank, &h->node_comm));
    } else {
        MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, h->rank, MPI_INFO_NULL, &h->node_comm));
    }
    MPI_TRY(MPI_Comm_set_errhandler(h->node_comm, MPI_ERRORS_RETURN));
    MPI_TRY(MPI_Comm_rank(h->node_comm, &h->local_rank));
    MPI_TRY(MPI_Comm_size(h->node_comm, &h->local_world));
    int leader = h->rank, sizes[2] = {h->local_world, -h->local_world}, is_leader = h->local_rank == 0;
    MPI_TRY(MPI_Bcast(&leader, 1, MPI_INT, 0, h->node_comm));  /* a node is named by its first rank */
    MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (sizes[0] != -sizes[1])
        return st_fail(ST_ERR_INVALID, "coll-mpi: nodes hold between %d and %d ranks; the hierarchical all-reduce "
                                       "needs the same number on every node", -sizes[1], sizes[0]);
    MPI_TRY(MPI_Allreduce(&is_leader, &h->nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    h->node = leader;
    MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, h->local_rank, h->rank, &h->cross));
    MPI_TRY(MPI_Comm_set_errhandler(h->cross, MPI_ERRORS_RETURN));
    return ST_OK;
}

/* One job id for all nodes: the environment's, or rank 0's invention. */
static st_status job_id(st_hgroup *h, char *out, size_t len)
{
    char base[72] = "";
    const char *env = st_env_text(ST_ENV_JOB_ID);
    if (h->rank == 0)
        snprintf(base, sizeof base, "%s", env && *env ? env : "");
    if (h->rank == 0 && !base[0])
        snprintf(base, sizeof base, "mpi-%ld-%d", (long)time(NULL), (int)getpid());
    MPI_TRY(MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD));
    int n = snprintf(out, len, "%.50s.n%d", base, h->node);
    if (n < 0 || (size_t)n >= len || !st_job_id_valid(out))
        return st_fail(ST_ERR_INVALID, "coll-mpi: job id '%s' is not usable: use 1-50 of [A-Za-z0-9_.-]", base);
    return ST_OK;
}

st_status st_hgroup_create(st_hgroup **out, const st_group_config *defaults)
{
    *out = NULL;
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised)
        return st_fail(ST_ERR_INVALID, "coll-mpi: MPI is not initialised (call MPI_Init first)");
    st_hgroup *h = calloc(1, sizeof *h);
    if (!h)
        return st_fail(ST_ERR_NOMEM, "coll-mpi: out of memory");
    h->node_comm = h->cross = MPI_COMM_NULL;
    st_status st = ST_OK;
    char job[80];
    if (MPI_Comm_rank(MPI_COMM_WORLD, &h->rank) != MPI_SUCCESS || MPI_Comm_size(MPI_COMM_WORLD, &h->world) != MPI_SUCCESS)
        st = st_fail(ST_ERR_BACKEND, "coll-mpi: MPI_COMM_WORLD is unusable");
    if (st == ST_OK)
        st = split_nodes(h);
    if (st == ST_OK)
        st = job_id(h, job, sizeof job);
    if (st == ST_OK) {
        st_group_config c = defaults ? *defaults : (st_group_config){0};
        c.rank = h->local_rank;
        c.world_size = h->local_world;
        c.job_id = job;
        st = st_group_create(&h->local, &c);
    }
    /* Every rank learns whether every rank joined: none goes on alone. */
    int ok = st == ST_OK, all = 0;
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS || !all) {
        if (st == ST_OK)
            st = st_fail(ST_ERR_PEER_DEAD, "coll-mpi: another rank could not join (its output says why)");
        st_hgroup_destroy(h);
        return st;
    }
    *out = h;
    return ST_OK;
}

void st_hgroup_destroy(st_hgroup *h)
{
    if (!h)
        return;
    st_group_destroy(h->local);
    if (h->cross != MPI_COMM_NULL)
        MPI_Comm_free(&h->cross);
    if (h->node_comm != MPI_COMM_NULL)
        MPI_Comm_free(&h->node_comm);
    free(h);
}

int st_hgroup_rank(const st_hgroup *h) { return h->rank; }
int st_hgroup_size(const st_hgroup *h) { return h->world; }
int st_hgroup_nodes(const st_hgroup *h) { return h->nodes; }
st_group *st_hgroup_local(st_hgroup *h) { return h->local; }

/* The stage between nodes: this rank's part, summed over its node, summed
 * again over the same part of every other node. */
static st_status across_nodes(void *ctx, float *part, size_t count)
{
    st_hgroup *h = ctx;
    for (size_t done = 0; done < count;) {
        int n = count - done > (size_t)INT_MAX ? INT_MAX : (int)(count - done);
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, part + done, n, MPI_FLOAT, MPI_SUM, h->cross));
        done += (size_t)n;
    }
    return ST_OK;
}

st_status st_hallreduce(st_hgroup *h, void *buf, size_t count, st_dtype dtype, st_dtype wire, st_reduce_op op)
{
    if (h->nodes == 1)
        return st_allreduce(h->local, buf, count, dtype, wire, op);
    return st_allreduce_staged(h->local, buf, count, dtype, wire, op, across_nodes, h, h->world);
}

/* Broadcasts are rare (the start, a resume): MPI's over the world. */
st_status st_hbroadcast(st_hgroup *h, void *buf, size_t bytes, int root)
{
    if (h->nodes == 1)
        return st_broadcast(h->local, buf, bytes, root);
    if (root < 0 || root >= h->world)
        return st_fail(ST_ERR_INVALID, "coll-mpi: broadcast: root %d is not a rank of a world of %d", root, h->world);
    for (size_t done = 0; done < bytes;) {
        int n = bytes - done > (size_t)INT_MAX ? INT_MAX : (int)(bytes - done);
        MPI_TRY(MPI_Bcast((char *)buf + done, n, MPI_BYTE, root, MPI_COMM_WORLD));
        done += (size_t)n;
    }
    return ST_OK;
}

st_status st_hbarrier(st_hgroup *h)
{
    st_status st = st_barrier(h->local);
    if (st != ST_OK || h->nodes == 1)
        return st;
    MPI_TRY(MPI_Barrier(h->cross));
    return st_barrier(h->local);
}
