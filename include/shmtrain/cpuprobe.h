/* How much arithmetic CPUs give, alone and all at once.
 *
 * hwloc says how many cores a machine has; it cannot say whether they are
 * really there.  Virtual CPUs that are hyperthread siblings on the host, a
 * host that time-slices them, or a cgroup CPU quota give N "cores" less than
 * N cores' worth of arithmetic, and then no partitioning reaches N times one
 * instance.  The probe runs a loop of independent fused multiply-adds (f32,
 * the widest vectors the CPU has) in one child process per CPU, each pinned
 * to its CPU, all at once, and reports each one's GFLOPS.  Comparing a run on
 * one CPU with a run on all of them says what the machine gives.
 *
 * It forks (one child per CPU, reaped before it returns) and takes `seconds`
 * of wall time; nothing else in the process may depend on SIGCHLD meanwhile.
 */
#ifndef SHMTRAIN_CPUPROBE_H
#define SHMTRAIN_CPUPROBE_H

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gflops[i] = what OS CPU cpus[i] sustained while all n ran at once. */
st_status st_cpu_probe(const int *cpus, int n, double seconds, double *gflops);

/* The same, `tries` times; gflops gets the try with the largest sum.  A
 * shared host only takes speed away, so the best try is the least disturbed. */
st_status st_cpu_probe_best(const int *cpus, int n, double seconds, int tries, double *gflops);

/* Best of `tries`: the whole-machine figure (sum over cpus, all at once)
 * over the figure of cpus[0] alone.  n distinct cores give ~n. */
st_status st_cpu_probe_ratio(const int *cpus, int n, double seconds, int tries, double *one_gflops,
                             double *all_gflops);

#ifdef __cplusplus
}
#endif

#endif
