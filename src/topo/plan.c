/* The partition planner (the plan as a table and as JSON: plan_output.c).
 *
 * Planning works on "usable cores": hwloc Core objects (or PUs, on a
 * topology without cores) with at least one allowed PU, in hwloc's logical
 * order, which walks package -> NUMA node -> L3 -> core.  Ranks are numbered
 * in that order, so ring neighbours share the closest cache and NUMA node.
 */
#define _GNU_SOURCE
#include "topo_internal.h"

#include <errno.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ usable cores -- */

struct core {
    int logical;          /* core logical index */
    int numa;             /* first NUMA node (OS index) */
    int l3, package;      /* logical indexes, -1 if none */
    hwloc_bitmap_t pus;   /* the PUs an instance gets from this core */
};

struct cores {
    struct core *v;
    int n;
};

static void cores_free(struct cores *c)
{
    for (int i = 0; i < c->n; i++)
        hwloc_bitmap_free(c->v[i].pus);
    free(c->v);
    c->v = NULL;
    c->n = 0;
}

static int ancestor_index(hwloc_topology_t h, hwloc_obj_t o, hwloc_obj_type_t type)
{
    hwloc_obj_t a = hwloc_get_ancestor_obj_by_type(h, type, o);
    return a ? (int)a->logical_index : -1;
}

static st_status usable_cores(const st_topo *t, hwloc_const_bitmap_t allowed, bool logical,
                              struct cores *out)
{
    hwloc_obj_type_t type = topo_count_type(t->h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int total = topo_count_type(t->h, type);
    out->v = calloc((size_t)(total ? total : 1), sizeof *out->v);
    out->n = 0;
    if (!out->v)
        return st_fail(ST_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < total; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t->h, type, (unsigned)i);
        if (!hwloc_bitmap_intersects(o->cpuset, allowed))
            continue;
        struct core *c = &out->v[out->n++];
        c->logical = (int)o->logical_index;
        c->numa = o->nodeset ? hwloc_bitmap_first(o->nodeset) : 0;
        c->l3 = ancestor_index(t->h, o, HWLOC_OBJ_L3CACHE);
        c->package = ancestor_index(t->h, o, HWLOC_OBJ_PACKAGE);
        c->pus = hwloc_bitmap_alloc();
        if (!c->pus)
            return st_fail(ST_ERR_NOMEM, "plan: out of memory");
        hwloc_bitmap_and(c->pus, o->cpuset, allowed);
        if (!logical)
            hwloc_bitmap_only(c->pus, hwloc_bitmap_first(c->pus));
    }
    return ST_OK;
}

/* ------------------------------------------------------- string helpers -- */

static char *bitmap_string(hwloc_const_bitmap_t b)
{
    char *s = NULL;
    if (hwloc_bitmap_iszero(b))
        return strdup("");
    return hwloc_bitmap_list_asprintf(&s, b) < 0 ? NULL : s;
}

static char *int_list_string(const int *v, int n)
{
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    if (!b)
        return NULL;
    for (int i = 0; i < n; i++)
        if (v[i] >= 0)
            hwloc_bitmap_set(b, (unsigned)v[i]);
    char *s = hwloc_bitmap_iszero(b) ? strdup("-") : bitmap_string(b);
    hwloc_bitmap_free(b);
    return s;
}

/* Parse a "0-3,8" list for flag `flag`; every id must exist in `universe`. */
static st_status parse_list(const char *flag, const char *text, hwloc_const_bitmap_t universe,
                            const char *what, hwloc_bitmap_t out)
{
    for (const char *p = text; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == ',' || *p == '-'))
            return st_fail(ST_ERR_INVALID, "%s '%s': not a list of %s ids like 0-3,8", flag, text, what);
    if (!*text || hwloc_bitmap_list_sscanf(out, text) != 0 || hwloc_bitmap_iszero(out))
        return st_fail(ST_ERR_INVALID, "%s '%s': not a list of %s ids like 0-3,8", flag, text, what);
    if (hwloc_bitmap_isincluded(out, universe))
        return ST_OK;
    hwloc_bitmap_t extra = hwloc_bitmap_alloc();
    hwloc_bitmap_andnot(extra, out, universe);
    char *u = bitmap_string(universe);
    st_status st = st_fail(ST_ERR_INVALID, "%s '%s': %s %d is not in the usable set %s", flag, text,
                           what, hwloc_bitmap_first(extra), u ? u : "?");
    free(u);
    hwloc_bitmap_free(extra);
    return st;
}

/* ------------------------------------------------------------- planner -- */

struct planning {
    const st_topo *t;
    const st_plan_request *req;
    struct cores cores;
    int nnodes;          /* distinct NUMA nodes among usable cores */
    int node_ids[1024];
    int node_first[1024], node_count[1024];  /* slice of cores.v per node */
    bool *used;
    st_plan *plan;
};

static void group_by_node(struct planning *pl)
{
    pl->nnodes = 0;
    for (int i = 0; i < pl->cores.n; i++) {
        int k = pl->nnodes - 1;
        if (k < 0 || pl->node_ids[k] != pl->cores.v[i].numa) {
            if (pl->nnodes == 1024)
                break;
            k = pl->nnodes++;
            pl->node_ids[k] = pl->cores.v[i].numa;
            pl->node_first[k] = i;
            pl->node_count[k] = 0;
        }
        pl->node_count[k]++;
    }
}

static st_status restrict_allowed(const st_topo *t, const st_plan_request *req, hwloc_bitmap_t allowed)
{
    hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(t->h);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    st_status st = ST_OK;
    hwloc_bitmap_copy(allowed, t->allowed);
    if (req->allowed_cpus) {
        if ((st = parse_list("--allowed-cpus", req->allowed_cpus, all, "CPU", set)) != ST_OK)
            goto out;
        hwloc_bitmap_and(allowed, allowed, set);
    }
    if (req->cpu_list) {
        if ((st = parse_list("--cores-list", req->cpu_list, allowed, "CPU", set)) != ST_OK)
            goto out;
        hwloc_bitmap_and(allowed, allowed, set);
    }
    if (req->node_list) {
        if ((st = parse_list("--nodes-list", req->node_list,
                             hwloc_topology_get_topology_nodeset(t->h), "NUMA node", set)) != ST_OK)
            goto out;
        hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
        hwloc_cpuset_from_nodeset(t->h, cpus, set);
        hwloc_bitmap_and(allowed, allowed, cpus);
        hwloc_bitmap_free(cpus);
    }
    if (hwloc_bitmap_iszero(allowed))
        st = st_fail(ST_ERR_INVALID, "plan: no usable CPUs left after --allowed-cpus/--cores-list/"
                                     "--nodes-list (topology: %s)", t->summary);
out:
    hwloc_bitmap_free(set);
    return st;
}

static st_status warn(st_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static st_status warn(st_plan *p, const char *fmt, ...)
{
    char **w = realloc(p->warnings, (size_t)(p->nwarnings + 1) * sizeof *w);
    if (!w)
        return st_fail(ST_ERR_NOMEM, "plan: out of memory");
    p->warnings = w;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&w[p->nwarnings], fmt, ap);
    va_end(ap);
    if (n < 0)
        return st_fail(ST_ERR_NOMEM, "plan: out of memory");
    p->nwarnings++;
    return ST_OK;
}

/* Fill instance `rank` from the cores listed in idx[0..k). */
static st_status fill_instance(struct planning *pl, int rank, const int *idx, int k)
{
    st_plan_instance *in = &pl->plan->inst[rank];
    const struct cores *cs = &pl->cores;
    hwloc_bitmap_t pus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    int *logical = calloc((size_t)k, sizeof *logical), *l3 = calloc((size_t)k, sizeof *l3),
        *pkg = calloc((size_t)k, sizeof *pkg);
    st_status st = ST_OK;
    if (!pus || !nodes || !logical || !l3 || !pkg) {
        st = st_fail(ST_ERR_NOMEM, "plan: out of memory");
        goto out;
    }
    for (int i = 0; i < k; i++) {
        const struct core *c = &cs->v[idx[i]];
        hwloc_bitmap_or(pus, pus, c->pus);
        hwloc_bitmap_set(nodes, (unsigned)c->numa);
        logical[i] = c->logical;
        l3[i] = c->l3;
        pkg[i] = c->package;
        pl->used[idx[i]] = true;
    }
    in->rank = rank;
    in->ncores = k;
    in->npus = hwloc_bitmap_weight(pus);
    in->pus = calloc((size_t)in->npus, sizeof *in->pus);
    int j = 0, pu;
    hwloc_bitmap_foreach_begin(pu, pus) in->pus[j++] = pu;
    hwloc_bitmap_foreach_end();
    in->cross_numa = hwloc_bitmap_weight(nodes) > 1;
    in->shared_by = 1;
    in->pu_list = bitmap_string(pus);
    in->core_list = int_list_string(logical, k);
    in->numa_list = bitmap_string(nodes);
    in->l3_list = int_list_string(l3, k);
    in->package_list = int_list_string(pkg, k);
    if (pl->req->bind == ST_BIND_CORE) {
        in->bind_cpus = bitmap_string(pus);
    } else if (pl->req->bind == ST_BIND_NUMA) {
        hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
        hwloc_cpuset_from_nodeset(pl->t->h, cpus, nodes);
        hwloc_bitmap_and(cpus, cpus, pl->t->allowed);
        in->bind_cpus = bitmap_string(cpus);
        hwloc_bitmap_free(cpus);
    } else {
        in->bind_cpus = strdup("");
    }
    if (!in->pus || !in->pu_list || !in->core_list || !in->numa_list || !in->l3_list ||
        !in->package_list || !in->bind_cpus)
        st = st_fail(ST_ERR_NOMEM, "plan: out of memory");
out:
    free(logical);
    free(l3);
    free(pkg);
    hwloc_bitmap_free(pus);
    hwloc_bitmap_free(nodes);
    return st;
}

/* How many instances of `cpi` cores each node gets: fill the roomiest node
 * first, so instances spread over NUMA nodes (memory bandwidth) before they
 * pile up on one.  Returns how many instances did not fit in any node. */
static int share_out(const struct planning *pl, int n, int cpi, int *per_node)
{
    int placed = 0;
    for (int k = 0; k < pl->nnodes; k++)
        per_node[k] = 0;
    while (placed < n) {
        int best = -1, room_best = 0;
        for (int k = 0; k < pl->nnodes; k++) {
            int room = pl->node_count[k] / cpi - per_node[k];
            if (room > room_best)
                best = k, room_best = room;
        }
        if (best < 0)
            break;
        per_node[best]++;
        placed++;
    }
    return n - placed;
}

static st_status decide_counts(struct planning *pl, int *n, int *cpi)
{
    const st_plan_request *r = pl->req;
    const int total = pl->cores.n;
    *n = r->ninstances;
    *cpi = r->cores_per_instance;
    if (*n < 0)
        return st_fail(ST_ERR_INVALID, "--ninstances %d: must be at least 1", *n);
    if (*cpi < 0)
        return st_fail(ST_ERR_INVALID, "--ncores-per-instance %d: must be at least 1", *cpi);
    if (*n > total && !r->oversubscribe)
        return st_fail(ST_ERR_INVALID, "--ninstances %d: only %d usable cores (%s); --oversubscribe lets "
                       "instances share cores", *n, total, pl->t->summary);
    if (*n && *cpi && (long)*n * *cpi > total && !r->oversubscribe)
        return st_fail(ST_ERR_INVALID,
                       "--ninstances %d x --ncores-per-instance %d needs %ld cores; only %d are "
                       "usable (%s); --oversubscribe lets instances share cores", *n, *cpi,
                       (long)*n * *cpi, total, pl->t->summary);
    if (*cpi > total)
        return st_fail(ST_ERR_INVALID, "--ncores-per-instance %d: only %d usable cores (%s)", *cpi,
                       total, pl->t->summary);
    if (*n == 0 && *cpi == 0) {
        *n = pl->nnodes;  /* one instance per NUMA node, each with all its cores */
        return ST_OK;
    }
    if (*cpi == 0) {
        if (*n == pl->nnodes)
            return ST_OK;
        *cpi = total / *n ? total / *n : 1;  /* 0 only when oversubscribed */
    }
    if (*n == 0) {
        for (int k = 0; k < pl->nnodes; k++)
            *n += pl->node_count[k] / *cpi;
        if (*n == 0)
            *n = total / *cpi;
    }
    return ST_OK;
}

static st_status place_per_node(struct planning *pl)
{
    for (int k = 0; k < pl->nnodes; k++) {
        int idx[4096], m = 0;
        for (int i = 0; i < pl->node_count[k] && m < 4096; i++)
            idx[m++] = pl->node_first[k] + i;
        st_status st = fill_instance(pl, k, idx, m);
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

/* The first package with `need` unused cores, so an instance that must span
 * NUMA nodes at least stays in one socket; -1 if none has that many. */
static int roomiest_package(const struct planning *pl, int need)
{
    for (int i = 0; i < pl->cores.n; i++) {
        int pkg = pl->cores.v[i].package, free_cores = 0;
        if (pl->used[i])
            continue;
        for (int j = 0; j < pl->cores.n; j++)
            free_cores += !pl->used[j] && pl->cores.v[j].package == pkg;
        if (free_cores >= need)
            return pkg;
    }
    return -1;
}

static int by_first_core(const void *a, const void *b)
{
    return **(const int *const *)a - **(const int *const *)b;
}

static st_status check_cross_numa(struct planning *pl, const st_plan_instance *in)
{
    if (!in->cross_numa)
        return ST_OK;
    if (pl->req->refuse_cross_numa)
        return st_fail(ST_ERR_INVALID,
                       "--no-cross-numa: rank %d would span NUMA nodes %s (cores %s); ask for "
                       "fewer or smaller instances", in->rank, in->numa_list, in->core_list);
    return warn(pl->plan, "rank %d spans NUMA nodes %s (PUs %s): part of its memory "
                "traffic will be remote", in->rank, in->numa_list, in->pu_list);
}

/* --oversubscribe with more instance-cores than cores: instance r starts at
 * core r*total/n in topology order and takes cpi cores from there (wrapping),
 * so sharing is as even as it can be and neighbours in the ring share. */
static st_status place_shared(struct planning *pl, int n, int cpi)
{
    const int total = pl->cores.n;
    int *idx = calloc((size_t)cpi, sizeof *idx), *load = calloc((size_t)total, sizeof *load);
    st_status st = idx && load ? ST_OK : st_fail(ST_ERR_NOMEM, "plan: out of memory");
    for (int r = 0; r < n && st == ST_OK; r++) {
        int start = (int)((long)r * total / n);
        for (int i = 0; i < cpi; i++)
            load[idx[i] = (start + i) % total]++;
        if ((st = fill_instance(pl, r, idx, cpi)) == ST_OK)
            st = check_cross_numa(pl, &pl->plan->inst[r]);
    }
    for (int r = 0; r < n && st == ST_OK; r++) {
        st_plan_instance *in = &pl->plan->inst[r];
        int start = (int)((long)r * total / n);
        for (int i = 0; i < cpi; i++) {
            int shared = load[(start + i) % total];
            in->shared_by = shared > in->shared_by ? shared : in->shared_by;
        }
        pl->plan->max_shared_by = in->shared_by > pl->plan->max_shared_by ? in->shared_by : pl->plan->max_shared_by;
    }
    if (st == ST_OK)
        st = warn(pl->plan, "oversubscribed (--oversubscribe): %d instances x %d core%s on %d usable core%s; "
                  "up to %d instances share a core, so each runs at a fraction of its speed", n, cpi,
                  cpi == 1 ? "" : "s", total, total == 1 ? "" : "s", pl->plan->max_shared_by);
    free(idx);
    free(load);
    return st;
}

static st_status place_fixed(struct planning *pl, int n, int cpi)
{
    int per_node[1024], k_inst = 0;
    int *sets = calloc((size_t)n * (size_t)cpi, sizeof *sets);
    int **order = calloc((size_t)n, sizeof *order);
    st_status st = ST_OK;
    if (!sets || !order) {
        st = st_fail(ST_ERR_NOMEM, "plan: out of memory");
        goto out;
    }
    int straddlers = share_out(pl, n, cpi, per_node);
    for (int k = 0; k < pl->nnodes; k++)
        for (int a = 0; a < per_node[k]; a++, k_inst++)
            for (int i = 0; i < cpi; i++) {
                sets[k_inst * cpi + i] = pl->node_first[k] + a * cpi + i;
                pl->used[sets[k_inst * cpi + i]] = true;
            }
    /* Instances that fit no single node take leftover cores in topology
     * order, within one package when one has room. */
    for (int s = 0; s < straddlers; s++, k_inst++) {
        int pkg = roomiest_package(pl, cpi), m = 0;
        for (int i = 0; i < pl->cores.n && m < cpi; i++)
            if (!pl->used[i] && (pkg < 0 || pl->cores.v[i].package == pkg)) {
                sets[k_inst * cpi + m++] = i;
                pl->used[i] = true;
            }
    }
    /* Ranks follow the topology, so ring neighbours are close. */
    for (int r = 0; r < n; r++)
        order[r] = &sets[r * cpi];
    qsort(order, (size_t)n, sizeof *order, by_first_core);
    for (int r = 0; r < n && st == ST_OK; r++) {
        st = fill_instance(pl, r, order[r], cpi);
        if (st == ST_OK)
            st = check_cross_numa(pl, &pl->plan->inst[r]);
    }
out:
    free(sets);
    free(order);
    return st;
}

static st_status describe_leftover(struct planning *pl)
{
    hwloc_bitmap_t left = hwloc_bitmap_alloc();
    if (!left)
        return st_fail(ST_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < pl->cores.n; i++) {
        if (!pl->used[i]) {
            pl->plan->nleftover++;
            hwloc_bitmap_or(left, left, pl->cores.v[i].pus);
        }
    }
    pl->plan->leftover_pus = bitmap_string(left);
    hwloc_bitmap_free(left);
    if (!pl->plan->leftover_pus)
        return st_fail(ST_ERR_NOMEM, "plan: out of memory");
    if (pl->plan->nleftover)
        return warn(pl->plan, "%d usable core%s left unused (PUs %s)", pl->plan->nleftover,
                    pl->plan->nleftover == 1 ? "" : "s", pl->plan->leftover_pus);
    return ST_OK;
}

st_status st_plan_create(st_plan **out, const st_topo *t, const st_plan_request *req)
{
    *out = NULL;
    struct planning pl = {.t = t, .req = req};
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    st_status st;
    int n = 0, cpi = 0;
    if (!allowed)
        return st_fail(ST_ERR_NOMEM, "plan: out of memory");
    if (req->bind != ST_BIND_CORE && req->bind != ST_BIND_NUMA && req->bind != ST_BIND_NONE) {
        st = st_fail(ST_ERR_INVALID, "--bind: unknown granularity %d", (int)req->bind);
        goto out;
    }
    if ((st = restrict_allowed(t, req, allowed)) != ST_OK ||
        (st = usable_cores(t, allowed, req->use_logical_cores, &pl.cores)) != ST_OK)
        goto out;
    group_by_node(&pl);
    if ((st = decide_counts(&pl, &n, &cpi)) != ST_OK)
        goto out;
    pl.plan = calloc(1, sizeof *pl.plan);
    pl.used = calloc((size_t)pl.cores.n, sizeof *pl.used);
    if (!pl.plan || !pl.used || !(pl.plan->inst = calloc((size_t)n, sizeof *pl.plan->inst))) {
        st = st_fail(ST_ERR_NOMEM, "plan: out of memory");
        goto out;
    }
    pl.plan->ninstances = n;
    pl.plan->bind = req->bind;
    pl.plan->logical = req->use_logical_cores;
    pl.plan->topology = strdup(t->summary);
    pl.plan->max_shared_by = 1;
    if (cpi == 0)
        st = place_per_node(&pl);
    else if ((long)n * cpi > pl.cores.n)
        st = place_shared(&pl, n, cpi);
    else
        st = place_fixed(&pl, n, cpi);
    if (st == ST_OK)
        st = describe_leftover(&pl);
out:
    hwloc_bitmap_free(allowed);
    cores_free(&pl.cores);
    free(pl.used);
    if (st == ST_OK)
        *out = pl.plan;
    else
        st_plan_destroy(pl.plan);
    return st;
}

void st_plan_destroy(st_plan *p)
{
    if (!p)
        return;
    for (int i = 0; p->inst && i < p->ninstances; i++) {
        st_plan_instance *in = &p->inst[i];
        free(in->pus);
        free(in->pu_list);
        free(in->core_list);
        free(in->numa_list);
        free(in->l3_list);
        free(in->package_list);
        free(in->bind_cpus);
    }
    for (int i = 0; i < p->nwarnings; i++)
        free(p->warnings[i]);
    free(p->warnings);
    free(p->inst);
    free(p->leftover_pus);
    free(p->topology);
    free(p);
}
