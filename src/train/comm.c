/* The trainer's process group (comm.h). */
#define _GNU_SOURCE
#include "comm.h"

#include <stdio.h>
#include <string.h>

#include "shmtrain/env.h"
#ifdef SHMTRAIN_HAVE_MPI
#include <mpi.h>

#include "shmtrain/coll_mpi.h"
#endif

/* mpirun and srun start every rank themselves: the nodes are joined over
 * MPI.  shmrun (one machine) and a lone process never touch MPI. */
static bool wants_mpi(const st_placement *pl)
{
    return !strcmp(pl->launcher, "mpirun") || !strcmp(pl->launcher, "srun");
}

static void fill_ranks(struct train_comm *c)
{
    c->local_rank = st_group_rank(c->local);
    c->local_world = st_group_size(c->local);
    if (!c->h) {
        c->rank = c->local_rank;
        c->world = c->local_world;
    }
}

st_status comm_join(struct train_comm *c, size_t zero_copy_bytes)
{
    memset(c, 0, sizeof *c);
    st_group_config gc = {.zero_copy_bytes = zero_copy_bytes};
    st_placement pl;
    st_status st = st_placement_from_env(&pl);
    if (st != ST_OK)
        return st;
    snprintf(c->launcher, sizeof c->launcher, "%s", pl.launcher);
    if (!wants_mpi(&pl)) {
        char job[ST_JOB_ID_MAX + 1];
        if ((st = st_group_config_from_env(&gc, job)) == ST_OK && (st = st_group_create(&c->local, &gc)) == ST_OK)
            fill_ranks(c);
        c->any_thread = true;
        return st;
    }
#ifdef SHMTRAIN_HAVE_MPI
    int provided = 0;
    /* Collectives come from one thread at a time (the main thread, or the
     * buckets' progress thread while it waits); the signal thread and
     * OpenMP's workers never call MPI. */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return st_fail(ST_ERR_BACKEND, "train: MPI_Init_thread failed (started by %s)", pl.launcher);
    c->mpi_started = true;
    c->any_thread = provided >= MPI_THREAD_SERIALIZED;
    if ((st = st_group_tuning_from_env(&gc)) != ST_OK || (st = st_hgroup_create(&c->h, &gc)) != ST_OK)
        return st;
    c->local = st_hgroup_local(c->h);
    c->rank = st_hgroup_rank(c->h);
    c->world = st_hgroup_size(c->h);
    fill_ranks(c);
    /* Launcher variables set by hand outside mpirun: MPI starts a world of
     * one (a singleton) where they claim more, and the run would train
     * alone as if it were the whole job. */
    if (c->world != pl.world || c->rank != pl.rank)
        return st_fail(ST_ERR_INVALID, "environment (%s): rank %d of %d, but MPI started rank %d of %d: the variables "
                                       "are not %s's (set by hand?); start it with %s, or unset them", pl.launcher,
                       pl.rank, pl.world, c->rank, c->world, pl.launcher, pl.launcher);
    return ST_OK;
#else
    return st_fail(ST_ERR_INVALID, "train: started by %s (%s of %d ranks), but this shmtrain was built without "
                                   "MPI; install libopenmpi-dev and rebuild, or start it with shmrun",
                   pl.launcher, pl.launcher, pl.world);
#endif
}

void comm_leave(struct train_comm *c, bool failed)
{
#ifdef SHMTRAIN_HAVE_MPI
    if (c->h) {
        st_hgroup_destroy(c->h);  /* its local group with it */
        c->h = NULL;
        c->local = NULL;
    }
    if (c->mpi_started && !failed)
        MPI_Finalize();
    c->mpi_started = false;
#else
    (void)failed;
#endif
    st_group_destroy(c->local);
    c->local = NULL;
}

st_status comm_allreduce(struct train_comm *c, float *buf, size_t count, st_dtype wire, st_reduce_op op)
{
    c->allreduces++;
#ifdef SHMTRAIN_HAVE_MPI
    if (c->h)
        return st_hallreduce(c->h, buf, count, ST_DTYPE_F32, wire, op);
#endif
    return st_allreduce(c->local, buf, count, ST_DTYPE_F32, wire, op);
}

st_status comm_broadcast(struct train_comm *c, void *buf, size_t bytes, int root)
{
#ifdef SHMTRAIN_HAVE_MPI
    if (c->h)
        return st_hbroadcast(c->h, buf, bytes, root);
#endif
    return st_broadcast(c->local, buf, bytes, root);
}

st_status comm_node_broadcast(struct train_comm *c, void *buf, size_t bytes, int root)
{
    return st_broadcast(c->local, buf, bytes, root);
}

st_status comm_node_barrier(struct train_comm *c) { return st_barrier(c->local); }
st_status comm_node_allgather(struct train_comm *c, const void *send, void *recv, size_t bytes)
{
    return st_allgather(c->local, send, recv, bytes);
}
bool comm_take(struct train_comm *c, uint64_t end, uint64_t *ticket) { return st_group_take(c->local, end, ticket); }
const char *comm_job_id(const struct train_comm *c) { return st_group_job_id(c->local); }
void *comm_zero_copy_buffer(struct train_comm *c) { return st_group_buffer(c->local, NULL); }
void comm_heartbeat(struct train_comm *c) { st_group_heartbeat(c->local); }
double comm_wait_seconds(const struct train_comm *c) { return st_group_wait_seconds(c->local); }
int comm_numa_node(const struct train_comm *c, int local_rank) { return st_group_numa_node(c->local, local_rank); }

st_status comm_node_any(struct train_comm *c, bool mine, bool *any)
{
    float v = mine ? 1.0f : 0.0f;
    st_status st = st_allreduce(c->local, &v, 1, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM);
    *any = v > 0;
    return st;
}
