/* How much arithmetic the machine's CPUs give alone and all at once.
 *
 *   st-vcpu-probe [--cpus 0,1,...] [--seconds S]
 *
 * Each CPU in turn runs a loop of independent fused multiply-adds (the
 * widest vectors the machine has) for S seconds, alone; then all of them
 * run it at once; the best of three tries of each counts.  On a real many-core server "together" equals "alone".
 * On a virtual machine whose virtual CPUs share physical cores (hyperthread
 * siblings, or time-sliced on the host), "together" drops, sometimes to
 * half: that bounds what N instances can gain over one for compute-bound
 * training, whatever the software does.  bench/run-train.sh prints it
 * beside every end-to-end run (docs/benchmarks.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <immintrin.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS 256

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* GFLOPS of one vector width: 12 independent accumulators hide the FMA
 * latency on two FMA ports; the sum goes to *sink so nothing is dropped. */
#define FMA_LOOP(name, isa, vec, lanes, set1, fmadd, add, storeu)                                   \
    __attribute__((target(isa))) static double name(double seconds, float *sink)                  \
    {                                                                                                \
        vec a[12];                                                                                   \
        for (int k = 0; k < 12; k++)                                                                 \
            a[k] = set1(0.1f + 0.01f * (float)k);                                                    \
        const vec b = set1(0.9999f), c = set1(1e-5f);                                                \
        long rounds = 0;                                                                             \
        const double t0 = now_s();                                                                   \
        double t;                                                                                    \
        do {                                                                                         \
            for (int i = 0; i < 100000; i++) {                                                       \
                _Pragma("GCC unroll 12") for (int k = 0; k < 12; k++) a[k] = fmadd(a[k], b, c);      \
            }                                                                                        \
            rounds++;                                                                                \
        } while ((t = now_s() - t0) < seconds);                                                      \
        vec s = a[0];                                                                                \
        for (int k = 1; k < 12; k++)                                                                 \
            s = add(s, a[k]);                                                                        \
        float v[lanes];                                                                              \
        storeu(v, s);                                                                                \
        *sink = v[0];                                                                                \
        return rounds * 100000.0 * 12 * 2 * (lanes) / t / 1e9;                                       \
    }

FMA_LOOP(fma_avx512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps)
FMA_LOOP(fma_avx2, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)

static double gflops_on(int cpu, double seconds)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        fprintf(stderr, "st-vcpu-probe: cannot run on CPU %d: %s\n", cpu, strerror(errno));
        exit(1);
    }
    float sink;
    double g = __builtin_cpu_supports("avx512f") ? fma_avx512(seconds, &sink) : fma_avx2(seconds, &sink);
    return sink == 12345.0f ? 0 : g;  /* keeps the result alive */
}

/* Runs the loop on every CPU of `cpus` at once, one process each. */
static void together(const int *cpus, int n, double seconds, double *out)
{
    int fds[MAX_CPUS][2];
    pid_t pids[MAX_CPUS];
    for (int i = 0; i < n; i++) {
        if (pipe(fds[i]) != 0 || (pids[i] = fork()) < 0) {
            fprintf(stderr, "st-vcpu-probe: %s\n", strerror(errno));
            exit(1);
        }
        if (pids[i] == 0) {
            double g = gflops_on(cpus[i], seconds);
            _exit(write(fds[i][1], &g, sizeof g) == (ssize_t)sizeof g ? 0 : 1);
        }
        close(fds[i][1]);
    }
    for (int i = 0; i < n; i++) {
        int status;
        if (read(fds[i][0], &out[i], sizeof out[i]) != (ssize_t)sizeof out[i] ||
            waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "st-vcpu-probe: the probe on CPU %d failed\n", cpus[i]);
            exit(1);
        }
        close(fds[i][0]);
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
    /* The best of three tries of each: a shared host only ever takes speed away. */
    double alone[MAX_CPUS] = {0}, all[MAX_CPUS] = {0}, best_all = 0, sum_alone = 0, sum_all = 0;
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < 3; t++) {
            double g;
            together(&cpus[i], 1, seconds, &g);
            alone[i] = g > alone[i] ? g : alone[i];
        }
        sum_alone += alone[i];
    }
    for (int t = 0; t < 3; t++) {
        double g[MAX_CPUS], sum = 0;
        together(cpus, n, seconds, g);
        for (int i = 0; i < n; i++)
            sum += g[i];
        if (sum > best_all) {
            best_all = sum;
            memcpy(all, g, sizeof(double) * (size_t)n);
        }
    }
    for (int i = 0; i < n; i++) {
        printf("cpu %d: %.0f GFLOPS alone, %.0f with all %d running\n", cpus[i], alone[i], all[i], n);
        sum_all += all[i];
    }
    printf("all %d CPUs at once give %.2fx one CPU's arithmetic (%d distinct cores would give %d.00x)\n", n,
           sum_all / (sum_alone / n), n, n);
    return 0;
}
