/* How near the machine's matrix-multiply limit a model's training step runs.
 *
 *   st-gemm-bound MODEL [--batch B] [--threads N] [--seconds S] [--rounds R] [--list]
 *
 * Lists every matrix product of one training step of MODEL (a language
 * model: its linear layers and head forward, backward-data and
 * backward-weights, attention's six per sample and head), times each shape
 * alone as the engine computes it: dnnl_sgemm at N threads (a weight
 * gradient in the form dn_wgrad_form picks, the transposes left out), and
 * attention's
 * products with causal.c's kernels on one thread (as the engine runs them,
 * divided by N; they compute the lower triangle, t (t + 1) / 2 of the t^2
 * scores, and the FLOPs counted are those), and prints the step's matmul
 * FLOPs, the time they take at those measured rates (the bound: the step
 * cannot be faster than its matrix products), a 1024^3 product's rate for
 * reference, and the engine's whole step timed the same way, so
 *
 *     share of the limit = bound / step.
 *
 * A shared machine's speed drifts by tens of percent within a minute, so
 * the bound and the step are measured in alternation, `--rounds` times
 * (default 3), and the share is the median of the rounds' own ratios.
 *
 * --list prints each product's shape, count, rate and share of the bound
 * (from the first round).
 *
 * What the issue calls "the step's FLOPs against the measured matmul rate". */
#define _GNU_SOURCE
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/causal.h"
#include "model/model.h"
#include "onednn/onednn_internal.h"
#include "step_rig.h"

/* Attention's products, by the causal.c kernel that computes them. */
enum causal_kind { SGEMM, SCORES, MIX, MIX_T };

struct product {
    const char *what;
    char ta, tb;
    long m, n, k, count;   /* count: how many per step */
    bool serial;           /* run per sample and head on one thread each */
    enum causal_kind causal; /* SGEMM: the whole m x n x k; else t = m, d = n, the lower triangle */
};

static double product_flops(const struct product *p)
{
    if (p->causal == SGEMM)
        return 2.0 * p->m * p->n * p->k;
    return 2.0 * (p->m * (p->m + 1) / 2) * p->n;  /* t (t + 1) / 2 scores, d each */
}

static void run_causal(const struct product *p, float *a, float *b, float *c, float *scratch)
{
    const long t = p->m, d = p->n;
    if (p->causal == SCORES)
        causal_scores(c, t, d, 1.0f, a, d, b, d, scratch);
    else if (p->causal == MIX)
        causal_mix(c, d, a, t, d, b, d);
    else
        causal_mix_t(c, d, a, t, d, b, d);
}

static double time_sgemm(const struct product *p, int threads, double seconds)
{
    long a_rows = p->ta == 'N' ? p->m : p->k, a_cols = p->ta == 'N' ? p->k : p->m;
    long b_rows = p->tb == 'N' ? p->k : p->n, b_cols = p->tb == 'N' ? p->n : p->k, c_size = p->m * p->n;
    if (p->causal != SGEMM)  /* t x t or t x d each: room for either */
        a_rows = b_rows = p->m, a_cols = b_cols = p->m + p->n, c_size = p->m * (p->m + p->n);
    float *a = malloc((size_t)(a_rows * a_cols) * sizeof(float)), *b = malloc((size_t)(b_rows * b_cols) * sizeof(float)),
          *c = malloc((size_t)c_size * sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "st-gemm-bound: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < a_rows * a_cols; i++)
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (long i = 0; i < b_rows * b_cols; i++)
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    float *scratch = malloc((size_t)(p->m * p->n + 1) * sizeof(float));
    if (!scratch) {
        fprintf(stderr, "st-gemm-bound: out of memory\n");
        exit(1);
    }
    omp_set_num_threads(p->serial ? 1 : threads);
    int reps = 0;
    double t0 = rig_now(), t;
    do {
        if (p->causal != SGEMM)
            run_causal(p, a, b, c, scratch);
        else if (dnnl_sgemm(p->ta, p->tb, p->m, p->n, p->k, 1.0f, a, a_cols, b, b_cols, 0.0f, c, p->n) !=
                 dnnl_success) {
            fprintf(stderr, "st-gemm-bound: dnnl_sgemm failed\n");
            exit(1);
        }
        reps++;
        t = rig_now() - t0;
    } while (reps < 3 || t < seconds);
    free(a), free(b), free(c), free(scratch);
    omp_set_num_threads(threads);
    return t / reps;
}

/* The step's products, from the model's layers. */
static int list_products(const st_model *m, int batch, struct product *v, int cap)
{
    int np = 0;
    for (int i = 0; i < m->n && np + 6 <= cap; i++) {
        const struct node *nd = &m->nodes[i];
        const long rows = (long)batch * node_positions(nd);
        if (nd->kind == NODE_LINEAR || nd->kind == NODE_HEAD) {
            const long in = nd->kind == NODE_HEAD ? m->nodes[nd->embed].c : nd->fan_in, out = nd->c;
            v[np++] = (struct product){"linear fwd", 'N', 'T', rows, out, in, 1, false, SGEMM};
            v[np++] = (struct product){"linear bwd-data", 'N', 'N', rows, in, out, 1, false, SGEMM};
            const enum dn_wgrad_form form = nd->kind == NODE_LINEAR ? dn_wgrad_form(rows, in, out, false) : DN_WGRAD_TN;
            v[np++] = (struct product){"linear bwd-weights", form == DN_WGRAD_TN ? 'T' : 'N',
                                       form == DN_WGRAD_NT ? 'T' : 'N', out, in, rows, 1, false, SGEMM};
        } else if (nd->kind == NODE_ATTENTION) {
            const long t = nd->t, hs = nd->c / nd->heads, per = (long)batch * nd->heads;
            v[np++] = (struct product){"attention QK^T", 'N', 'T', t, hs, t, per, true, SCORES};
            v[np++] = (struct product){"attention PV", 'N', 'N', t, hs, t, per, true, MIX};
            v[np++] = (struct product){"attention dP", 'N', 'T', t, hs, t, per, true, SCORES};
            v[np++] = (struct product){"attention dQ", 'N', 'N', t, hs, t, per, true, MIX};
            v[np++] = (struct product){"attention dK", 'T', 'N', t, hs, t, per, true, MIX_T};
            v[np++] = (struct product){"attention dV", 'T', 'N', t, hs, t, per, true, MIX_T};
        }
    }
    return np;
}

struct options {
    const char *model;
    int batch, threads, rounds;
    double seconds;
    bool list;
};

static int usage(void)
{
    fprintf(stderr, "usage: st-gemm-bound MODEL [--batch B] [--threads N] [--seconds S] [--rounds R] [--list]\n");
    return 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){.batch = 12, .threads = 1, .rounds = 3, .seconds = 0.2};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(argv[i], "--batch")) o->batch = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--threads")) o->threads = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--seconds")) o->seconds = atof(v), i++;
        else if (v && !strcmp(argv[i], "--rounds")) o->rounds = atoi(v), i++;
        else if (!strcmp(argv[i], "--list")) o->list = true;
        else if (argv[i][0] != '-' && !o->model) o->model = argv[i];
        else return usage();
    }
    return !o->model || o->batch < 1 || o->threads < 1 || o->rounds < 1 || o->rounds > 32 ? usage() : 0;
}

int main(int argc, char **argv)
{
    struct options o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    const char *model = o.model;
    const int batch = o.batch, threads = o.threads, rounds = o.rounds;
    const double seconds = o.seconds;
    const bool list = o.list;
    struct step_rig r;
    rig_create(&r, "st-gemm-bound", model, batch, threads);
    struct product v[512];
    const int np = list_products(r.model, batch, v, 512);
    double flops = 0;
    for (int i = 0; i < np; i++)
        flops += product_flops(&v[i]) * v[i].count;
    for (int k = 0; k < 3; k++)
        rig_step(&r);
    double ratio[32], bounds[32], step_ms[32];
    for (int round = 0; round < rounds; round++) {
        double bound = 0;
        for (int i = 0; i < np; i++) {
            const double one = time_sgemm(&v[i], threads, seconds / 4), per_step = one * v[i].count /
                                                                                  (v[i].serial ? threads : 1);
            bound += per_step;
            if (list && round == 0 && v[i].causal != SGEMM)
                printf("  %-22s causal t %5ld d %5ld x %4ld: %6.1f GFLOP/s, %7.3f ms per step\n", v[i].what, v[i].m,
                       v[i].n, v[i].count, 1e-9 * product_flops(&v[i]) / one, per_step * 1e3);
            else if (list && round == 0)
                printf("  %-22s %c%c m %5ld n %5ld k %5ld x %4ld: %6.1f GFLOP/s, %7.3f ms per step\n", v[i].what,
                       v[i].ta, v[i].tb, v[i].m, v[i].n, v[i].k, v[i].count, 1e-9 * product_flops(&v[i]) / one,
                       per_step * 1e3);
        }
        double steps[64];
        int ns = 0;
        for (double t0 = rig_now(); ns < 64 && (ns < 5 || rig_now() - t0 < seconds * 5);) {
            const double s0 = rig_now();
            rig_step(&r);
            steps[ns++] = rig_now() - s0;
        }
        rig_sort(steps, ns);
        bounds[round] = bound * 1e3;
        step_ms[round] = steps[ns / 2] * 1e3;
        ratio[round] = bound / steps[ns / 2];
        printf("  round %d: bound %.1f ms (%.1f GFLOP/s), step %.1f ms: %.0f%%\n", round + 1, bounds[round],
               flops / bound / 1e9, step_ms[round], 100 * ratio[round]);
    }
    const struct product big = {"1024^3", 'N', 'N', 1024, 1024, 1024, 1, false, SGEMM};
    const double big_rate = 2.0 * 1024 * 1024 * 1024 / time_sgemm(&big, threads, seconds) / 1e9;
    rig_sort(ratio, rounds);
    printf("model %s, batch %d, %d thread%s: %d matrix products, %.2f GFLOP per step; a 1024^3 sgemm runs at "
           "%.1f GFLOP/s\n", model, batch, threads, threads == 1 ? "" : "s", np, flops / 1e9, big_rate);
    printf("  the engine's step at %.0f%% of the matmul limit (median of %d rounds; %.0f-%.0f%%)\n",
           100 * ratio[rounds / 2], rounds, 100 * ratio[0], 100 * ratio[rounds - 1]);
    rig_destroy(&r);
    return 0;
}
