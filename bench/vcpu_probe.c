/* How much arithmetic the machine's CPUs give alone and all at once.
 *
 *   st-vcpu-probe [--cpus 0,1,...] [--seconds S]
 *
 * Each CPU in turn runs a loop of independent fused multiply-adds (the
 * widest vectors the machine has) for S seconds, alone; then all of them
 * run it at once (st_cpu_probe_best, include/shmtrain/cpuprobe.h); the best
 * of three tries of each counts.  On a real many-core server "together"
 * equals "alone".  On a virtual machine whose virtual CPUs share physical
 * cores (hyperthread siblings, or time-sliced on the host), "together"
 * drops, sometimes to half: that bounds what N instances can gain over one
 * for compute-bound training, whatever the software does.  bench/run-train.sh prints it
 * beside every end-to-end run (docs/benchmarks.md). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/cpuprobe.h"

#define MAX_CPUS 256

static void probe_or_die(const int *cpus, int n, double seconds, double *gflops)
{
    if (st_cpu_probe_best(cpus, n, seconds, 3, gflops) != ST_OK) {
        fprintf(stderr, "st-vcpu-probe: %s\n", st_last_error());
        exit(1);
    }
}

static int parse_cpus(const char *list, int *cpus)
{
    int n = 0;
    for (const char *p = list; *p && n < MAX_CPUS;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= CPU_SETSIZE || (*end && *end != ',')) {
            fprintf(stderr, "st-vcpu-probe: --cpus '%s': expected a comma-separated list of CPU numbers\n", list);
            exit(2);
        }
        cpus[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    int cpus[MAX_CPUS], n = 0;
    double seconds = 0.3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpus") && i + 1 < argc) {
            n = parse_cpus(argv[++i], cpus);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            char *end;
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds > 0 && seconds <= 60)) {
                fprintf(stderr, "st-vcpu-probe: --seconds '%s': expected a number in (0, 60]\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: st-vcpu-probe [--cpus 0,1,...] [--seconds S]\n");
            return 2;
        }
    }
    if (!n) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) != 0)
            return perror("st-vcpu-probe: sched_getaffinity"), 1;
        for (int c = 0; c < CPU_SETSIZE && n < MAX_CPUS; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
    }
    double alone[MAX_CPUS], all[MAX_CPUS], sum_alone = 0, sum_all = 0;
    for (int i = 0; i < n; i++) {
        probe_or_die(&cpus[i], 1, seconds, &alone[i]);
        sum_alone += alone[i];
    }
    probe_or_die(cpus, n, seconds, all);
    for (int i = 0; i < n; i++) {
        printf("cpu %d: %.0f GFLOPS alone, %.0f with all %d running\n", cpus[i], alone[i], all[i], n);
        sum_all += all[i];
    }
    printf("all %d CPUs at once give %.2fx one CPU's arithmetic (%d distinct cores would give %d.00x)\n", n,
           sum_all / (sum_alone / n), n, n);
    return 0;
}
