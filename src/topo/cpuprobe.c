/* The multiply-add probe (see cpuprobe.h): one forked child per CPU, pinned,
 * started together through a pipe, each reporting its GFLOPS through another. */
#define _GNU_SOURCE
#include "shmtrain/clock.h"
#include "shmtrain/cpuprobe.h"

#include <errno.h>
#include <immintrin.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* 12 independent accumulators hide the multiply-add latency on two ports;
 * the sum goes to *sink so that nothing is optimised away. */
#define FMA_LOOP(name, isa, vec, lanes, set1, fmadd, add, storeu)                                      \
    __attribute__((target(isa))) static double name(double seconds, float *sink)                     \
    {                                                                                                \
        vec a[12];                                                                                   \
        for (int k = 0; k < 12; k++)                                                                 \
            a[k] = set1(0.1f + 0.01f * (float)k);                                                    \
        const vec b = set1(0.9999f), c = set1(1e-5f);                                                \
        long rounds = 0;                                                                             \
        const double t0 = st_now_s();                                                                   \
        double t;                                                                                    \
        do {                                                                                         \
            for (int i = 0; i < 100000; i++) {                                                       \
                _Pragma("GCC unroll 12") for (int k = 0; k < 12; k++) a[k] = fmadd(a[k], b, c);      \
            }                                                                                        \
            rounds++;                                                                                \
        } while ((t = st_now_s() - t0) < seconds);                                                      \
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

/* SSE2 has no fused multiply-add: a multiply and an add, counted as two. */
static double fma_sse(double seconds, float *sink)
{
    __m128 a[12];
    for (int k = 0; k < 12; k++)
        a[k] = _mm_set1_ps(0.1f + 0.01f * (float)k);
    const __m128 b = _mm_set1_ps(0.9999f), c = _mm_set1_ps(1e-5f);
    long rounds = 0;
    const double t0 = st_now_s();
    double t;
    do {
        for (int i = 0; i < 100000; i++)
            for (int k = 0; k < 12; k++)
                a[k] = _mm_add_ps(_mm_mul_ps(a[k], b), c);
        rounds++;
    } while ((t = st_now_s() - t0) < seconds);
    *sink = _mm_cvtss_f32(a[0]) + _mm_cvtss_f32(a[11]);
    return rounds * 100000.0 * 12 * 2 * 4 / t / 1e9;
}

/* What a child reports; pipe writes this small are atomic. */
struct report {
    int index;
    double gflops;
};

/* In the child: pin, wait for the start signal, run, report. */
static void child(int index, int cpu, double seconds, int start_fd, int report_fd)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    double g = -1;
    char go;
    if (sched_setaffinity(0, sizeof set, &set) == 0 && read(start_fd, &go, 1) == 1) {
        float sink;
        g = __builtin_cpu_supports("avx512f") ? fma_avx512(seconds, &sink)
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? fma_avx2(seconds, &sink)
                                                                              : fma_sse(seconds, &sink);
        if (sink == 12345.0f)  /* keeps the result alive */
            g = 0;
    }
    const struct report r = {index, g};
    _exit(write(report_fd, &r, sizeof r) == (ssize_t)sizeof r && g > 0 ? 0 : 1);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* One byte each lets them all start together (none is still forking).
 * The caller holds the start pipe's read end until then: a child that
 * could not pin itself exits without reading, and with every reader
 * gone the write would raise SIGPIPE and kill the caller (seen in CI,
 * and within 2000 probes of an absent CPU). */
static st_status start_all(int start_fd, int n)
{
    char go[256];
    memset(go, 1, sizeof go);
    for (int left = n; left > 0;) {
        ssize_t w = write(start_fd, go, (size_t)(left < 256 ? left : 256));
        if (w <= 0)
            return st_fail(ST_ERR_SYS, "cpu probe: cannot start the children: %s", strerror(errno));
        left -= (int)w;
    }
    return ST_OK;
}

/* Waits for every child; the first failure is said unless st already says one. */
static st_status reap(const pid_t *pids, int spawned, const int *cpus, st_status st)
{
    for (int i = 0; i < spawned; i++) {
        int status = 0;
        pid_t r;
        while ((r = waitpid(pids[i], &status, 0)) < 0 && errno == EINTR)
            ;
        if (st == ST_OK && (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0))
            st = st_fail(ST_ERR_SYS, "cpu probe: the child on CPU %d failed", cpus[i]);
    }
    return st;
}

st_status st_cpu_probe(const int *cpus, int n, double seconds, double *gflops)
{
    if (n < 1 || !(seconds > 0))
        return st_fail(ST_ERR_INVALID, "cpu probe: needs at least one CPU and a positive duration");
    for (int i = 0; i < n; i++)
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
            return st_fail(ST_ERR_INVALID, "cpu probe: CPU %d does not exist", cpus[i]);
    int start[2] = {-1, -1}, report[2] = {-1, -1}, spawned = 0;
    st_status st = ST_OK;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    if (!pids)
        return st_fail(ST_ERR_NOMEM, "cpu probe: out of memory");
    if (pipe(start) != 0 || pipe(report) != 0) {
        st = st_fail(ST_ERR_SYS, "cpu probe: pipe: %s", strerror(errno));
        goto out;
    }
    for (; spawned < n; spawned++) {
        pids[spawned] = fork();
        if (pids[spawned] < 0) {
            st = st_fail(ST_ERR_SYS, "cpu probe: fork: %s", strerror(errno));
            goto out;
        }
        if (pids[spawned] == 0) {
            close(start[1]);
            close(report[0]);
            child(spawned, cpus[spawned], seconds, start[0], report[1]);
        }
    }
    close_fd(&report[1]);
    if ((st = start_all(start[1], n)) != ST_OK)
        goto out;
    close_fd(&start[0]);
    for (int i = 0; i < n; i++) {
        struct report r;
        if (read(report[0], &r, sizeof r) != (ssize_t)sizeof r || r.index < 0 || r.index >= n || !(r.gflops > 0)) {
            st = st_fail(ST_ERR_SYS, "cpu probe: a child could not run on its CPU (is it allowed here?)");
            goto out;
        }
        gflops[r.index] = r.gflops;
    }
out:
    close_fd(&start[1]);  /* children still waiting for a start byte now read EOF and exit */
    close_fd(&start[0]);
    close_fd(&report[0]);
    close_fd(&report[1]);
    st = reap(pids, spawned, cpus, st);
    free(pids);
    return st;
}

static double sum_of(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

st_status st_cpu_probe_best(const int *cpus, int n, double seconds, int tries, double *gflops)
{
    double *g = n > 0 ? malloc((size_t)n * sizeof *g) : NULL;
    if (n > 0 && !g)
        return st_fail(ST_ERR_NOMEM, "cpu probe: out of memory");
    st_status st = ST_OK;
    double best = -1;
    for (int t = 0; t < tries && st == ST_OK; t++)
        if ((st = st_cpu_probe(cpus, n, seconds, g)) == ST_OK && sum_of(g, n) > best) {
            best = sum_of(g, n);
            memcpy(gflops, g, (size_t)n * sizeof *g);
        }
    free(g);
    return st;
}

st_status st_cpu_probe_ratio(const int *cpus, int n, double seconds, int tries, double *one_gflops,
                             double *all_gflops)
{
    double *g = n > 0 ? malloc((size_t)n * sizeof *g) : NULL;
    if (n > 0 && !g)
        return st_fail(ST_ERR_NOMEM, "cpu probe: out of memory");
    st_status st = st_cpu_probe_best(cpus, 1, seconds, tries, one_gflops);
    if (st == ST_OK && (st = st_cpu_probe_best(cpus, n, seconds, tries, g)) == ST_OK)
        *all_gflops = sum_of(g, n);
    free(g);
    return st;
}
