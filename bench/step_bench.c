/* Single-process training-step benchmark: forward + loss + backward + SGD
 * (momentum) for each preset at a fixed batch, at each OpenMP thread count
 * asked for (1 and 2 unless told), and the share of the step each layer kind
 * takes.  --recipe: the model's own optimizer and clip instead of SGD, as
 * the trainer runs them (gpt2: AdamW and a clip, the trainer's step 13%
 * over SGD's in docs/benchmarks.md 0s).
 *
 *   st-step-bench [--batch 64] [--rounds 5] [--seconds 1] [--models mlp,lenet,cnn]
 *                 [--threads 1,2] [--precision fp32|bf16] [--recipe] [--csv]
 *
 * Per step, also the conversions between fp32 and bf16 it ran, the bytes
 * they read, and its weight reorders (st_net_counters).
 *
 * Configurations run interleaved, round-robin, `rounds` times; the table
 * shows the median of the rounds' mean step times (a shared VM moves single
 * runs by tens of percent), and [min-max].
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_rig.h"

#define MAX_CONFIGS 16
#define MAX_ROUNDS 21

struct config {
    const char *model;
    int threads;
    double ms[MAX_ROUNDS];
    st_net_profile prof;   /* per step, summed over rounds */
    double optim_s;        /* per step, summed over rounds */
    st_net_counters per_step;  /* the step's conversions and weight reorders (the same every step) */
};

/* Mean milliseconds per step over about `seconds` of steps. */
static double measure(struct config *c, int batch, double seconds, st_dtype precision, bool recipe)
{
    struct step_rig r;
    rig_create_in(&r, "st-step-bench", c->model, batch, c->threads, precision);
    if (recipe)
        rig_use_recipe(&r);
    int steps = 0;
    double t0 = 0, optim_s = 0;
    for (int warm = -10;; warm++) {
        if (warm == 0) {
            st_net_profile_enable(r.net, true);
            st_net_counters_reset(r.net);
            t0 = rig_now();
        }
        const double o = rig_step(&r);
        if (warm >= 0)
            optim_s += o;
        if (warm >= 0 && ++steps >= 5 && rig_now() - t0 >= seconds)
            break;
    }
    double ms = (rig_now() - t0) / steps * 1e3;
    st_net_counters_get(r.net, &c->per_step);
    c->per_step.conversions /= (unsigned)steps;
    c->per_step.converted_bytes /= (unsigned)steps;
    c->per_step.weight_reorders /= (unsigned)steps;
    c->optim_s += optim_s / steps;
    st_net_profile pr;
    st_net_profile_get(r.net, &pr);
    c->prof.kinds = pr.kinds;
    for (int k = 0; k < pr.kinds; k++) {
        c->prof.names[k] = pr.names[k];
        c->prof.seconds[k] += pr.seconds[k] / steps;
    }
    rig_destroy(&r);
    return ms;
}

struct options {
    int batch, rounds;
    double seconds;
    bool csv, recipe;
    char models[256], threads[64];
    st_dtype precision;
};

static int parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){.batch = 64, .rounds = 5, .seconds = 1.0, .models = "mlp,lenet,cnn", .threads = "1,2",
                          .precision = ST_DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--csv")) o->csv = true;
        else if (!strcmp(argv[i], "--recipe")) o->recipe = true;
        else if (v && !strcmp(argv[i], "--batch")) o->batch = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--rounds")) o->rounds = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--seconds")) o->seconds = atof(v), i++;
        else if (v && !strcmp(argv[i], "--models")) snprintf(o->models, sizeof o->models, "%s", v), i++;
        else if (v && !strcmp(argv[i], "--threads")) snprintf(o->threads, sizeof o->threads, "%s", v), i++;
        else if (v && !strcmp(argv[i], "--precision") && (!strcmp(v, "fp32") || !strcmp(v, "bf16")))
            o->precision = strcmp(v, "bf16") ? ST_DTYPE_F32 : ST_DTYPE_BF16, i++;
        else {
            fprintf(stderr, "usage: st-step-bench [--batch B] [--rounds R] [--seconds S] [--models a,b] "
                            "[--threads 1,2] [--precision fp32|bf16] [--recipe] [--csv]\n");
            return 2;
        }
    }
    if (o->batch < 1 || o->rounds < 1 || o->rounds > MAX_ROUNDS || o->seconds <= 0) {
        fprintf(stderr, "st-step-bench: need --batch >= 1, 1 <= --rounds <= %d, --seconds > 0\n", MAX_ROUNDS);
        return 2;
    }
    return 0;
}

/* The configurations: every model at every thread count of --threads. */
static int make_configs(struct options *o, struct config *cfg, int *nc)
{
    int counts[8], ncounts = 0;
    for (char *save = NULL, *t = strtok_r(o->threads, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > 1024 || ncounts == 8) {
            fprintf(stderr, "st-step-bench: --threads: '%s' is not a list of up to 8 counts >= 1\n", t);
            return 2;
        }
        counts[ncounts++] = (int)v;
    }
    *nc = 0;
    for (char *save = NULL, *m = strtok_r(o->models, ",", &save); m && *nc + ncounts <= MAX_CONFIGS;
         m = strtok_r(NULL, ",", &save))
        for (int t = 0; t < ncounts; t++)
            cfg[(*nc)++] = (struct config){.model = m, .threads = counts[t]};
    return 0;
}

static void print_header(const struct config *first, bool csv)
{
    if (!csv) {
        printf("%-7s %7s %10s %17s %12s  %s\n", "model", "threads", "step ms", "[min-max]", "samples/s",
               "share of the step (mean over rounds)");
        return;
    }
    printf("model,threads,batch,step_ms_median,step_ms_min,step_ms_max,samples_per_s");
    for (int k = 0; k < first->prof.kinds; k++)
        printf(",%s_ms", first->prof.names[k]);
    printf(",optimizer_ms,other_ms,conversions,converted_mb,weight_reorders\n");
}

static void print_config(const struct config *c, int batch, int rounds, bool csv)
{
    double sorted[MAX_ROUNDS], mean = 0, accounted = c->optim_s;
    memcpy(sorted, c->ms, sizeof(double) * (size_t)rounds);
    rig_sort(sorted, rounds);
    for (int r = 0; r < rounds; r++)
        mean += c->ms[r] / rounds;
    for (int k = 0; k < c->prof.kinds; k++)
        accounted += c->prof.seconds[k];
    /* "other": what no op accounts for (stream waits, the logits copy). */
    const double med = sorted[rounds / 2], other_ms = mean - accounted / rounds * 1e3;
    if (csv) {
        printf("%s,%d,%d,%.3f,%.3f,%.3f,%.0f", c->model, c->threads, batch, med, sorted[0],
               sorted[rounds - 1], batch / med * 1e3);
        for (int k = 0; k < c->prof.kinds; k++)
            printf(",%.3f", c->prof.seconds[k] / rounds * 1e3);
        printf(",%.3f,%.3f,%llu,%.3f,%llu\n", c->optim_s / rounds * 1e3, other_ms, c->per_step.conversions,
               c->per_step.converted_bytes / 1e6, c->per_step.weight_reorders);
        return;
    }
    printf("%-7s %7d %10.3f %8.3f-%-8.3f %12.0f ", c->model, c->threads, med, sorted[0],
           sorted[rounds - 1], batch / med * 1e3);
    for (int k = 0; k <= c->prof.kinds + 1; k++) {
        const char *name = k < c->prof.kinds ? c->prof.names[k] : k == c->prof.kinds ? "optimizer" : "other";
        const double ms = k < c->prof.kinds ? c->prof.seconds[k] / rounds * 1e3
                          : k == c->prof.kinds ? c->optim_s / rounds * 1e3 : other_ms;
        if (ms / mean >= 0.005)
            printf(" %s %.0f%%", name, 100 * ms / mean);
    }
    printf("; per step %llu conversions (%.2f MB), %llu weight reorders\n", c->per_step.conversions,
           c->per_step.converted_bytes / 1e6, c->per_step.weight_reorders);
}

int main(int argc, char **argv)
{
    struct options o;
    struct config cfg[MAX_CONFIGS];
    int nc = 0;
    if (parse_args(argc, argv, &o) != 0 || make_configs(&o, cfg, &nc) != 0)
        return 2;
    st_nn_flush_denormals(true);
    for (int r = 0; r < o.rounds; r++)
        for (int i = 0; i < nc; i++)
            cfg[i].ms[r] = measure(&cfg[i], o.batch, o.seconds, o.precision, o.recipe);
    print_header(&cfg[0], o.csv);
    for (int i = 0; i < nc; i++)
        print_config(&cfg[i], o.batch, o.rounds, o.csv);
    return 0;
}
