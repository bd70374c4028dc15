/* Reading a topology (this machine, an XML export or a synthetic
 * description, with a bound on the last), what a report says of it, and
 * binding a process to one instance of a plan. */
#define _GNU_SOURCE
#include "topo_internal.h"

#include "shmtrain/json.h"

#include <errno.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int topo_count_type(hwloc_topology_t h, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(h, type);
    return n < 0 ? 0 : n;
}

static void make_summary(st_topo *t)
{
    char pus[128];
    hwloc_bitmap_list_snprintf(pus, sizeof pus, t->allowed);
    int np = topo_count_type(t->h, HWLOC_OBJ_PACKAGE), nn = topo_count_type(t->h, HWLOC_OBJ_NUMANODE);
    int nc = topo_count_type(t->h, HWLOC_OBJ_CORE), npu = topo_count_type(t->h, HWLOC_OBJ_PU);
    snprintf(t->summary, sizeof t->summary,
             "%d package%s, %d NUMA node%s, %d cores, %d PUs; usable PUs %s", np, np == 1 ? "" : "s",
             nn, nn == 1 ? "" : "s", nc, npu, pus);
}

/* The leaves a synthetic description would make: the product of its
 * levels' arities ("pack:2 numa:2 core:16 pu:2" -> 128), or SIZE_MAX once
 * past `limit`.  Memory children ("[numa]") add no leaves; a token this
 * does not understand counts as 1 and is left to hwloc to judge. */
static size_t synthetic_leaves(const char *desc, size_t limit)
{
    size_t leaves = 1;
    for (const char *p = desc; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        const char *tok = p;
        int depth = 0;
        while (*p && (depth > 0 || (*p != ' ' && *p != '\t' && *p != '\n'))) {
            depth += (*p == '(' || *p == '[') - (*p == ')' || *p == ']');
            p++;
        }
        if (p == tok || *tok == '[')
            continue;
        const char *colon = memchr(tok, ':', (size_t)(p - tok));
        const char *num = colon ? colon + 1 : tok;
        char *end;
        errno = 0;
        unsigned long long k = strtoull(num, &end, 10);
        if (end == num || (*end != '(' && end != p))
            continue;
        if (errno || k > limit || (k && leaves > limit / k))
            return SIZE_MAX;
        leaves *= k ? k : 1;
    }
    return leaves;
}

st_status st_topo_create(st_topo **out, st_topo_kind kind, const char *arg)
{
    if (kind == ST_TOPO_SYNTHETIC && arg && synthetic_leaves(arg, ST_TOPO_MAX_PUS) > ST_TOPO_MAX_PUS) {
        *out = NULL;
        return st_fail(ST_ERR_INVALID, "--synthetic '%s': more than %d PUs, more than any machine has "
                                       "(ST_TOPO_MAX_PUS)", arg, ST_TOPO_MAX_PUS);
    }
    *out = NULL;
    st_topo *t = calloc(1, sizeof *t);
    if (!t)
        return st_fail(ST_ERR_NOMEM, "topology: out of memory");
    st_status st = ST_OK;
    if (hwloc_topology_init(&t->h) != 0) {
        free(t);
        return st_fail(ST_ERR_BACKEND, "topology: hwloc_topology_init failed: %s", strerror(errno));
    }
    if (kind == ST_TOPO_XML && hwloc_topology_set_xml(t->h, arg) != 0) {
        st = st_fail(ST_ERR_IO, "--topology-xml %s: cannot use it as an hwloc XML topology: %s",
                     arg, strerror(errno));
        goto fail;
    }
    if (kind == ST_TOPO_SYNTHETIC && hwloc_topology_set_synthetic(t->h, arg) != 0) {
        st = st_fail(ST_ERR_INVALID,
                     "--synthetic '%s': not a valid hwloc synthetic description "
                     "(e.g. \"pack:2 numa:2 core:16 pu:2\")", arg);
        goto fail;
    }
    if (hwloc_topology_load(t->h) != 0) {
        st = st_fail(ST_ERR_BACKEND, "topology: hwloc could not load it: %s", strerror(errno));
        goto fail;
    }
    t->this_system = kind == ST_TOPO_MACHINE && hwloc_topology_is_thissystem(t->h);
    t->allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t->h));
    if (!t->allowed) {
        st = st_fail(ST_ERR_NOMEM, "topology: out of memory");
        goto fail;
    }
    if (t->this_system) {
        /* cgroups are already applied by hwloc; taskset/numactl -C is the
         * process binding, which the plan must respect too. */
        hwloc_bitmap_t bound = hwloc_bitmap_alloc();
        if (bound && hwloc_get_cpubind(t->h, bound, HWLOC_CPUBIND_PROCESS) == 0 &&
            hwloc_bitmap_intersects(bound, t->allowed))
            hwloc_bitmap_and(t->allowed, t->allowed, bound);
        hwloc_bitmap_free(bound);
    }
    make_summary(t);
    *out = t;
    return ST_OK;
fail:
    st_topo_destroy(t);
    return st;
}

void st_topo_destroy(st_topo *t)
{
    if (!t)
        return;
    hwloc_bitmap_free(t->allowed);
    hwloc_topology_destroy(t->h);
    free(t);
}


bool st_topo_is_this_system(const st_topo *t) { return t->this_system; }

static int count_usable(const st_topo *t, hwloc_obj_type_t type)
{
    int n = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_obj_by_type(t->h, type, o)) != NULL;)
        n += o->cpuset && hwloc_bitmap_intersects(o->cpuset, t->allowed);
    return n;
}

static long cache_bytes(const st_topo *t, hwloc_obj_type_t type)
{
    hwloc_obj_t o = hwloc_get_obj_by_type(t->h, type, 0);
    return o && o->attr ? (long)o->attr->cache.size : 0;
}

void st_topo_get_info(const st_topo *t, st_topo_info *out)
{
    memset(out, 0, sizeof *out);
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t->h, HWLOC_OBJ_PACKAGE, 0);
    const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    snprintf(out->cpu_model, sizeof out->cpu_model, "%s", model ? model : "");
    out->packages = count_usable(t, HWLOC_OBJ_PACKAGE);
    out->numa_nodes = count_usable(t, HWLOC_OBJ_NUMANODE);
    out->l3_caches = count_usable(t, HWLOC_OBJ_L3CACHE);
    out->cores = count_usable(t, HWLOC_OBJ_CORE);
    out->pus = hwloc_bitmap_weight(t->allowed);
    out->l1d_bytes = cache_bytes(t, HWLOC_OBJ_L1CACHE);
    out->l2_bytes = cache_bytes(t, HWLOC_OBJ_L2CACHE);
    out->l3_bytes = cache_bytes(t, HWLOC_OBJ_L3CACHE);
    unsigned v = hwloc_get_api_version();
    snprintf(out->hwloc_version, sizeof out->hwloc_version, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
}


/* ------------------------------------------------------------- binding -- */

st_status st_plan_bind(const st_topo *t, const st_plan *p, int rank, char *warning, size_t len)
{
    if (len)
        warning[0] = '\0';
    if (rank < 0 || rank >= p->ninstances)
        return st_fail(ST_ERR_INVALID, "bind: rank %d not in plan of %d", rank, p->ninstances);
    if (!t->this_system)
        return st_fail(ST_ERR_INVALID, "bind: the topology is not this machine's (XML or synthetic); "
                                       "use --dry-run");
    const st_plan_instance *in = &p->inst[rank];
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    st_status st = ST_OK;
    if (!cpus || !nodes) {
        st = st_fail(ST_ERR_NOMEM, "bind: out of memory");
        goto out;
    }
    if (in->bind_cpus[0]) {
        hwloc_bitmap_list_sscanf(cpus, in->bind_cpus);
        if (hwloc_set_cpubind(t->h, cpus, HWLOC_CPUBIND_PROCESS | HWLOC_CPUBIND_STRICT) != 0) {
            st = st_fail(ST_ERR_SYS, "bind: rank %d: binding to CPUs %s failed: %s", rank,
                         in->bind_cpus, strerror(errno));
            goto out;
        }
    }
    /* One NUMA node: nothing to choose, and containers often deny mbind. */
    if (topo_count_type(t->h, HWLOC_OBJ_NUMANODE) > 1) {
        hwloc_bitmap_list_sscanf(nodes, in->numa_list);
        if (hwloc_set_membind(t->h, nodes, HWLOC_MEMBIND_BIND,
                              HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) != 0)
            snprintf(warning, len,
                     "rank %d: memory binding to NUMA node %s denied (%s): its memory will "
                     "follow first touch instead", rank, in->numa_list, strerror(errno));
    }
out:
    hwloc_bitmap_free(cpus);
    hwloc_bitmap_free(nodes);
    return st;
}
