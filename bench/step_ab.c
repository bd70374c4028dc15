/* A/B of one engine switch inside one process: net A is built with the
 * switches the environment sets, net B with VAR=VALUE on top (VAR one of
 * include/shmtrain/tuning.h's switches by its environment name, VALUE 1 or
 * 0), and the two run in alternating blocks of steps.  On a shared VM whose
 * speed drifts within seconds this compares like with like where two
 * separate runs cannot.
 *
 *   st-step-ab VAR=VALUE [--models mlp,lenet,cnn] [--threads 1,2] [--blocks 20]
 *              [--block-seconds 0.1] [--batch 64] [--precision fp32|bf16]
 *
 * Prints per model and thread count the median step time of A and of B over
 * the blocks, B/A, and in how many blocks B was the faster. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_rig.h"

enum { MAX_BLOCKS = 200 };

/* Mean milliseconds per step over one block of about `seconds`. */
static double block(struct step_rig *r, double seconds)
{
    int steps = 0;
    const double t0 = rig_now();
    do {
        rig_step(r);
        steps++;
    } while (steps < 3 || rig_now() - t0 < seconds);
    return (rig_now() - t0) / steps * 1e3;
}

static double median(double *v, int n)
{
    rig_sort(v, n);
    return v[n / 2];
}

struct ab_run {
    int blocks, batch;
    double seconds;
    st_dtype precision;
};

static void ab(const char *model, int threads, const st_nn_tuning *ta_cfg, const st_nn_tuning *tb_cfg,
               const struct ab_run *run)
{
    const int blocks = run->blocks;
    const double seconds = run->seconds;
    struct step_rig a, b;
    rig_create_tuned(&a, "st-step-ab", model, run->batch, threads, run->precision, ta_cfg);
    rig_create_tuned(&b, "st-step-ab", model, run->batch, threads, run->precision, tb_cfg);
    double ta[MAX_BLOCKS], tb[MAX_BLOCKS];
    int b_faster = 0;
    block(&a, seconds), block(&b, seconds);  /* warm-up */
    for (int i = 0; i < blocks; i++) {
        /* alternate which goes first, so neither always follows the other */
        if (i % 2) {
            tb[i] = block(&b, seconds);
            ta[i] = block(&a, seconds);
        } else {
            ta[i] = block(&a, seconds);
            tb[i] = block(&b, seconds);
        }
        b_faster += tb[i] < ta[i];
    }
    const double ma = median(ta, blocks), mb = median(tb, blocks);
    printf("%-7s %7d %10.3f %10.3f %7.3f %6d/%d\n", model, threads, ma, mb, mb / ma, b_faster, blocks);
    rig_destroy(&a);
    rig_destroy(&b);
}

static void usage(void)
{
    fprintf(stderr, "usage: st-step-ab VAR=VALUE [--models a,b] [--threads 1,2] [--blocks N] "
                    "[--block-seconds S] [--batch B] [--precision fp32|bf16]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strchr(argv[1], '=') || argv[1][0] == '=')
        usage();
    char var[128], models[256] = "mlp,lenet,cnn", threads[64] = "1,2";
    const char *value = strchr(argv[1], '=') + 1;
    snprintf(var, sizeof var, "%.*s", (int)(value - 1 - argv[1]), argv[1]);
    struct ab_run run = {.blocks = 20, .batch = 64, .seconds = 0.1, .precision = ST_DTYPE_F32};
    for (int i = 2; i < argc; i += 2) {  /* flag and value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(argv[i], "--models")) snprintf(models, sizeof models, "%s", v);
        else if (!strcmp(argv[i], "--threads")) snprintf(threads, sizeof threads, "%s", v);
        else if (!strcmp(argv[i], "--blocks")) run.blocks = atoi(v);
        else if (!strcmp(argv[i], "--block-seconds")) run.seconds = atof(v);
        else if (!strcmp(argv[i], "--batch")) run.batch = atoi(v);
        else if (strcmp(argv[i], "--precision") || !st_dtype_parse(v, &run.precision)) usage();
    }
    if (run.blocks < 1 || run.blocks > MAX_BLOCKS || run.seconds <= 0 || run.batch < 1) {
        fprintf(stderr, "st-step-ab: need 1 <= --blocks <= %d, --block-seconds > 0, --batch >= 1\n", MAX_BLOCKS);
        return 2;
    }
    st_nn_tuning ta, tb;
    st_nn_tuning_from_env(&ta);
    tb = ta;
    if (!st_nn_tuning_set(&tb, var, strcmp(value, "0") != 0)) {
        int n;
        const st_nn_switch *sw = st_nn_switches(&n);
        fprintf(stderr, "st-step-ab: %s is not an engine switch; they are:", var);
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %s", sw[i].env);
        fprintf(stderr, "\n");
        return 2;
    }
    st_nn_flush_denormals(true);
    printf("# A: the environment's switches; B: %s=%s too; medians over %d blocks, %s\n", var, value, run.blocks, st_dtype_name(run.precision));
    printf("%-7s %7s %10s %10s %7s %8s\n", "model", "threads", "A ms", "B ms", "B/A", "B faster");
    char *ms = NULL, *ts = NULL;
    for (char *m = strtok_r(models, ",", &ms); m; m = strtok_r(NULL, ",", &ms)) {
        char list[64];
        snprintf(list, sizeof list, "%s", threads);
        for (char *t = strtok_r(list, ",", &ts); t; t = strtok_r(NULL, ",", &ts)) {
            const int nt = atoi(t);
            if (nt < 1) {
                fprintf(stderr, "st-step-ab: --threads: '%s' is not a thread count\n", t);
                return 2;
            }
            ab(m, nt, &ta, &tb, &run);
        }
    }
    return 0;
}
