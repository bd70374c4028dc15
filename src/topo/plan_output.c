/* A plan as a table (what shmrun prints before a run, and --dry-run) and as
 * JSON (--dry-run --json, and the job's log): only the public st_plan. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "shmtrain/json.h"
#include "shmtrain/topo.h"

static const char *bind_name(st_bind b)
{
    return b == ST_BIND_CORE ? "core" : b == ST_BIND_NUMA ? "numa" : "none";
}

static int widest(const st_plan *p, size_t field_offset, int at_least)
{
    int w = at_least;
    for (int i = 0; i < p->ninstances; i++) {
        const char *s = *(char *const *)((const char *)&p->inst[i] + field_offset);
        w = (int)strlen(s) > w ? (int)strlen(s) : w;
    }
    return w;
}

void st_plan_write_table(const st_plan *p, FILE *f)
{
    const int wp = widest(p, offsetof(st_plan_instance, pu_list), 3);
    const int wc = widest(p, offsetof(st_plan_instance, core_list), 8);
    const int wn = widest(p, offsetof(st_plan_instance, numa_list), 4);
    const int wl = widest(p, offsetof(st_plan_instance, l3_list), 2);
    fprintf(f, "topology: %s\n", p->topology);
    fprintf(f, "plan: %d instance%s, %s cores, bind %s\n", p->ninstances, p->ninstances == 1 ? "" : "s",
            p->logical ? "logical (hyperthreads included)" : "physical", bind_name(p->bind));
    fprintf(f, "%4s %5s  %-*s  %-*s  %-*s  %-*s  %s\n", "rank", "cores", wp, "PUs", wc, "core ids",
            wn, "NUMA", wl, "L3", "package");
    for (int i = 0; i < p->ninstances; i++) {
        const st_plan_instance *in = &p->inst[i];
        char shared[32] = "";
        if (in->shared_by > 1)
            snprintf(shared, sizeof shared, "  SHARED x%d", in->shared_by);
        fprintf(f, "%4d %5d  %-*s  %-*s  %-*s  %-*s  %s%s%s\n", in->rank, in->ncores, wp, in->pu_list,
                wc, in->core_list, wn, in->numa_list, wl, in->l3_list, in->package_list,
                in->cross_numa ? "  CROSS-NUMA" : "", shared);
    }
    fprintf(f, "leftover: %s\n", p->nleftover ? p->leftover_pus : "none");
    for (int i = 0; i < p->nwarnings; i++)
        fprintf(f, "WARNING: %s\n", p->warnings[i]);
}

void st_plan_write_json(const st_plan *p, FILE *f)
{
    st_json j;
    st_json_init(&j, f);
    st_json_object_begin(&j, NULL);
    st_json_string(&j, "topology", p->topology);
    st_json_int(&j, "ninstances", p->ninstances);
    st_json_string(&j, "bind", bind_name(p->bind));
    st_json_bool(&j, "logical_cores", p->logical);
    st_json_array_begin(&j, "instances");
    for (int i = 0; i < p->ninstances; i++) {
        const st_plan_instance *in = &p->inst[i];
        st_json_object_begin(&j, NULL);
        st_json_int(&j, "rank", in->rank);
        st_json_int(&j, "cores", in->ncores);
        st_json_array_begin(&j, "pus");
        for (int k = 0; k < in->npus; k++)
            st_json_int(&j, NULL, in->pus[k]);
        st_json_array_end(&j);
        st_json_string(&j, "pu_list", in->pu_list);
        st_json_string(&j, "core_ids", in->core_list);
        st_json_string(&j, "numa", in->numa_list);
        st_json_string(&j, "l3", in->l3_list);
        st_json_string(&j, "package", in->package_list);
        st_json_string(&j, "bind_cpus", in->bind_cpus);
        st_json_bool(&j, "cross_numa", in->cross_numa);
        st_json_int(&j, "shared_by", in->shared_by);
        st_json_object_end(&j);
    }
    st_json_array_end(&j);
    st_json_int(&j, "leftover_cores", p->nleftover);
    st_json_string(&j, "leftover_pus", p->leftover_pus);
    st_json_array_begin(&j, "warnings");
    for (int i = 0; i < p->nwarnings; i++)
        st_json_string(&j, NULL, p->warnings[i]);
    st_json_array_end(&j);
    st_json_object_end(&j);
    fputc('\n', f);
}
