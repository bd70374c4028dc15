/* sweep reports: CSV, JSON, markdown and the plots' data and gnuplot script.
 * Nothing here has side effects beyond the FILE * it is given. */
#define _GNU_SOURCE
#include "sweep.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/json.h"


/* ------------------------------------------------------------- writers -- */

/* Numbers as text; "" (CSV), "null" (JSON) or "-" (tables) when missing. */
static const char *num(char *buf, size_t len, double v, int decimals, const char *missing)
{
    if (isnan(v) || isinf(v))
        snprintf(buf, len, "%s", missing);
    else
        snprintf(buf, len, "%.*f", decimals, v);
    return buf;
}

static void csv_field(FILE *f, const char *s)
{
    bool quote = strpbrk(s, ",\"\n") != NULL;
    if (!quote) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* A run's measures, once: runs.csv's columns and report.json's keys, in
 * this order, each with its decimals (NAN: not measured). */
struct measure {
    const char *key;
    size_t at;
    int decimals;
};
#define RUN(key, member, decimals) {key, offsetof(struct sweep_run, member), decimals}
static const struct measure RUN_MEASURES[] = {
    RUN("samples_per_s", samples_per_s, 1), RUN("step_ms", step_ms, 3), RUN("compute_ms", compute_ms, 3),
    RUN("allreduce_ms", allreduce_ms, 3), RUN("wait_ms", wait_ms, 3), RUN("other_ms", other_ms, 3),
    RUN("time_to_target_s", time_to_target_s, 2), RUN("final_accuracy", final_accuracy, 4),
    RUN("final_loss", final_loss, 4), RUN("peak_rss_mb_max", rss_max_mb, 1),
    RUN("peak_rss_mb_total", rss_total_mb, 1), RUN("wall_s", wall_s, 2),
};
#undef RUN
/* A setting's medians (and worst memory) beside its statistics. */
#define SUMMARY(key, member, decimals) {key, offsetof(struct sweep_summary, member), decimals}
static const struct measure SUMMARY_MEASURES[] = {
    SUMMARY("compute_ms", compute_ms, 3), SUMMARY("allreduce_ms", allreduce_ms, 3), SUMMARY("wait_ms", wait_ms, 3),
    SUMMARY("other_ms", other_ms, 3), SUMMARY("final_accuracy", final_accuracy, 4),
    SUMMARY("final_loss", final_loss, 4), SUMMARY("peak_rss_mb_max", rss_max_mb, 1),
    SUMMARY("peak_rss_mb_total", rss_total_mb, 1),
};
#undef SUMMARY
#define COUNT(table) (sizeof table / sizeof *table)

static double measured(const struct measure *m, const void *record)
{
    return *(const double *)(const void *)((const char *)record + m->at);
}

static void json_measures(st_json *j, const struct measure *m, size_t n, const void *record)
{
    for (size_t i = 0; i < n; i++) {
        char format[8];
        snprintf(format, sizeof format, "%%.%df", m[i].decimals);
        st_json_number(j, m[i].key, measured(&m[i], record), format);
    }
}

void sweep_write_csv(FILE *f, const struct sweep_setting *s, const struct sweep_run *runs, int nruns)
{
    fprintf(f, "setting,instances,cores_per_instance,system,repeat,order,ok,");
    for (size_t k = 0; k < COUNT(RUN_MEASURES); k++)
        fprintf(f, "%s,", RUN_MEASURES[k].key);
    fprintf(f, "steps,precision,error\n");
    for (int i = 0; i < nruns; i++) {
        const struct sweep_run *r = &runs[i];
        const struct sweep_setting *st = &s[r->setting];
        fprintf(f, "%s,%d,%d,%s,%d,%d,%d,", st->label, st->instances, st->cores, sweep_system_name[r->system],
                r->repeat + 1, r->order + 1, r->ok);
        for (size_t k = 0; k < COUNT(RUN_MEASURES); k++) {
            char b[32];
            fprintf(f, "%s,", num(b, sizeof b, measured(&RUN_MEASURES[k], r), RUN_MEASURES[k].decimals, ""));
        }
        fprintf(f, "%ld,", r->steps);
        csv_field(f, r->precision);
        fputc(',', f);
        csv_field(f, r->ok ? "" : r->error);
        fputc('\n', f);
    }
}

static void json_stat(st_json *j, const char *key, struct sweep_stat st, const char *format)
{
    st_json_object_begin(j, key);
    st_json_number(j, "median", st.median, format);
    st_json_number(j, "min", st.min, format);
    st_json_number(j, "max", st.max, format);
    st_json_int(j, "n", st.n);
    st_json_object_end(j);
}

static void json_hardware(st_json *j, const struct sweep_report *rep)
{
    const st_topo_info *t = &rep->topo;
    st_json_object_begin(j, "hardware");
    st_json_string(j, "cpu", t->cpu_model);
    st_json_int(j, "packages", t->packages);
    st_json_int(j, "numa_nodes", t->numa_nodes);
    st_json_int(j, "l3_caches", t->l3_caches);
    st_json_int(j, "cores", t->cores);
    st_json_int(j, "pus", t->pus);
    st_json_int(j, "l1d_bytes", t->l1d_bytes);
    st_json_int(j, "l2_bytes", t->l2_bytes);
    st_json_int(j, "l3_bytes", t->l3_bytes);
    st_json_string(j, "kernel", rep->kernel);
    st_json_string(j, "compiler", rep->compiler);
    st_json_string(j, "hwloc", t->hwloc_version);
    st_json_string(j, "onednn", rep->versions.onednn);
    st_json_string(j, "onednn_isa", rep->versions.isa);
    st_json_string(j, "torch", rep->versions.torch);
    st_json_string(j, "torch_mode", rep->versions.torch_mode);
    st_json_string(j, "shmrun", rep->shmrun_version);
    st_json_string(j, "date", rep->date);
    if (rep->probe_cpus > 0) {
        st_json_object_begin(j, "cpu_probe");
        st_json_int(j, "cpus", rep->probe_cpus);
        st_json_number(j, "one_gflops", rep->probe_one_gflops, "%.1f");
        st_json_number(j, "all_gflops", rep->probe_all_gflops, "%.1f");
        st_json_object_end(j);
    }
    st_json_object_end(j);
}

static void json_system(st_json *j, const struct sweep_summary *o, int sys)
{
    st_json_object_begin(j, sweep_system_name[sys]);
    st_json_int(j, "runs", o->runs);
    st_json_int(j, "failed", o->failed);
    st_json_int(j, "reached_target", o->reached);
    st_json_string(j, "precision", o->precision);
    json_stat(j, "samples_per_s", o->samples_per_s, "%.1f");
    json_stat(j, "step_ms", o->step_ms, "%.3f");
    json_stat(j, "time_to_target_s", o->time_to_target_s, "%.2f");
    json_measures(j, SUMMARY_MEASURES, COUNT(SUMMARY_MEASURES), o);
    if (o->slowest_rank >= 0) {  /* in the repeat closest to the median */
        st_json_int(j, "slowest_rank", o->slowest_rank);
        st_json_number(j, "slowest_over_fastest", o->imbalance, "%.3f");
        if (isfinite(o->slowest_p90_ms))
            st_json_number(j, "slowest_p90_ms", o->slowest_p90_ms, "%.3f");
    }
    st_json_object_end(j);
}

static void json_run(st_json *j, const struct sweep_setting *s, const struct sweep_run *r)
{
    st_json_object_begin(j, NULL);
    st_json_string(j, "setting", s[r->setting].label);
    st_json_string(j, "system", sweep_system_name[r->system]);
    st_json_int(j, "repeat", r->repeat + 1);
    st_json_int(j, "order", r->order + 1);
    st_json_bool(j, "ok", r->ok);
    st_json_string(j, "error", r->ok ? "" : r->error);
    st_json_int(j, "steps", r->steps);
    st_json_string(j, "precision", r->precision);
    json_measures(j, RUN_MEASURES, COUNT(RUN_MEASURES), r);
    st_json_array_begin(j, "curve");
    for (int k = 0; k < r->ncurve; k++) {
        st_json_array_begin(j, NULL);
        st_json_number(j, NULL, r->curve_s[k], "%.3f");
        st_json_number(j, NULL, r->curve_acc[k], "%.5f");
        st_json_array_end(j);
    }
    st_json_array_end(j);
    st_json_object_end(j);
}

void sweep_write_json(FILE *f, const struct sweep_report *rep, const struct sweep_setting *s, int ns,
                      const struct sweep_run *runs, int nruns, const struct sweep_summary *sums)
{
    bool by_target;
    int best = sweep_best(sums, ns, rep->target.value > 0, &by_target);
    st_json j;
    st_json_init(&j, f);
    st_json_object_begin(&j, NULL);
    st_json_string(&j, "command", rep->command);
    st_json_int(&j, "repeats", rep->repeats);
    st_json_number(&j, "target_accuracy", rep->target.value > 0 && !rep->target.loss ? rep->target.value : NAN, "%.4f");
    st_json_number(&j, "target_loss", rep->target.value > 0 && rep->target.loss ? rep->target.value : NAN, "%.4f");
    json_hardware(&j, rep);
    st_json_string(&j, "best", best >= 0 ? s[best].label : NULL);
    st_json_string(&j, "best_by", by_target ? "time_to_target" : "throughput");
    st_json_array_begin(&j, "settings");
    for (int i = 0; i < ns; i++) {
        st_json_object_begin(&j, NULL);
        st_json_string(&j, "label", s[i].label);
        st_json_int(&j, "instances", s[i].instances);
        st_json_int(&j, "cores_per_instance", s[i].cores);
        st_json_string(&j, "asked", s[i].asked);
        st_json_object_begin(&j, "systems");
        for (int sys = 0; sys < SWEEP_NSYSTEMS; sys++)
            if (sums[i * SWEEP_NSYSTEMS + sys].runs > 0)
                json_system(&j, &sums[i * SWEEP_NSYSTEMS + sys], sys);
        st_json_object_end(&j);
        st_json_object_end(&j);
    }
    st_json_array_end(&j);
    st_json_array_begin(&j, "runs");
    for (int i = 0; i < nruns; i++)
        json_run(&j, s, &runs[i]);
    st_json_array_end(&j);
    st_json_object_end(&j);
    fputc('\n', f);
}

static const char *spread(char *buf, size_t len, struct sweep_stat st, int decimals)
{
    if (st.n == 0)
        snprintf(buf, len, "-");
    else if (st.n == 1)
        snprintf(buf, len, "%.*f", decimals, st.median);
    else
        snprintf(buf, len, "%.*f (%.*f–%.*f)", decimals, st.median, decimals, st.min, decimals, st.max);
    return buf;
}

static void markdown_hardware(FILE *f, const struct sweep_report *rep)
{
    const st_topo_info *t = &rep->topo;
    fprintf(f, "## Machine\n\n");
    fprintf(f, "| | |\n|---|---|\n");
    fprintf(f, "| CPU | %s |\n", *t->cpu_model ? t->cpu_model : "(hwloc reports no model)");
    fprintf(f, "| usable | %d package%s, %d NUMA node%s, %d L3 cache%s, %d cores, %d PUs |\n", t->packages,
            t->packages == 1 ? "" : "s", t->numa_nodes, t->numa_nodes == 1 ? "" : "s", t->l3_caches,
            t->l3_caches == 1 ? "" : "s", t->cores, t->pus);
    fprintf(f, "| caches | L1d %ld KiB, L2 %ld KiB, L3 %ld KiB (each) |\n", t->l1d_bytes / 1024, t->l2_bytes / 1024,
            t->l3_bytes / 1024);
    if (rep->probe_cpus > 0 && rep->probe_one_gflops > 0)
        fprintf(f, "| arithmetic | its %d CPUs at once: %.2fx one CPU's multiply-add throughput (%d real cores: "
                   "%d.00x; %.0f GFLOPS f32 alone) |\n",
                rep->probe_cpus, rep->probe_all_gflops / rep->probe_one_gflops, rep->probe_cpus, rep->probe_cpus,
                rep->probe_one_gflops);
    fprintf(f, "| oneDNN | %s, widest ISA %s |\n", *rep->versions.onednn ? rep->versions.onednn : "-",
            *rep->versions.isa ? rep->versions.isa : "-");
    fprintf(f, "| PyTorch | %s%s%s |\n", *rep->versions.torch ? rep->versions.torch
                                       : rep->torch_asked ? "not available (python3-torch)" : "not run",
            *rep->versions.torch_mode ? ", mode " : "", rep->versions.torch_mode);
    fprintf(f, "| software | shmrun %s, hwloc %s, %s, %s |\n", rep->shmrun_version, t->hwloc_version, rep->compiler,
            rep->kernel);
    fprintf(f, "| date | %s |\n", rep->date);
}

/* What one markdown table of a sweep needs besides the rows: the baseline
 * setting, the target's words, and whether it is a language model's. */
struct md_table {
    bool script;
    const struct sweep_setting *s;
    const struct sweep_summary *sums, *bsum;
    int ns, base, best;
    bool lm;
    char tgt[32];
};

static void markdown_header(FILE *f, const struct md_table *t)
{
    fprintf(f, "| setting | asked | precision | %ssamples/s | vs %s | step ms | compute / all-reduce / wait / other ms |%s%s%s "
               "%s | peak RSS MiB per instance / total | slowest instance: compute a step vs the fastest's, its p90 |",
            t->script ? "script over shm: " : "", t->base >= 0 ? t->s[t->base].label : "1 x all", *t->tgt ? " time to " : "", *t->tgt ? t->tgt : "",
            *t->tgt ? " (s) |" : "", t->lm ? "final validation loss" : "final test acc. %");
    for (int sys = SWEEP_TORCH; sys < SWEEP_NSYSTEMS; sys++)
        if (sweep_system_ran(t->sums, t->ns, sys))
            fprintf(f, " %s samples/s | %s / %s |", sweep_label(sys, t->script), sweep_label(SWEEP_SHMTRAIN, t->script),
                    sweep_label(sys, t->script));
    fprintf(f, "\n|---|---|---|---|---|---|---|%s---|---|---|", *t->tgt ? "---|" : "");
    for (int sys = SWEEP_TORCH; sys < SWEEP_NSYSTEMS; sys++)
        if (sweep_system_ran(t->sums, t->ns, sys))
            fprintf(f, "---|---|");
    fputc('\n', f);
}

/* The peers' columns of setting i: their throughput and shmtrain's over it. */
static void markdown_peers(FILE *f, const struct md_table *t, int i, const struct sweep_summary *o)
{
    char b[64];
    for (int sys = SWEEP_TORCH; sys < SWEEP_NSYSTEMS; sys++) {
        const struct sweep_summary *pt = &t->sums[i * SWEEP_NSYSTEMS + sys];
        if (!sweep_system_ran(t->sums, t->ns, sys))
            continue;
        fprintf(f, " %s | ", spread(b, 64, pt->samples_per_s, 0));
        if (pt->samples_per_s.n && o->samples_per_s.n)
            fprintf(f, "%.2fx |", o->samples_per_s.median / pt->samples_per_s.median);
        else
            fprintf(f, "- |");
    }
}

static void markdown_row(FILE *f, const struct md_table *t, int i)
{
    const struct sweep_summary *o = &t->sums[i * SWEEP_NSYSTEMS + SWEEP_SHMTRAIN];
    char b[10][64];
    char failed[48] = "";
    if (o->failed)
        snprintf(failed, sizeof failed, " (%d of %d runs FAILED)", o->failed, o->runs);
    fprintf(f, "| %s%s%s%s | %s | %s | %s | ", i == t->best ? "**" : "", t->s[i].label, i == t->best ? "**" : "",
            failed, t->s[i].asked, o->precision[0] ? o->precision : "-", spread(b[0], 64, o->samples_per_s, 0));
    if (t->bsum && t->bsum->samples_per_s.n && o->samples_per_s.n)
        fprintf(f, "%.2fx", o->samples_per_s.median / t->bsum->samples_per_s.median);
    else
        fprintf(f, "-");
    fprintf(f, " | %s | %s / %s / %s / %s |", spread(b[1], 64, o->step_ms, 2), num(b[2], 64, o->compute_ms, 2, "-"),
            num(b[3], 64, o->allreduce_ms, 2, "-"), num(b[4], 64, o->wait_ms, 2, "-"),
            num(b[5], 64, o->other_ms, 2, "-"));
    if (*t->tgt) {
        if (o->reached < o->runs || o->runs == 0)
            fprintf(f, " %s (%d of %d) |", spread(b[6], 64, o->time_to_target_s, 1), o->reached, o->runs);
        else
            fprintf(f, " %s |", spread(b[6], 64, o->time_to_target_s, 1));
    }
    if (t->lm)
        fprintf(f, " %s |", num(b[7], 64, o->final_loss, 4, "-"));
    else
        fprintf(f, " %s |", isnan(o->final_accuracy) ? "-" : num(b[7], 64, 100 * o->final_accuracy, 2, "-"));
    fprintf(f, " %s / %s |", num(b[8], 64, o->rss_max_mb, 0, "-"), num(b[9], 64, o->rss_total_mb, 0, "-"));
    if (o->slowest_rank >= 0 && isfinite(o->slowest_p90_ms))
        fprintf(f, " rank %d: %.2fx, p90 %.2f ms |", o->slowest_rank, o->imbalance, o->slowest_p90_ms);
    else if (o->slowest_rank >= 0)  /* a script's ranks tell their pace, not each step */
        fprintf(f, " rank %d: %.2fx |", o->slowest_rank, o->imbalance);
    else
        fprintf(f, " - |");
    markdown_peers(f, t, i, o);
    fputc('\n', f);
}

/* The best setting and by what, and how to read the table. */
static void markdown_verdict(FILE *f, const struct md_table *t, bool by_target, bool torch)
{
    if (t->best >= 0) {
        const struct sweep_summary *b = &t->sums[t->best * SWEEP_NSYSTEMS];
        fprintf(f, "**Best: %s**, by %s", t->s[t->best].label,
                by_target ? (t->lm ? "median time to the target loss" : "median time to the target accuracy")
                : b->samples_per_s.n ? "median throughput"
                                     : "median wall time (the script reports no progress: shmtrain_torch.report)");
        if (!b->samples_per_s.n && b->wall_s.n)
            fprintf(f, " (%.1f s)", b->wall_s.median);
        if (t->bsum && t->bsum->samples_per_s.n && t->best != t->base)
            fprintf(f, " (%.2fx the throughput of %s)",
                    t->sums[t->best * SWEEP_NSYSTEMS].samples_per_s.median / t->bsum->samples_per_s.median,
                    t->s[t->base].label);
        fprintf(f, ".\n\n");
    } else {
        fprintf(f, "**No setting completed a run.**\n\n");
    }
    fprintf(f, "Step time is the gang's (every instance waits for the slowest at the all-reduce). "
               "The split is instance 0's, per step: compute = batch assembly, forward, backward and optimizer; "
               "all-reduce = moving gradients; wait = blocked on a slower peer; other = the rest (logging, "
               "evaluation overhead outside the intervals).");
    if (torch && !t->script)
        fprintf(f, " PyTorch DDP overlaps its all-reduce with the backward pass (on each backend's own thread), "
                   "so its split is not comparable and is left out of the table (it is in the CSV).");
    fprintf(f, " Slowest instance: in the repeat closest to the median, the instance with the most compute a step "
               "(the one the others wait for), that compute over the fastest instance's, and its steps' p90 "
               "(instances.svg draws every instance).");
    if (sweep_system_ran(t->sums, t->ns, SWEEP_INDEPENDENT))
        fprintf(f, " Independent: the same plan and pinning, each instance training a model of its own on its shard "
                   "with nothing exchanged (shmtrain --balance independent; a script's all-reduces kept in each rank, "
                   "SHMTRAIN_INDEPENDENT=1), its throughput the sum of each instance's own: "
                   "what the machine allows; shmtrain / independent is what synchronising costs (the exchange and "
                   "waiting for the slowest instance).");
    if (t->script)
        fprintf(f, " The script ran as it is under each setting, its backend replaced (SHMTRAIN_TORCH_BACKEND), "
                   "its threads the instance's cores; its numbers are what it reported (shmtrain_torch.report).");
    fprintf(f, "\n\n");
}

void sweep_write_markdown(FILE *f, const struct sweep_report *rep, const struct sweep_setting *s, int ns,
                          const struct sweep_summary *sums)
{
    bool by_target;
    struct md_table t = {.script = rep->script, .s = s, .sums = sums, .ns = ns, .lm = rep->target.loss,
                         .best = sweep_best(sums, ns, rep->target.value > 0, &by_target),
                         .base = sweep_baseline(s, ns, rep->topo.cores)};
    t.bsum = t.base >= 0 ? &sums[t.base * SWEEP_NSYSTEMS] : NULL;
    const bool torch = sweep_system_ran(sums, ns, SWEEP_TORCH) || sweep_system_ran(sums, ns, SWEEP_TORCH_SHM);
    if (rep->target.value > 0)
        snprintf(t.tgt, sizeof t.tgt, t.lm ? "loss %g" : "%g%%", t.lm ? rep->target.value : 100 * rep->target.value);
    fprintf(f, "# Partitioning sweep\n\n`%s`\n\n", rep->command);
    fprintf(f, "%d repeat%s per setting, interleaved; medians with the range over repeats in brackets. "
               "Throughput is the steady state (after the first log interval), summed over instances.\n\n",
            rep->repeats, rep->repeats == 1 ? "" : "s");
    markdown_header(f, &t);
    for (int i = 0; i < ns; i++)
        markdown_row(f, &t, i);
    fputc('\n', f);
    markdown_verdict(f, &t, by_target, torch);
    if (rep->plots_note)
        fprintf(f, "Plots: %s\n\n", rep->plots_note);
    else
        fprintf(f, "![throughput](throughput.svg)\n\n![time split](timesplit.svg)\n\n![accuracy](accuracy.svg)\n\n"
                   "![instances](instances.svg)\n\n");
    markdown_hardware(f, rep);
}

/* ---------------------------------------------------------------- plots -- */

/* Each instance of a setting's median run (shmtrain's): compute and wait a
 * step, and its steps' p90, one block per setting of several instances. */
static void write_instances(FILE *f, const struct sweep_setting *s, int ns, const struct sweep_run *runs,
                            const struct sweep_summary *sums)
{
    fprintf(f, "# rank compute_ms wait_ms p90_ms (shmtrain, the repeat closest to the median; a block a setting)\n");
    for (int i = 0; i < ns; i++) {
        const int k = sums[i * SWEEP_NSYSTEMS].median_run;
        if (k < 0 || runs[k].ninst < 2)
            continue;
        fprintf(f, "# %s\n", s[i].label);
        for (int q = 0; q < runs[k].ninst; q++)
            fprintf(f, "%d %.3f %.3f %.3f\n", q, runs[k].inst_compute_ms[q], runs[k].inst_wait_ms[q],
                    runs[k].inst_p90_ms[q]);
        fprintf(f, "\n\n");
    }
}

void sweep_write_plot_data(FILE *throughput, FILE *split, FILE *curves, FILE *instances, const struct sweep_setting *s,
                           int ns, const struct sweep_run *runs, const struct sweep_summary *sums, bool loss)
{
    write_instances(instances, s, ns, runs, sums);
    fprintf(throughput, "# instances cores label shm_median shm_min shm_max torch_median torch_min torch_max "
                        "torch_shm_median torch_shm_min torch_shm_max independent_median independent_min independent_max "
                        "(torch_shm: PyTorch DDP over shmtrain's all-reduce; independent: shmtrain's instances "
                        "exchanging nothing)\n");
    fprintf(split, "# label compute_ms allreduce_ms wait_ms other_ms (shmtrain, medians)\n");
    for (int i = 0; i < ns; i++) {
        const struct sweep_summary *o = &sums[i * SWEEP_NSYSTEMS];
        char b[10][32];
        fprintf(throughput, "%d %d %s", s[i].instances, s[i].cores, s[i].label);
        for (int sys = 0; sys < SWEEP_NSYSTEMS; sys++)
            fprintf(throughput, " %s %s %s", num(b[0], 32, o[sys].samples_per_s.median, 1, "-"),
                    num(b[1], 32, o[sys].samples_per_s.min, 1, "-"), num(b[2], 32, o[sys].samples_per_s.max, 1, "-"));
        fputc('\n', throughput);
        fprintf(split, "%s %s %s %s %s\n", s[i].label, num(b[6], 32, o->compute_ms, 3, "0"),
                num(b[7], 32, o->allreduce_ms, 3, "0"), num(b[8], 32, o->wait_ms, 3, "0"),
                num(b[9], 32, o->other_ms, 3, "0"));
    }
    /* One block per (setting, system) with a curve, separated for `index`. */
    for (int i = 0; i < ns; i++)
        for (int sys = 0; sys < SWEEP_NSYSTEMS; sys++) {
            int k = sums[i * SWEEP_NSYSTEMS + sys].curve_run;
            if (k < 0)
                continue;
            fprintf(curves, "# %s %s\n", s[i].label, sweep_system_name[sys]);
            for (int p = 0; p < runs[k].ncurve; p++)
                fprintf(curves, "%.3f %.5f\n", runs[k].curve_s[p], (loss ? 1 : 100) * runs[k].curve_acc[p]);
            fprintf(curves, "\n\n");
        }
}

/* instances.svg: a setting's instances side by side, the slow one standing out. */
static void gnuplot_instances(FILE *f, const struct sweep_setting *s, int ns, const struct sweep_run *runs,
                              const struct sweep_summary *sums)
{
    fprintf(f, "\nset output 'instances.svg'\nset title 'Each instance a step (shmtrain; compute solid, waiting "
               "dashed)'\nset xlabel 'instance (rank)'\nset ylabel 'ms per step'\nset key top left\nset yrange [0:*]\n"
               "set xrange [*:*]\n");
    int block = 0;
    for (int i = 0; i < ns; i++) {
        const int k = sums[i * SWEEP_NSYSTEMS].median_run;
        if (k < 0 || runs[k].ninst < 2)
            continue;
        fprintf(f, "%s'instances.dat' index %d using 1:2 with linespoints lw 2 pt 7 lc %d title '%s compute', \\\n"
                   "     '' index %d using 1:3 with linespoints lw 1 pt 6 dt 2 lc %d title '%s wait'",
                block ? ", \\\n     " : "plot ", block, i + 1, s[i].label, block, i + 1, s[i].label);
        block++;
    }
    if (!block)
        fprintf(f, "set label 2 'no setting of several instances' at graph 0.5, 0.5 center\nplot [0:1] [0:1] NaN notitle");
    fprintf(f, "\n");
}

void sweep_write_gnuplot(FILE *f, const struct sweep_setting *s, int ns, const struct sweep_run *runs,
                         const struct sweep_summary *sums, bool loss)
{
    fprintf(f, "# gnuplot script written by shmrun --sweep; run it in this directory: gnuplot plot.gp\n"
               "set terminal svg size 760,440 dynamic font 'sans,12' background '#ffffff'\n"
               "set datafile missing '-'\nset grid ytics lc '#dddddd'\nset border 3\nset tics nomirror\n"
               "set key top left\n");
    fprintf(f, "\nset output 'throughput.svg'\nset title 'Throughput against instances (median, bars: range)'\n"
               "set xlabel 'instances (x cores each)'\nset ylabel 'samples/s, all instances'\n"
               "set logscale x 2\nset xtics (");
    for (int i = 0; i < ns; i++)
        fprintf(f, "%s'%s' %d", i ? ", " : "", s[i].label, s[i].instances);
    fprintf(f, ")\nset yrange [0:*]\nset offsets graph 0.05, graph 0.05, 0, 0\n");
    fprintf(f, "plot 'throughput.dat' using 1:4:5:6 with yerrorlines lw 2 pt 7 lc '#1f77b4' title 'shmtrain'");
    static const char *const colour[SWEEP_NSYSTEMS] = {"#1f77b4", "#d62728", "#9467bd", "#2ca02c"};
    for (int sys = SWEEP_TORCH; sys < SWEEP_NSYSTEMS; sys++)
        if (sweep_system_ran(sums, ns, sys))
            fprintf(f, ", \\\n     '' using 1:%d:%d:%d with yerrorlines lw 2 pt 5 dt %d lc '%s' title '%s'", 4 + 3 * sys,
                    5 + 3 * sys, 6 + 3 * sys, sys + 1, colour[sys], sweep_system_label[sys]);
    fprintf(f, "\nunset logscale x\nunset xtics\nset xtics\nset offsets 0, 0, 0, 0\n");
    fprintf(f, "\nset output 'timesplit.svg'\nset title 'Where a step goes (shmtrain, instance 0, median)'\n"
               "set xlabel 'setting (instances x cores)'\nset ylabel 'ms per step'\n"
               "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
               "set boxwidth 0.6\nset key top right\nset yrange [0:*]\n"
               "plot 'timesplit.dat' using 2:xtic(1) lc '#1f77b4' title 'compute', \\\n"
               "     '' using 3 lc '#2ca02c' title 'all-reduce', \\\n"
               "     '' using 4 lc '#ff7f0e' title 'wait', \\\n"
               "     '' using 5 lc '#bbbbbb' title 'other'\n"
               "set style data lines\n");
    fprintf(f, "\nset output 'accuracy.svg'\nset title '%s against wall time'\n"
               "set xlabel 'seconds since start'\nset ylabel '%s'\nset key %s right\n"
               "set yrange [*:*]\n", loss ? "Validation loss" : "Test accuracy",
            loss ? "validation loss (nats per token)" : "test accuracy (%)", loss ? "top" : "bottom");
    int block = 0, drawn = 0;
    for (int i = 0; i < ns; i++)
        for (int sys = 0; sys < SWEEP_NSYSTEMS; sys++) {
            if (sums[i * SWEEP_NSYSTEMS + sys].curve_run < 0)
                continue;
            fprintf(f, "%s'accuracy.dat' index %d using 1:2 with linespoints lw 2 pt 7 ps 0.6 dt %d lc %d "
                       "title '%s %s'",
                    drawn ? ", \\\n     " : "plot ", block, sys + 1, i + 1, s[i].label, sweep_system_label[sys]);
            block++;
            drawn++;
        }
    if (!drawn)
        fprintf(f, "set label 1 'no evaluation recorded' at graph 0.5, 0.5 center\nplot [0:1] [0:1] NaN notitle");
    fprintf(f, "\nunset label 1\n");
    gnuplot_instances(f, s, ns, runs, sums);
}
