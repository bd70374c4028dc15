/* sweep: compare core partitionings of one training job (shmrun --sweep).
 *
 * This is the pure half: the settings a spec names, the interleaved run
 * order, reading one run's metrics file and launcher report, statistics over
 * repeats, the best setting, and the report writers (CSV, JSON, markdown,
 * gnuplot data and script).  Nothing here forks, binds or opens files; the
 * writers take the FILE * they write to, so the tests feed recorded runs in
 * and read the reports back.  sweep_run.c runs a sweep.
 *
 * Units: samples per second summed over instances; times per optimizer step
 * in milliseconds (the gang's step, which every instance waits for, so it is
 * the slowest instance's); memory in MiB.  NAN means "not measured".
 */
#ifndef SHMRUN_SWEEP_H
#define SHMRUN_SWEEP_H

#include <stdbool.h>
#include <stdio.h>

#include "shmtrain/topo.h"

#define SWEEP_MAX_SETTINGS 32
#define SWEEP_MAX_CURVE 256
#define SWEEP_MAX_INSTANCES 256   /* instances whose step times a run keeps (192-core servers run 192) */

/* What a run trains with: shmtrain, or PyTorch DDP with gloo's all-reduce or
 * with shmtrain's (the "shm" backend, python/shmtrain_torch); and shmtrain's
 * instances each alone (--balance independent: no exchange, a model each),
 * the machine's ceiling that the synchronized run is measured against. */
enum sweep_system { SWEEP_SHMTRAIN = 0, SWEEP_TORCH = 1, SWEEP_TORCH_SHM = 2, SWEEP_INDEPENDENT = 3,
                    SWEEP_NSYSTEMS = 4 };
extern const char *const sweep_system_name[SWEEP_NSYSTEMS];   /* in files: "pytorch-ddp-shm" */
extern const char *const sweep_system_label[SWEEP_NSYSTEMS];  /* in reports: "PyTorch DDP (shm)" */
/* A script's sweep names its systems by backend: system 0 "script over shm", 1 "script over gloo". */
const char *sweep_label(int system, bool script);

struct sweep_setting {
    char asked[64];          /* the spec items it came from, "numa,all" */
    int req_instances;       /* what the planner is asked; 0 = derive */
    int req_cores;
    int instances, cores;    /* what the plan gave (sweep_finalize) */
    char label[32];          /* "2x16", or "2x16 bf16" with a precision */
    bool added_baseline;     /* not asked for: the 1 x all-cores reference */
    char precision[8];       /* "fp32" or "bf16" to pass as --precision; "" = the command's own */
    int grad_accum;          /* --sweep-global-batch: to pass as --grad-accum; 0 = the command's own */
};

/* Items of a comma-separated spec: NxC, or all (1 x all cores), numa (one
 * per NUMA node), l3 (one per L3 cache), core (one per core).  `l3_caches`
 * is the number of usable L3s.  Returns the number of settings, or -1 with
 * a one-line message in err. */
int sweep_parse_spec(const char *spec, int l3_caches, struct sweep_setting *out, int max, char *err,
                     size_t errlen);

/* After the planner has filled instances/cores: label the settings, merge
 * those that came out the same, add the 1 x `all_cores` baseline if missing
 * (all_cores <= 0: no baseline can be planned), sort by instances.  Returns the new count (at most max). */
int sweep_finalize(struct sweep_setting *s, int n, int max, int all_cores);

/* --sweep-precisions LIST: each setting once per precision in the comma-
 * separated LIST (fp32, bf16), in that order, labelled "2x16 bf16": runs
 * of both side by side in one report.  Returns the new count, or -1 with
 * a one-line message in err (an unknown precision, or more than max). */
int sweep_expand_precisions(struct sweep_setting *s, int n, int max, const char *list, char *err, size_t errlen);

/* --sweep-global-batch G: every setting trains with G samples a step, as
 * nanoGPT's train.py divides its gradient accumulation by the world size:
 * instances x `micro` (the program's --batch-size) x grad_accum = G, the
 * label gaining " acc N" where N > 1.  So settings differ in speed only,
 * not in what they learn (the same samples each step, up to round-off).
 * Returns 0, or -1 with a one-line message in err when a setting's
 * instances x micro does not divide G. */
int sweep_hold_global_batch(struct sweep_setting *s, int n, long global, long micro, char *err, size_t errlen);

/* The index of the 1 x all-cores setting, or -1. */
int sweep_baseline(const struct sweep_setting *s, int n, int all_cores);

/* Run order: `repeats` rounds; every round runs each (setting, system) once,
 * starting one setting later than the round before and alternating which
 * system goes first, so slow drift of a shared machine spreads over all
 * settings instead of favouring the ones that run early. */
struct sweep_slot { int setting, system, repeat; };
int sweep_order(int nsettings, int nsystems, int repeats, struct sweep_slot *out);

/* What a run must reach: a test accuracy of at least `value`, or (a
 * language model, `loss`) a validation loss of at most it.  value <= 0: no
 * target. */
struct sweep_target {
    bool loss;
    double value;
};

struct sweep_run {
    int setting, system, repeat, order;
    bool ok;
    char error[200];
    long steps;
    double samples_per_s;            /* steady state: intervals after the first */
    double step_ms;
    double compute_ms, allreduce_ms, wait_ms, other_ms;   /* per step; all-reduce = moving data */
    double time_to_target_s;         /* NAN when not reached */
    double final_accuracy;           /* NAN when never evaluated */
    double final_loss;               /* the last evaluation's loss; NAN when never evaluated */
    double rss_max_mb, rss_total_mb; /* peak per instance: the largest one, and the sum */
    double wall_s;
    int instance_rates;              /* instance records with their own samples/s (an independent run's
                                        throughput is their sum) */
    int ninst;                       /* instance records read: each instance's step, ms a step */
    float inst_compute_ms[SWEEP_MAX_INSTANCES], inst_wait_ms[SWEEP_MAX_INSTANCES], inst_p90_ms[SWEEP_MAX_INSTANCES];
    char precision[8];               /* what the run record says it computed in ("fp32", "bf16"); "" if unsaid */
    char mode[16];                   /* how a PyTorch peer ran its model, as its run record says; "" if unsaid */
    int ncurve;                      /* test accuracy against wall time */
    double curve_s[SWEEP_MAX_CURVE], curve_acc[SWEEP_MAX_CURVE];
};

/* A run with nothing measured yet: every measure NAN (shown as missing). */
void sweep_run_reset(struct sweep_run *r, int setting, int system, int repeat, int order);

/* Versions and build facts a run reports about itself ("run" record). */
struct sweep_versions {
    char onednn[32], isa[32], torch[32];
    char torch_mode[16];             /* how the peer ran its model, as its run record says */
    int threads;
};

/* Read a metrics file (JSON lines, docs/training.md) into r.  `target` is
 * what the reported time reaches.  Returns 0, or -1 with r->error set and
 * r->ok false. */
int sweep_read_metrics(const char *text, struct sweep_target target, struct sweep_run *r, struct sweep_versions *v);

/* Read `shmrun --report` JSON: success and peak memory per instance. */
int sweep_read_report(const char *text, struct sweep_run *r);

struct sweep_stat { double median, min, max; int n; };

struct sweep_summary {
    int runs, failed, reached;       /* repeats, failed ones, ones that reached the target */
    struct sweep_stat samples_per_s, step_ms, time_to_target_s, wall_s;
    double compute_ms, allreduce_ms, wait_ms, other_ms, final_accuracy, final_loss;  /* medians */
    double rss_max_mb, rss_total_mb; /* worst over repeats */
    int curve_run;                   /* the run whose accuracy curve is drawn, or -1 */
    int median_run;                  /* the run closest to the median throughput (its instances shown), or -1 */
    int slowest_rank;                /* in it: the instance computing slowest a step, -1 when unknown; */
    double imbalance, slowest_p90_ms;/* its compute over the fastest one's, and its steps' p90 */
    char precision[8];               /* the runs' recorded precision; "" if unsaid, "mixed" if they differ */
};

/* sums[setting * SWEEP_NSYSTEMS + system] over the successful runs. */
void sweep_summarize(const struct sweep_run *runs, int nruns, int nsettings, struct sweep_summary *sums);

/* Did any setting of this system run (in sums as sweep_summarize makes them)? */
bool sweep_system_ran(const struct sweep_summary *sums, int nsettings, int system);

/* The best setting of the job (system 0: shmtrain, or a script over shm):
 * with a target that every repeat of some setting reached, the lowest
 * median time to it; else the highest median throughput; where no run
 * reported one (a script that calls no shmtrain_torch.report), the lowest
 * median wall time.  -1 when nothing succeeded.  *by_target says which. */
int sweep_best(const struct sweep_summary *sums, int nsettings, bool target_set, bool *by_target);

struct sweep_report {
    const char *command;             /* the job, as one line */
    int repeats;
    struct sweep_target target;
    st_topo_info topo;
    char kernel[128], compiler[64], date[40], shmrun_version[16];
    struct sweep_versions versions;  /* merged from the runs */
    bool torch_asked, torch_available;
    bool script;                     /* the job is a user's PyTorch script (system 0: over shm, 1: over gloo) */
    const char *plots_note;          /* NULL when plots were drawn */
    /* st_cpu_probe_ratio over the 1 x all plan's CPUs; probe_cpus 0 = not measured */
    int probe_cpus;
    double probe_one_gflops, probe_all_gflops;
};

void sweep_write_csv(FILE *f, const struct sweep_setting *s, const struct sweep_run *runs, int nruns);
void sweep_write_json(FILE *f, const struct sweep_report *rep, const struct sweep_setting *s, int ns,
                      const struct sweep_run *runs, int nruns, const struct sweep_summary *sums);
void sweep_write_markdown(FILE *f, const struct sweep_report *rep, const struct sweep_setting *s, int ns,
                          const struct sweep_summary *sums);

/* gnuplot input: throughput against instances (with the spread), the time
 * split as stacked bars, test accuracy (`loss`: a language model's
 * validation loss) against wall time, and each instance's compute and wait
 * a step (the slow one named).  The script reads the four data files from
 * its own directory and writes four SVGs. */
void sweep_write_plot_data(FILE *throughput, FILE *split, FILE *curves, FILE *instances, const struct sweep_setting *s,
                           int ns, const struct sweep_run *runs, const struct sweep_summary *sums, bool loss);
void sweep_write_gnuplot(FILE *f, const struct sweep_setting *s, int ns, const struct sweep_run *runs,
                         const struct sweep_summary *sums, bool loss);

#endif
