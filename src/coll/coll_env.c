/* A group's config from the environment (coll.h): the collectives own
 * their config struct and fill it here, from the variables env.h names,
 * through env.c's readers; env.c knows the names and how to read a value,
 * not the struct. */
#define _GNU_SOURCE
#include "shmtrain/coll.h"
#include "shmtrain/env.h"
#include "shmtrain/shmname.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

st_status st_group_tuning_from_env(st_group_config *c)
{
    const struct {
        const char *name;
        size_t never, *field;
    } sizes[] = {
        {ST_ENV_STAGING_BYTES, 0, &c->staging_bytes},
        {ST_ENV_CHUNK_BYTES, 0, &c->chunk_bytes},
        {ST_ENV_SMALL_BYTES, ST_SMALL_NEVER, &c->small_bytes},
        {ST_ENV_SMALL_ZERO_COPY_BYTES, ST_SMALL_NEVER, &c->small_zero_copy_bytes},
        {ST_ENV_INLINE_BYTES, ST_INLINE_NEVER, &c->inline_bytes},
        {ST_ENV_COLL_THREAD_BYTES, 0, &c->thread_bytes},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (!st_env_bytes(sizes[i].name, sizes[i].never, sizes[i].field))
            return ST_ERR_INVALID;
    if (!st_env_seconds(ST_ENV_TIMEOUT, &c->timeout_s) || !st_env_seconds(ST_ENV_JOIN_TIMEOUT, &c->join_timeout_s))
        return ST_ERR_INVALID;
    if ((c->spin <= 0 && !st_env_int(ST_ENV_SPIN, 1, &c->spin)) ||
        (c->threads <= 0 && !st_env_int(ST_ENV_COLL_THREADS, 1, &c->threads)))
        return ST_ERR_INVALID;
    if (!c->heartbeat_path && st_env_set(ST_ENV_HEARTBEAT_FILE))
        c->heartbeat_path = st_env_text(ST_ENV_HEARTBEAT_FILE);
    if (!c->numa_nodes && st_env_set(ST_ENV_NUMA_NODES))
        c->numa_nodes = st_env_text(ST_ENV_NUMA_NODES);
    if (!c->algorithm && st_env_set(ST_ENV_ALLREDUCE_ALGORITHM))
        c->algorithm = st_env_text(ST_ENV_ALLREDUCE_ALGORITHM);
    return ST_OK;
}

st_status st_group_config_from_env(st_group_config *c, char *job_id)
{
    st_placement pl;
    st_status st = st_placement_from_env(&pl);
    if (st != ST_OK)
        return st;
    if (pl.local_world != pl.world)
        return st_fail(ST_ERR_INVALID,
                       "coll: rank %d is one of %d on node %d of a %d-rank job (%s): a shared-memory group "
                       "spans one node; join through the MPI stage for more", pl.rank, pl.local_world, pl.node,
                       pl.world, pl.launcher);
    c->world_size = pl.world;
    c->rank = pl.rank;
    const char *env_job = st_env_group_job_id();
    if (env_job)
        snprintf(job_id, ST_JOB_ID_MAX + 1, "%s", env_job);
    else if (pl.world > 1)
        return st_fail(ST_ERR_INVALID, "coll: %s is not set (shmrun sets it, torchrun names its job in %s; ranks "
                       "of one job must share it)", ST_ENV_JOB_ID, ST_ENV_TORCH_JOB);
    else
        snprintf(job_id, ST_JOB_ID_MAX + 1, "local-%d", (int)getpid());
    c->job_id = job_id;
    return st_group_tuning_from_env(c);
}
