/* shmrun --print-mpirun (mpirun_cmd.h). */
#define _GNU_SOURCE
#include "mpirun_cmd.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int mpirun_hosts_count(const char *hosts)
{
    int n = 0;
    bool in_name = false;
    for (const char *p = hosts; p && *p; p++) {
        if (*p == ',') {
            if (!in_name)
                return 0;  /* an empty name */
            in_name = false;
        } else if (isalnum((unsigned char)*p) || *p == '.' || *p == '_' || *p == '-') {
            n += !in_name;
            in_name = true;
        } else {
            return 0;
        }
    }
    return in_name ? n : 0;
}

/* The program and its arguments, each quoted when the shell would split it. */
static void print_program(FILE *f, char *const *argv)
{
    if (!argv || !argv[0]) {
        fputs(" PROGRAM [ARGS...]", f);
        return;
    }
    for (char *const *a = argv; *a; a++) {
        bool plain = **a != '\0';
        for (const char *c = *a; *c && plain; c++)
            plain = isalnum((unsigned char)*c) || strchr("._-/=:,+@%", *c);
        if (plain) {
            fprintf(f, " %s", *a);
            continue;
        }
        fputs(" '", f);
        for (const char *c = *a; *c; c++)
            *c == '\'' ? fputs("'\\''", f) : fputc(*c, f);
        fputc('\'', f);
    }
}

static void print_env(FILE *f, const st_plan *p)
{
    fprintf(f, " -x OMP_NUM_THREADS=%d -x OMP_PLACES=%s -x OMP_PROC_BIND=close", p->inst[0].npus,
            p->logical ? "threads" : "cores");
}

void mpirun_print(FILE *f, const st_plan *p, const char *hosts, char *const *argv)
{
    const int nodes = mpirun_hosts_count(hosts), per_node = p->ninstances, ranks = nodes * per_node;
    bool even = true;
    for (int i = 1; i < p->ninstances; i++)
        even = even && p->inst[i].ncores == p->inst[0].ncores && p->inst[i].npus == p->inst[0].npus;
    fprintf(f, "# shmrun's plan on each of %d node%s of this shape: %d instance%s per node, %d rank%s\n", nodes,
            nodes == 1 ? "" : "s", per_node, per_node == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
    fprintf(f, "# %s\n", p->topology);
    if (even) {
        fprintf(f, "mpirun -np %d --host ", ranks);
        char *copy = strdup(hosts), *save = NULL;
        int k = 0;
        for (char *h = copy ? strtok_r(copy, ",", &save) : NULL; h; h = strtok_r(NULL, ",", &save))
            fprintf(f, "%s%s:%d", k++ ? "," : "", h, per_node);
        free(copy);
        fprintf(f, " --map-by ppr:%d:node:PE=%d%s --bind-to %s%s", per_node, p->inst[0].ncores,
                p->logical ? " --use-hwthread-cpus" : "", p->logical ? "hwthread" : "core",
                p->max_shared_by > 1 ? " --oversubscribe" : "");
        print_env(f, p);
        print_program(f, argv);
        fputc('\n', f);
        fprintf(f, "# or, to pin exactly the plan's PUs (its NUMA placement included), with the rankfile below:\n");
    } else {
        fprintf(f, "# instances differ in size: pin each with the rankfile below\n");
    }
    fprintf(f, "mpirun -np %d --rankfile shmrun.rankfile --mca rmaps_rank_file_physical 1%s", ranks,
            p->max_shared_by > 1 ? " --oversubscribe" : "");
    print_env(f, p);
    print_program(f, argv);
    fprintf(f, "\n# shmrun.rankfile\n");
    char *copy = strdup(hosts), *save = NULL;
    int rank = 0;
    for (char *h = copy ? strtok_r(copy, ",", &save) : NULL; h; h = strtok_r(NULL, ",", &save))
        for (int i = 0; i < p->ninstances; i++)
            fprintf(f, "rank %d=%s slot=%s\n", rank++, h, p->inst[i].pu_list);
    free(copy);
}
