/* Causal attention's kernels alone, as the attention layer runs them: every
 * sample's every head a task, the tasks shared over the threads, each thread
 * with its own scratch.  Prints per pass the milliseconds a head takes on its
 * thread and the products' rate over all threads (the seven causal products
 * of t^2 hs / 2 multiply-adds a head: two forward, five backward with P
 * made again), so a machine where one head runs slower with every thread
 * busy than alone (shared caches, memory, a core's two hardware threads)
 * shows it: run it at --threads 1 and at all of them.
 *
 *   st-attention-bench [--t 1024] [--hs 64] [--tasks 24] [--threads N] [--reps 5]
 *                      [--fp32] [--matmul [--stripe 64] [--bf16-rows]] [--small|--small-bf16] [--offset BYTES]
 *
 * By default causal_bf16.c's AVX512-BF16 dot products; --fp32: causal.c's
 * fp32 tiles (as the layer runs them: P and dS whole in the thread's
 * scratch); --matmul: onednn_causal.c's oneDNN matmul primitives (AMX where
 * the CPU has it) in stripes of --stripe rows, on fp32 rows or, with
 * --bf16-rows, on bf16 ones (a bf16 net's edges); --matmul --fp32: the same
 * products on fp32 operands (an fp32 net's); --small: causal_small.c's
 * short-context fp32 kernel (AVX-512; T up to 256); --small-bf16: the same
 * with P and dS rounded to bf16 values, as a bf16 net's layer runs it (its
 * widening and narrowing of the rows, the dot products' too, not timed).
 * --offset: each thread's
 * scratch that many bytes past a cache line (the net's was 16 past one,
 * malloc's, until nn_lines_alloc; docs/benchmarks.md 0l).  Denormals are
 * flushed on every thread, as shmtrain and st-step-bench run. */
#define _GNU_SOURCE  /* clock_gettime under -std=c11 */
#include <ctype.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/causal.h"
#include "kernels/causal_bf16.h"
#include "kernels/causal_small.h"
#include "kernels/seq_kernels.h"
#include "onednn/onednn_causal.h"
#include "shmtrain/nn.h"

enum kernel { DOT, FP32, MATMUL, SMALL };

struct config {
    long t, hs, tasks, stripe, offset;
    int threads, reps;
    bool bf16_rows, fp32, small_bf16;
    enum kernel kernel;
    dn_causal *matmul;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse(struct config *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fp32") || !strcmp(a, "--matmul")) {  /* both: the matmul on fp32 operands */
            c->fp32 = c->fp32 || a[2] == 'f';
            c->kernel = a[2] == 'm' || c->kernel == MATMUL ? MATMUL : FP32;
            continue;
        }
        if (!strcmp(a, "--small") || !strcmp(a, "--small-bf16")) {
            c->kernel = SMALL;
            c->small_bf16 = a[7] == '-';
            continue;
        }
        if (!strcmp(a, "--bf16-rows")) {
            c->bf16_rows = true;
            continue;
        }
        if (!v) return fprintf(stderr, "st-attention-bench: %s needs a value\n", a), -1;
        long n = strtol(v, NULL, 10);
        if (!strcmp(a, "--offset")) {
            if (n < 0 || n > 63 || !isdigit((unsigned char)*v))
                return fprintf(stderr, "st-attention-bench: --offset %s: not a number of bytes in [0, 63]\n", v), -1;
            c->offset = n, i++;
            continue;
        }
        if (n < 1) return fprintf(stderr, "st-attention-bench: %s %s: not a positive number\n", a, v), -1;
        if (!strcmp(a, "--t")) c->t = n;
        else if (!strcmp(a, "--hs")) c->hs = n;
        else if (!strcmp(a, "--tasks")) c->tasks = n;
        else if (!strcmp(a, "--threads")) c->threads = (int)n;
        else if (!strcmp(a, "--reps")) c->reps = (int)n;
        else if (!strcmp(a, "--stripe")) c->stripe = n;
        else return fprintf(stderr, "st-attention-bench: unknown option %s\n", a), -1;
        i++;
    }
    return 0;
}

/* The fp32 head as onednn_seq.c runs it (P, then dS, then K^T in scratch). */
static void fp32_forward(float *y, long ldy, const float *q, long ld, long t, long hs, float *s)
{
    causal_scores(s, t, hs, 1.0f / sqrtf((float)hs), q, ld, q + ld / 3, ld, s + 2 * t * t);
    seq_causal_softmax(s, t);
    causal_mix(y, ldy, s, t, hs, q + 2 * (ld / 3), ld);
}

static void fp32_backward(float *dq, const float *dy, long ldy, const float *q, long ld, long t, long hs, float *s)
{
    const long c = ld / 3;
    float *ds = s + t * t, *kt = ds + t * t;
    causal_scores(s, t, hs, 1.0f / sqrtf((float)hs), q, ld, q + c, ld, kt);
    seq_causal_softmax(s, t);
    causal_scores(ds, t, hs, 1.0f, dy, ldy, q + 2 * c, ld, kt);
    seq_causal_softmax_bwd(ds, s, t, 1.0f / sqrtf((float)hs));
    causal_mix(dq, ld, ds, t, hs, q + c, ld);
    causal_mix_t(dq + c, ld, ds, t, hs, q, ld);
    causal_mix_t(dq + 2 * c, ld, s, t, hs, dy, ldy);
}

/* One pass over every task; returns seconds. */
static double pass(const struct config *c, int backward, float *qkv, float *dy, float *out, float *stats,
                   char *scratch, size_t per_thread)
{
    const long t = c->t, hs = c->hs, ld = 3 * hs, ldy = hs;
    const enum causal_small_operands ops = c->small_bf16 ? CAUSAL_SMALL_BF16 : CAUSAL_SMALL_FP32;
    const double t0 = now();
    int failed = 0;
#pragma omp parallel for schedule(static) num_threads(c->threads) reduction(| : failed)
    for (long k = 0; k < c->tasks; k++) {
        void *s = scratch + (size_t)omp_get_thread_num() * per_thread + c->offset;
        const float *q = qkv + k * t * ld, *g = dy + k * t * ldy;
        const int th = omp_get_thread_num();
        float *head_stats = stats + k * 2 * t;
        const bool b16 = c->bf16_rows;  /* then qkv, dy and out hold bf16 in their first halves */
        const dn_rows rq = {b16 ? (void *)((st_bf16 *)qkv + k * t * ld) : (void *)q, ld, b16};
        const dn_rows rdy = {b16 ? (void *)((st_bf16 *)dy + k * t * ldy) : (void *)g, ldy, b16};
        const dn_rows rout = {b16 ? (void *)((st_bf16 *)out + k * t * ld) : (void *)(out + k * t * ld),
                              backward ? ld : ldy, b16};
        if (c->kernel == MATMUL && backward)
            failed |= dn_causal_backward(c->matmul, th, rout, NULL, rdy, rq, head_stats, s) != ST_OK;
        else if (c->kernel == MATMUL)
            failed |= dn_causal_forward(c->matmul, th, rout, NULL, rq, head_stats, s) != ST_OK;
        else if (c->kernel == SMALL && backward)
            causal_small_backward(out + k * t * ld, out + k * t * ld + hs, out + k * t * ld + 2 * hs, ld, g, ldy, q,
                                  q + hs, q + 2 * hs, ld, t, hs, head_stats, s, ops);
        else if (c->kernel == SMALL)
            causal_small_forward(out + k * t * ld, ldy, q, q + hs, q + 2 * hs, ld, t, hs, head_stats, s, ops);
        else if (c->kernel == FP32 && backward)
            fp32_backward(out + k * t * ld, g, ldy, q, ld, t, hs, s);
        else if (c->kernel == FP32)
            fp32_forward(out + k * t * ld, ldy, q, ld, t, hs, s);
        else if (backward)
            causal_bf16_backward(out + k * t * ld, NULL, g, ldy, q, ld, t, hs, s);
        else
            causal_bf16_forward(out + k * t * ld, ldy, NULL, q, ld, t, hs, s);
    }
    if (failed)
        fprintf(stderr, "st-attention-bench: %s\n", st_last_error());
    return failed ? -1 : now() - t0;
}

/* The kernel timed, then forward's and backward's best time a head and rate. */
static void report(const struct config *cp, const double best[2])
{
    const struct config c = *cp;
    const long t = c.t, hs = c.hs;
    const double macs = (double)t * t * hs / 2, rounds = ceil((double)c.tasks / c.threads);
    char kernel[96] = "bf16 dot products (causal_bf16.c)";
    const char *small = c.small_bf16 ? "bf16-valued short-context heads (causal_small.c)"
                                     : "fp32 short-context heads (causal_small.c)";
    if (c.kernel != DOT)
        snprintf(kernel, sizeof kernel, "%s", c.kernel == SMALL  ? small
                                              : c.kernel == FP32 ? "fp32 tiles (causal.c)"
                                                  : c.fp32   ? "fp32 oneDNN matmul, "
                                                             : "bf16 oneDNN matmul, ");
    if (c.kernel == MATMUL)
        snprintf(kernel + strlen(kernel), sizeof kernel - strlen(kernel), "%s, stripes of %ld",
                 dn_causal_impl(c.matmul), c.stripe);
    printf("# %s, T %ld, head size %ld, %ld heads on %d threads (%.0f heads a thread at most), best of %d%s%s\n",
           kernel, t, hs, c.tasks, c.threads, rounds, c.reps, c.offset ? ", scratch off its cache line" : "",
           c.bf16_rows ? ", bf16 rows" : "");
    for (int b = 0; b < 2; b++)
        printf("%-8s %8.3f ms a head on its thread  %8.1f GFLOP/s over all threads\n", b ? "backward" : "forward",
               best[b] / rounds * 1e3, 2 * macs * (b ? 5 : 2) * c.tasks / best[b] / 1e9);
}

int main(int argc, char **argv)
{
    struct config c = {.t = 1024, .hs = 64, .tasks = 24, .stripe = 64, .threads = omp_get_max_threads(), .reps = 5};
    if (parse(&c, argc, argv))
        return 2;
    omp_set_num_threads(c.threads);
    st_nn_flush_denormals(true);  /* as shmtrain runs: a peaked softmax's P and its products would make denormals */
    if (c.kernel == DOT && !causal_bf16_available())
        return fprintf(stderr, "st-attention-bench: this CPU has no AVX512-BF16 (try --fp32 or --matmul)\n"), 1;
    if (c.kernel == SMALL && !causal_small_fits(c.t, c.hs))
        return fprintf(stderr, "st-attention-bench: --small takes AVX-512, T up to %d, head sizes 16, 32, 48, 64\n",
                       CAUSAL_SMALL_MAX_T), 1;
    const long t = c.t, hs = c.hs;
    dnnl_engine_t engine = NULL;
    if (c.kernel == MATMUL && (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
                               dn_causal_create(&c.matmul, engine, t, hs, c.stripe, c.threads, c.fp32) != ST_OK))
        return fprintf(stderr, "st-attention-bench: %s\n", st_last_error()), 1;
    const size_t bytes = c.kernel == FP32     ? (size_t)(2 * t * t + t * hs) * 4
                         : c.kernel == MATMUL ? dn_causal_scratch_bytes(c.matmul)
                         : c.kernel == SMALL  ? causal_small_scratch_bytes(t, hs)
                                              : causal_bf16_scratch_bytes(t, hs);
    const size_t per_thread = (bytes + 63) / 64 * 64;
    float *qkv = malloc((size_t)(c.tasks * t * 3 * hs) * 4), *dy = malloc((size_t)(c.tasks * t * hs) * 4);
    float *out = calloc((size_t)(c.tasks * t * 3 * hs), 4), *stats = calloc((size_t)(c.tasks * 2 * t), 4);
    char *scratch = aligned_alloc(64, per_thread * (size_t)c.threads + 64);
    if (!qkv || !dy || !out || !stats || !scratch)
        return fprintf(stderr, "st-attention-bench: out of memory\n"), 1;
    memset(scratch, 0, per_thread * (size_t)c.threads + 64);
    for (long i = 0; i < c.tasks * t * 3 * hs; i++)
        qkv[i] = (float)((i * 7919) % 1000 - 500) / 2000.0f;
    for (long i = 0; i < c.tasks * t * hs; i++)
        dy[i] = (float)((i * 104729) % 1000 - 500) / 1e5f;
    if (c.bf16_rows) {  /* in place: each bf16 lands below the float it was made from */
        for (long i = 0; i < c.tasks * t * 3 * hs; i++)
            ((st_bf16 *)qkv)[i] = st_bf16_from_f32(qkv[i]);
        for (long i = 0; i < c.tasks * t * hs; i++)
            ((st_bf16 *)dy)[i] = st_bf16_from_f32(dy[i]);
    }
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < c.reps + 1; r++)  /* the first pass warms the pages */
        for (int b = 0; b < 2; b++) {
            const double s = pass(&c, b, qkv, dy, out, stats, scratch, per_thread);
            if (s < 0)
                return 1;
            if (r > 0 && s < best[b])
                best[b] = s;
        }
    report(&c, best);
    free(qkv), free(dy), free(out), free(stats), free(scratch);
    dn_causal_destroy(c.matmul);
    if (engine)
        dnnl_engine_destroy(engine);
    return 0;
}
