/* shmtrain topology and partition planning (hwloc).
 *
 * A topology is read from this machine (cgroup- and taskset-aware: only the
 * CPUs this process may use count), from an hwloc XML export, or from a
 * synthetic description such as "pack:2 numa:2 core:16 pu:2", so a laptop can
 * show the plan for the real server.
 *
 * st_plan_create() is a pure function of (topology, request): it binds
 * nothing and reads nothing else, so it is unit-tested on synthetic machines.
 * The plan is plain data: print it, compare it, write it as JSON.
 * st_plan_bind() applies one instance's part of a plan to the calling process.
 */
#ifndef SHMTRAIN_TOPO_H
#define SHMTRAIN_TOPO_H

#include <stdbool.h>
#include <stdio.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_topo st_topo;

/* More PUs than any machine has (Linux's largest CPU count is 8192): a
 * synthetic description beyond this is a typo, and hwloc would build the
 * whole tree in memory before anything could check it. */
#define ST_TOPO_MAX_PUS 65536

typedef enum st_topo_kind {
    ST_TOPO_MACHINE = 0,   /* this machine; arg ignored */
    ST_TOPO_XML = 1,       /* arg: path of an `lstopo --of xml` export */
    ST_TOPO_SYNTHETIC = 2  /* arg: hwloc synthetic description */
} st_topo_kind;

/* Read a topology.  The caller owns *out (st_topo_destroy). */
st_status st_topo_create(st_topo **out, st_topo_kind kind, const char *arg);
void st_topo_destroy(st_topo *t);


/* What a report needs to describe the machine.  Counts are of objects that
 * hold at least one usable PU (cgroup, taskset); cache sizes are of the
 * first cache of each level, 0 where hwloc knows none. */
typedef struct st_topo_info {
    char cpu_model[128];  /* hwloc's CPUModel of the first package, or "" */
    int packages, numa_nodes, l3_caches, cores, pus;
    long l1d_bytes, l2_bytes, l3_bytes;
    char hwloc_version[16];
} st_topo_info;

void st_topo_get_info(const st_topo *t, st_topo_info *out);

/* True for ST_TOPO_MACHINE: only then can a plan be bound. */
bool st_topo_is_this_system(const st_topo *t);

typedef enum st_bind {
    ST_BIND_CORE = 0,  /* each instance to exactly its PUs (default) */
    ST_BIND_NUMA = 1,  /* each instance to all PUs of its NUMA node(s) */
    ST_BIND_NONE = 2   /* no CPU binding (memory binding still applies) */
} st_bind;

typedef struct st_plan_request {
    int ninstances;          /* 0 = derive (default: one per NUMA node) */
    int cores_per_instance;  /* 0 = derive */
    bool use_logical_cores;  /* also give instances the cores' hyperthreads */
    const char *cpu_list;    /* only these OS CPU ids ("0-3,8"), as taskset -c */
    const char *node_list;   /* only cores of these NUMA nodes (OS ids) */
    const char *allowed_cpus;/* simulate a cgroup/taskset restriction */
    bool refuse_cross_numa;  /* fail instead of warning when an instance must
                                span NUMA nodes */
    bool oversubscribe;      /* allow more instances (x cores) than usable
                                cores: instances then share cores, spread
                                evenly in topology order (mpirun's flag) */
    st_bind bind;
} st_plan_request;

typedef struct st_plan_instance {
    int rank;
    int ncores;          /* physical cores */
    int npus;            /* PUs it runs on (== ncores unless logical cores) */
    int *pus;            /* [npus] OS PU ids, ascending */
    char *pu_list;       /* the same as a list string, "0-3,8" */
    char *core_list;     /* logical core indexes, "0-3" */
    char *numa_list;     /* NUMA nodes (OS ids) its cores belong to */
    char *l3_list;       /* L3 caches (logical indexes) its cores share, or "-" */
    char *package_list;  /* packages (logical indexes) */
    char *bind_cpus;     /* CPU set to bind, per the bind granularity ("" = none) */
    bool cross_numa;     /* spans more than one NUMA node */
    int shared_by;       /* instances on its busiest core: 1 unless oversubscribed */
} st_plan_instance;

typedef struct st_plan {
    int ninstances;
    st_plan_instance *inst;     /* [ninstances], ranks in ring order */
    st_bind bind;
    bool logical;
    int max_shared_by;          /* 1, or how many instances share a core */
    int nleftover;              /* usable cores no instance got */
    char *leftover_pus;         /* their PUs, or "" */
    int nwarnings;
    char **warnings;            /* loud, one line each */
    char *topology;             /* "2 packages, 4 NUMA nodes, 64 cores, 128 PUs; usable PUs 0-127" */
} st_plan;

/* Plan instances on disjoint core sets (shared ones only when oversubscribe
 * allows and the request needs it).  A request that cannot be met fails
 * with ST_ERR_INVALID and a one-line message naming the flag (--ninstances,
 * --ncores-per-instance, --cores-list, --nodes-list, --allowed-cpus).
 * Synthetic topologies are refused beyond ST_TOPO_MAX_PUS processing units,
 * before hwloc builds them. */
st_status st_plan_create(st_plan **out, const st_topo *t, const st_plan_request *req);
void st_plan_destroy(st_plan *p);

/* Human-readable table, and JSON (one object). */
void st_plan_write_table(const st_plan *p, FILE *f);
void st_plan_write_json(const st_plan *p, FILE *f);

/* Bind the calling process (and so what it execs) to instance `rank`'s CPUs
 * and its NUMA memory.  A denied memory binding is not fatal: it is reported
 * in `warning` (empty when none).  A failed CPU binding is an error. */
st_status st_plan_bind(const st_topo *t, const st_plan *p, int rank, char *warning, size_t len);

#ifdef __cplusplus
}
#endif
#endif
