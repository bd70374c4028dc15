/* How near its own kernels' speed a training step runs: the bound issue 25
 * names for a preset whose bf16 step falls short of its goal.
 *
 *   st-op-bound MODEL [--batch B] [--threads N] [--precision fp32|bf16] [--rounds R] [--list]
 *
 * Every operation of the step (each layer's forward and backward oneDNN
 * primitives and C steps, the conversions and weight reorders between
 * them, the logits' and the loss gradient's reorders) is timed twice:
 *   in the step  in the step's order, once each (median of 5 passes), and
 *   alone        9 times back to back, its operands warm: its lone kernel's
 *                time, as st-kernel-candidates times one layer.
 * The bound is the step with every operation at its lone time and the
 * rest (the loss, the optimizer writing the bf16 copies, the glue) as
 * measured:
 *
 *     bound = step - sum(in the step) + sum(alone),   share = bound / step.
 *
 * Issue 25's bound keeps the layers that stay fp32 at their fp32 time
 * scaled by the bytes they move; here they too run at their lone time in
 * the same net (never above their time in the step), so this bound is the
 * lower, stricter one.  A shared machine drifts within a minute: the step
 * and the operations are measured in alternation, `--rounds` times
 * (default 5), and the share is the median of the rounds' own shares.
 * --list prints each layer's operations in the step and alone (first
 * round), with what it computes in. */
#define _GNU_SOURCE
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "net.h"
#include "onednn/onednn_internal.h"
#include "shmtrain/dtype.h"
#include "op_timing.h"
#include "step_rig.h"

enum { STEPS = 11 };

static void die(const char *what)
{
    fprintf(stderr, "st-op-bound: %s: %s\n", what, st_last_error());
    exit(1);
}

static void list(st_net *n, const struct timed_list *l, int k)
{
    printf("%-5s %-10s %-8s %-9s %4s %12s %12s %8s\n", "node", "kind", "computes", "pass", "ops", "in step us",
           "alone us", "ratio");
    for (int i = 0; i < k; i++) {
        if (!l[i].ops->n)
            continue;
        const double s = op_timing_list_sum(&l[i], false), a = op_timing_list_sum(&l[i], true);
        const int j = l[i].node;
        const bool backward = l[i].backward;
        printf("%-5d %-10s %-8s %-9s %4d %12.1f %12.1f %8.2f\n", j,
               l[i].fused_loss ? "head+loss" : j >= 0 ? node_kind_name(n->x[j].kind) : j == -1 ? "(logits)" : "(loss)",
               j < 0 ? "-" : st_dtype_name(n->x[j].compute), backward ? "backward" : "forward", l[i].ops->n, s * 1e6,
               a * 1e6, a > 0 ? s / a : 0);
    }
}

struct options {
    const char *model;
    int batch, threads, rounds;
    bool show;
    st_dtype precision;
};

static int parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){.batch = 64, .threads = 1, .rounds = 5, .precision = ST_DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--batch") && v)
            o->batch = atoi(v), i++;
        else if (!strcmp(a, "--threads") && v)
            o->threads = atoi(v), i++;
        else if (!strcmp(a, "--rounds") && v)
            o->rounds = atoi(v), i++;
        else if (!strcmp(a, "--precision") && v && st_dtype_parse(v, &o->precision))
            i++;
        else if (!strcmp(a, "--list"))
            o->show = true;
        else if (a[0] != '-' && !o->model)
            o->model = a;
        else {
            fprintf(stderr, "usage: st-op-bound MODEL [--batch B] [--threads N] [--precision fp32|bf16] "
                            "[--rounds R] [--list]\n");
            return 2;
        }
    }
    if (!o->model || o->batch < 1 || o->threads < 1 || o->rounds < 1 || o->rounds > 99) {
        fprintf(stderr, "st-op-bound: a model, and a batch, threads and rounds (1-99) of at least 1\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    const char *model = o.model;
    const int batch = o.batch, threads = o.threads, rounds = o.rounds;
    const bool show = o.show;
    const st_dtype precision = o.precision;
    struct step_rig r;
    rig_create_in(&r, "st-op-bound", model, batch, threads, precision);
    st_net *n = r.net;
    struct timed_list *l = calloc(2 * (size_t)n->nx + 2, sizeof *l);
    if (!l)
        die("out of memory");
    const int k = op_timing_collect(n, r.labels, l, "st-op-bound");
    size_t P;
    st_net_params(n, &P);
    float *saved = malloc(P * sizeof(float));
    if (!saved)
        die("out of memory");
    memcpy(saved, r.params, P * sizeof(float));
    for (int w = 0; w < 3; w++)
        rig_step(&r);
    double share[99], step_ms[99], bound_ms[99];
    for (int round = 0; round < rounds; round++) {
        memcpy(r.params, saved, P * sizeof(float));  /* every round trains from the same weights */
        double steps[STEPS];
        for (int s = 0; s < STEPS; s++) {
            const double t0 = rig_now();
            rig_step(&r);
            steps[s] = rig_now() - t0;
        }
        const double step = op_timing_median(steps, STEPS);
        double in_step, alone;
        op_timing_round(n, l, k, &in_step, &alone);
        step_ms[round] = step * 1e3;
        bound_ms[round] = (step - in_step + alone) * 1e3;
        share[round] = bound_ms[round] / step_ms[round];
        if (round == 0 && show)
            list(n, l, k);
        printf("round %d: step %.3f ms; its operations %.3f ms in the step, %.3f alone; the rest %.3f; "
               "bound %.3f ms, share %.3f\n",
               round + 1, step * 1e3, in_step * 1e3, alone * 1e3, (step - in_step) * 1e3, bound_ms[round], share[round]);
    }
    printf("%s %s, batch %d, %d thread%s: step %.3f ms, bound %.3f ms, share %.3f (medians of %d rounds)\n", model,
           st_dtype_name(precision), batch, threads, threads > 1 ? "s" : "", op_timing_median(step_ms, rounds),
           op_timing_median(bound_ms, rounds), op_timing_median(share, rounds), rounds);
    op_timing_free(l, k);
    free(l);
    free(saved);
    rig_destroy(&r);
    return 0;
}
