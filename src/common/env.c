/* Reading where this process sits (include/shmtrain/env.h), whichever
 * launcher started it. */
#include "shmtrain/env.h"
#include "shmtrain/shmname.h"

#include <stddef.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One launcher's names.  NULL: the launcher does not set it. */
struct source {
    const char *launcher;
    const char *rank, *world, *local_rank, *local_world, *node, *nodes;
};

/* In order of precedence: the first whose rank or world is set is read. */
static const struct source SOURCES[] = {
    {"shmrun", ST_ENV_RANK, ST_ENV_WORLD_SIZE, ST_ENV_LOCAL_RANK, ST_ENV_LOCAL_WORLD_SIZE, NULL, NULL},
    {"mpirun", ST_ENV_OMPI_RANK, ST_ENV_OMPI_WORLD_SIZE, ST_ENV_OMPI_LOCAL_RANK, ST_ENV_OMPI_LOCAL_SIZE, NULL, NULL},
    {"srun", ST_ENV_SLURM_RANK, ST_ENV_SLURM_WORLD_SIZE, ST_ENV_SLURM_LOCAL_RANK, NULL, ST_ENV_SLURM_NODE,
     ST_ENV_SLURM_NODES},
    {"torchrun", ST_ENV_GENERIC_RANK, ST_ENV_GENERIC_WORLD_SIZE, ST_ENV_GENERIC_LOCAL_RANK,
     ST_ENV_GENERIC_LOCAL_WORLD_SIZE, ST_ENV_TORCH_NODE, NULL},
};
enum { SHMRUN = 0, MPIRUN = 1, SRUN = 2, NSOURCES = sizeof SOURCES / sizeof *SOURCES };

const char *st_env_text(const char *name)
{
    const char *v = name ? getenv(name) : NULL;
    return v && *v ? v : NULL;
}

bool st_env_set(const char *name) { return st_env_text(name) != NULL; }

static bool set(const char *name) { return st_env_set(name); }

bool st_env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

bool st_env_int(const char *name, int min, int *out)
{
    if (!set(name))
        return true;
    const char *v = getenv(name);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min || x > INT_MAX) {
        st_fail(ST_ERR_INVALID, "environment: %s='%s' is not a whole number >= %d", name, v, min);
        return false;
    }
    *out = (int)x;
    return true;
}

/* A whole number in [1, INT_MAX] at *p, digits only; advances *p. */
static bool count_at(const char **p, long *out)
{
    if (**p < '0' || **p > '9')
        return false;
    char *end;
    errno = 0;
    const long v = strtol(*p, &end, 10);
    if (errno || v < 1 || v > INT_MAX)
        return false;
    *p = end;
    *out = v;
    return true;
}

/* Slurm's "4(x2),3": tasks per node, run-length coded; the count of node
 * `node`, and in *nodes and *tasks how many nodes and tasks the list covers.
 * -1 for anything but that grammar (an empty element, a trailing comma, a
 * count past int). */
static int slurm_tasks_on_node(const char *spec, int node, long *nodes, long *tasks)
{
    long at = 0, found = -1, sum = 0;
    for (const char *p = spec;;) {
        long count, times = 1;
        if (!count_at(&p, &count))
            return -1;
        if (p[0] == '(') {
            p += 1;
            if (*p++ != 'x' || !count_at(&p, &times) || *p++ != ')')
                return -1;
        }
        if (found < 0 && node < at + times)
            found = count;
        if ((at += times) > INT_MAX || (sum += count * times) > INT_MAX)
            return -1;
        if (!*p)
            break;
        if (*p++ != ',')
            return -1;
    }
    *nodes = at;
    *tasks = sum;
    return (int)found;
}

static st_status read_source(int k, st_placement *pl)
{
    const struct source *s = &SOURCES[k];
    if (!set(s->rank) || !set(s->world))
        return st_fail(ST_ERR_INVALID, "environment (%s): %s is set but %s is not", s->launcher,
                       set(s->rank) ? s->rank : s->world, set(s->rank) ? s->world : s->rank);
    *pl = (st_placement){.node = -1, .nodes = -1};
    snprintf(pl->launcher, sizeof pl->launcher, "%s", s->launcher);
    if (!st_env_int(s->rank, 0, &pl->rank) || !st_env_int(s->world, 1, &pl->world))
        return ST_ERR_INVALID;
    if (pl->rank >= pl->world)
        return st_fail(ST_ERR_INVALID, "environment (%s): %s=%d is not below %s=%d", s->launcher, s->rank,
                       pl->rank, s->world, pl->world);
    pl->local_rank = pl->rank;  /* one node unless the launcher says otherwise */
    pl->local_world = pl->world;
    if (!st_env_int(s->local_rank, 0, &pl->local_rank) || !st_env_int(s->local_world, 1, &pl->local_world) ||
        !st_env_int(s->node, 0, &pl->node) || !st_env_int(s->nodes, 1, &pl->nodes))
        return ST_ERR_INVALID;
    if (pl->nodes > 0 && pl->node >= pl->nodes)
        return st_fail(ST_ERR_INVALID, "environment (%s): %s=%d is not below %s=%d", s->launcher, s->node, pl->node,
                       s->nodes, pl->nodes);
    if (k == SRUN && set(ST_ENV_SLURM_TASKS_PER_NODE)) {
        long listed = 0, tasks = 0;
        const char *spec = getenv(ST_ENV_SLURM_TASKS_PER_NODE);
        int here = slurm_tasks_on_node(spec, pl->node < 0 ? 0 : pl->node, &listed, &tasks);
        if (here < 1)
            return st_fail(ST_ERR_INVALID, "environment (srun): %s='%s' does not give node %d's task count (expected "
                                           "counts like 4(x2),3)", ST_ENV_SLURM_TASKS_PER_NODE, spec, pl->node);
        if (pl->nodes > 0 && listed != pl->nodes)
            return st_fail(ST_ERR_INVALID, "environment (srun): %s='%s' lists %ld nodes, %s=%d", ST_ENV_SLURM_TASKS_PER_NODE,
                           spec, listed, ST_ENV_SLURM_NODES, pl->nodes);
        if (tasks != pl->world)
            return st_fail(ST_ERR_INVALID, "environment (srun): %s='%s' lists %ld tasks, %s=%d", ST_ENV_SLURM_TASKS_PER_NODE,
                           spec, tasks, ST_ENV_SLURM_WORLD_SIZE, pl->world);
        if (listed > 1 && pl->node < 0)
            return st_fail(ST_ERR_INVALID, "environment (srun): %s='%s' lists %ld nodes but %s is not set",
                           ST_ENV_SLURM_TASKS_PER_NODE, spec, listed, ST_ENV_SLURM_NODE);
        pl->local_world = here;
    } else if (k == SRUN && pl->nodes > 1) {
        return st_fail(ST_ERR_INVALID, "environment (srun): %d nodes but no %s to say how many tasks each has",
                       pl->nodes, ST_ENV_SLURM_TASKS_PER_NODE);
    }
    if (pl->local_rank >= pl->local_world || pl->local_world > pl->world)
        return st_fail(ST_ERR_INVALID, "environment (%s): local rank %d of %d does not fit a world of %d",
                       s->launcher, pl->local_rank, pl->local_world, pl->world);
    return ST_OK;
}

/* shmrun under an MPI or Slurm job of several processes: each would start
 * its own gang under one job's names.  An outer launcher of one process
 * (srun -n1 shmrun ...) is fine.  mpirun and srun are not compared: mpirun
 * inside a Slurm allocation inherits the batch step's SLURM_PROCID. */
static st_status check_nesting(const st_placement *pl, int chosen)
{
    if (chosen != SHMRUN)
        return ST_OK;
    /* shmrun writes torchrun's names too (a user's kept): they must agree. */
    const struct source *torch = &SOURCES[NSOURCES - 1];
    st_placement named;
    if (set(torch->rank) && read_source(NSOURCES - 1, &named) == ST_OK &&
        (named.rank != pl->rank || named.world != pl->world))
        return st_fail(ST_ERR_INVALID, "environment: %s=%d %s=%d (shmrun) but %s=%d %s=%d (torchrun): the two "
                                       "launchers' variables disagree; unset one", ST_ENV_RANK, pl->rank,
                       ST_ENV_WORLD_SIZE, pl->world, torch->rank, named.rank, torch->world, named.world);
    for (int k = MPIRUN; k <= SRUN; k++) {
        st_placement outer;
        if (!set(SOURCES[k].rank) || read_source(k, &outer) != ST_OK || outer.world == 1)
            continue;
        return st_fail(ST_ERR_INVALID,
                       "environment: %s=%d %s=%d (shmrun) but %s=%d %s=%d (%s): shmrun inside a job of %d %s "
                       "processes; start shmtrain with %s directly, or shmrun alone",
                       ST_ENV_RANK, pl->rank, ST_ENV_WORLD_SIZE, pl->world, SOURCES[k].rank, outer.rank,
                       SOURCES[k].world, outer.world, SOURCES[k].launcher, outer.world, SOURCES[k].launcher,
                       SOURCES[k].launcher);
    }
    return ST_OK;
}

/* SHMTRAIN_NODE_SIZE=K: nodes of K consecutive ranks, on one machine. */
static st_status simulate_nodes(st_placement *pl)
{
    int k = 0;
    if (!set(ST_ENV_NODE_SIZE))
        return ST_OK;
    if (!st_env_int(ST_ENV_NODE_SIZE, 1, &k))
        return ST_ERR_INVALID;
    if (pl->world % k != 0)
        return st_fail(ST_ERR_INVALID, "environment: %s=%d does not divide the world of %d ranks", ST_ENV_NODE_SIZE,
                       k, pl->world);
    pl->local_world = k;
    pl->local_rank = pl->rank % k;
    pl->node = pl->rank / k;
    pl->nodes = pl->world / k;
    return ST_OK;
}

const char *st_env_other_launcher(void)
{
    for (int k = SHMRUN + 1; k < NSOURCES; k++)
        if (set(SOURCES[k].rank))
            return SOURCES[k].launcher;
    return NULL;
}

/* torchrun without a rendezvous id (no --standalone, no --rdzv-id) says
 * "none" to every job: its workers are its agent's children, so the agent's
 * pid tells one launch from another on this machine. */
static const char *torchrun_job_id(const char *run_id)
{
    static char job[32];
    if (strcmp(run_id, "none"))
        return run_id;
    snprintf(job, sizeof job, "torchrun-%d", (int)getppid());
    return job;
}

const char *st_env_shared_job_id(void)
{
    static const char *const names[] = {ST_ENV_JOB_ID, ST_ENV_TORCH_JOB, ST_ENV_SLURM_JOB, ST_ENV_PMIX_JOB,
                                        ST_ENV_OMPI_JOB};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        if (v && *v && !strchr(v, '/'))  /* it names a folder */
            return strcmp(names[i], ST_ENV_TORCH_JOB) ? v : torchrun_job_id(v);
    }
    return NULL;
}

const char *st_env_group_job_id(void)
{
    const char *job = getenv(ST_ENV_JOB_ID);
    if (job && *job)
        return job;
    job = getenv(ST_ENV_TORCH_JOB);  /* torchrun starts no shmrun, and names its job */
    return job && *job && set(ST_ENV_GENERIC_RANK) ? torchrun_job_id(job) : NULL;
}

st_status st_placement_from_env(st_placement *out)
{
    *out = (st_placement){.rank = 0, .world = 1, .local_rank = 0, .local_world = 1, .node = 0, .nodes = 1,
                          .launcher = "none"};
    for (int k = 0; k < NSOURCES; k++) {
        if (!set(SOURCES[k].rank) && !set(SOURCES[k].world))
            continue;
        st_placement pl;
        st_status st = read_source(k, &pl);
        if (st == ST_OK)
            st = check_nesting(&pl, k);
        if (st == ST_OK && pl.local_world == pl.world && pl.node < 0)
            pl.node = 0, pl.nodes = 1;  /* everything on one node */
        if (st == ST_OK)
            st = simulate_nodes(&pl);
        if (st == ST_OK)
            *out = pl;
        return st;
    }
    return simulate_nodes(out);
}

/* ------------------------------------------- readers for the modules -- */

bool st_env_bytes(const char *name, size_t never, size_t *field)
{
    if (*field || !set(name))
        return true;
    const char *v = getenv(name);
    if (never && !strcmp(v, "0")) {
        *field = never;
        return true;
    }
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-' || x == 0 || x > SIZE_MAX / 4) {
        st_fail(ST_ERR_INVALID, "environment: %s='%s' is not a positive number of bytes%s", name, v,
                never ? " (or 0: never)" : "");
        return false;
    }
    *field = (size_t)x;
    return true;
}

bool st_env_seconds(const char *name, double *field)
{
    if (*field > 0 || !set(name))
        return true;
    const char *v = getenv(name);
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x > 0) || x > 1e9) {
        st_fail(ST_ERR_INVALID, "environment: %s='%s' is not a positive number of seconds", name, v);
        return false;
    }
    *field = x;
    return true;
}
