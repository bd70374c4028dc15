/* sweep: settings, run order, reading runs, statistics.  The reports are
 * sweep_report.c.  See sweep.h; nothing here has side effects. */
#define _GNU_SOURCE
#include "sweep.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/json.h"
#include "shmtrain/metrics.h"

const char *const sweep_system_name[SWEEP_NSYSTEMS] = {"shmtrain", "pytorch-ddp", "pytorch-ddp-shm",
                                                       "shmtrain-independent"};
const char *const sweep_system_label[SWEEP_NSYSTEMS] = {"shmtrain", "PyTorch DDP (gloo)", "PyTorch DDP (shm)",
                                                        "independent (no exchange)"};

const char *sweep_label(int system, bool script)
{
    static const char *const scripts[SWEEP_NSYSTEMS] = {"script over shm", "script over gloo", "script over shm",
                                                        "independent (no exchange)"};
    return script ? scripts[system] : sweep_system_label[system];
}

/* ------------------------------------------------------------ settings -- */

static int parse_item(const char *item, int l3_caches, struct sweep_setting *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    snprintf(s->asked, sizeof s->asked, "%s", item);
    if (!strcmp(item, "all")) {
        s->req_instances = 1;
    } else if (!strcmp(item, "numa")) {
        /* the planner's default: one per NUMA node */
    } else if (!strcmp(item, "l3")) {
        if (l3_caches < 1) {
            snprintf(err, errlen, "--sweep: 'l3' asked, but hwloc reports no L3 cache on this machine");
            return -1;
        }
        s->req_instances = l3_caches;
    } else if (!strcmp(item, "core")) {
        s->req_cores = 1;
    } else {
        char *end;
        errno = 0;
        long n = strtol(item, &end, 10), c = 0;
        bool ok = end != item && *end == 'x' && n >= 1 && n <= 4096;
        if (ok) {
            const char *cs = end + 1;
            c = strtol(cs, &end, 10);
            ok = end != cs && !*end && c >= 1 && c <= 4096 && !errno;
        }
        if (!ok) {
            snprintf(err, errlen, "--sweep: '%s' is neither INSTANCESxCORES (e.g. 2x8) nor one of all, numa, "
                                  "l3, core", item);
            return -1;
        }
        s->req_instances = (int)n;
        s->req_cores = (int)c;
    }
    return 0;
}

int sweep_parse_spec(const char *spec, int l3_caches, struct sweep_setting *out, int max, char *err,
                     size_t errlen)
{
    char buf[1024];
    if (!spec || !*spec || strlen(spec) >= sizeof buf) {
        snprintf(err, errlen, "--sweep: give a comma-separated list of settings, e.g. 1x2,2x1,core");
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    int n = 0;
    for (char *rest = buf, *item; (item = strsep(&rest, ",")) != NULL;) {
        while (isspace((unsigned char)*item))
            item++;
        if (!*item) {
            snprintf(err, errlen, "--sweep '%s': an empty item", spec);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "--sweep: more than %d settings", max);
            return -1;
        }
        if (parse_item(item, l3_caches, &out[n], err, errlen) != 0)
            return -1;
        n++;
    }
    return n;
}

static void append_asked(struct sweep_setting *into, const char *asked)
{
    size_t len = strlen(into->asked);
    if (strstr(into->asked, asked) == NULL)
        snprintf(into->asked + len, sizeof into->asked - len, ",%s", asked);
}

static int by_instances(const void *a, const void *b)
{
    const struct sweep_setting *x = a, *y = b;
    return x->instances != y->instances ? x->instances - y->instances : y->cores - x->cores;
}

int sweep_finalize(struct sweep_setting *s, int n, int max, int all_cores)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < kept && !(s[j].instances == s[i].instances && s[j].cores == s[i].cores))
            j++;
        if (j < kept) {
            append_asked(&s[j], s[i].asked);
            continue;
        }
        s[kept++] = s[i];
    }
    if (all_cores > 0 && sweep_baseline(s, kept, all_cores) < 0 && kept < max) {
        struct sweep_setting *b = &s[kept++];
        memset(b, 0, sizeof *b);
        snprintf(b->asked, sizeof b->asked, "(baseline)");
        b->req_instances = b->instances = 1;
        b->cores = all_cores;
        b->added_baseline = true;
    }
    for (int i = 0; i < kept; i++)
        snprintf(s[i].label, sizeof s[i].label, "%dx%d", s[i].instances, s[i].cores);
    qsort(s, (size_t)kept, sizeof *s, by_instances);
    return kept;
}

int sweep_expand_precisions(struct sweep_setting *s, int n, int max, const char *list, char *err, size_t errlen)
{
    char names[4][8];
    int np = 0;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        if (np == 4 || len == 0 || len >= sizeof names[0]) {
            snprintf(err, errlen, "--sweep-precisions '%s': expected a list like fp32,bf16", list);
            return -1;
        }
        memcpy(names[np], p, len);
        names[np][len] = '\0';
        if (strcmp(names[np], "fp32") && strcmp(names[np], "bf16")) {
            snprintf(err, errlen, "--sweep-precisions: '%s' is not fp32 or bf16", names[np]);
            return -1;
        }
        np++;
        p += len + (p[len] == ',');
    }
    if (np == 0 || n * np > max) {
        snprintf(err, errlen, "--sweep-precisions '%s': %s", list, np ? "too many settings" : "empty");
        return -1;
    }
    for (int i = n - 1; i >= 0; i--)  /* in place, from the end: setting i becomes np rows at i * np */
        for (int k = np - 1; k >= 0; k--) {
            struct sweep_setting *d = &s[i * np + k];
            *d = s[i];
            snprintf(d->precision, sizeof d->precision, "%s", names[k]);
            snprintf(d->label, sizeof d->label, "%dx%d %.4s", d->instances, d->cores, names[k]);
        }
    return n * np;
}

int sweep_hold_global_batch(struct sweep_setting *s, int n, long global, long micro, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        const long per = (long)s[i].instances * micro;
        if (micro < 1 || per < 1 || global % per) {
            snprintf(err, errlen, "--sweep-global-batch %ld: setting %s runs %d instance%s x --batch-size %ld = %ld "
                     "samples a micro-batch, which does not divide it", global, s[i].label, s[i].instances,
                     s[i].instances == 1 ? "" : "s", micro, per);
            return -1;
        }
        s[i].grad_accum = (int)(global / per);
        const size_t len = strlen(s[i].label);
        if (s[i].grad_accum > 1)
            snprintf(s[i].label + len, sizeof s[i].label - len, " acc %d", s[i].grad_accum);
    }
    return 0;
}

int sweep_baseline(const struct sweep_setting *s, int n, int all_cores)
{
    for (int i = 0; i < n; i++)
        if (s[i].instances == 1 && s[i].cores == all_cores)
            return i;
    return -1;
}

int sweep_order(int nsettings, int nsystems, int repeats, struct sweep_slot *out)
{
    int k = 0;
    for (int r = 0; r < repeats; r++)
        for (int i = 0; i < nsettings; i++) {
            int setting = (i + r) % nsettings;
            for (int j = 0; j < nsystems; j++)
                out[k++] = (struct sweep_slot){setting, (j + r) % nsystems, r};
        }
    return k;
}

/* ------------------------------------------------------- reading runs -- */

void sweep_run_reset(struct sweep_run *r, int setting, int system, int repeat, int order)
{
    memset(r, 0, sizeof *r);
    *r = (struct sweep_run){.setting = setting, .system = system, .repeat = repeat, .order = order};
    r->samples_per_s = r->step_ms = r->compute_ms = r->allreduce_ms = r->wait_ms = r->other_ms = NAN;
    r->time_to_target_s = r->final_accuracy = r->final_loss = r->rss_max_mb = r->rss_total_mb = r->wall_s = NAN;
}

static int run_failed(struct sweep_run *r, const char *msg)
{
    r->ok = false;
    snprintf(r->error, sizeof r->error, "%s", msg);
    return -1;
}

struct interval_sums { double steps, seconds, compute, reduce, wait; int count; };

static void add_interval(struct interval_sums *acc, const st_train_record *t, double *prev_step,
                         double samples_per_step)
{
    double step = (double)t->step, sps = t->samples_per_s;
    double dsteps = step - *prev_step;
    *prev_step = step;
    if (!(dsteps > 0) || !(sps > 0))
        return;
    if (++acc->count == 1)
        return;  /* the first interval holds start-up: first touches, cold caches */
    acc->steps += dsteps;
    acc->seconds += dsteps * samples_per_step / sps;
    acc->compute += t->compute_s;
    acc->reduce += isnan(t->allreduce_s) ? NAN : t->allreduce_s - (isnan(t->wait_s) ? 0 : t->wait_s);
    acc->wait += t->wait_s;
}

static void first_interval_only(struct interval_sums *acc, const st_train_record *t, double first_step,
                                double samples_per_step)
{
    /* A run of one interval: use it rather than nothing. */
    double prev = first_step;
    struct interval_sums one = {0};
    one.count = 1;
    add_interval(&one, t, &prev, samples_per_step);
    *acc = one;
}

static void note_versions(const st_run_record *run, struct sweep_versions *v)
{
    if (!v)
        return;
    if (!strcmp(run->system, "shmtrain")) {
        snprintf(v->onednn, sizeof v->onednn, "%s", run->onednn);
        snprintf(v->isa, sizeof v->isa, "%s", run->isa);
    }
    if (!strcmp(run->system, "pytorch-ddp") || !strcmp(run->system, "pytorch") ||
        !strcmp(run->system, "pytorch-script")) {  /* torch_gpt.py alone: "pytorch" */
        snprintf(v->torch, sizeof v->torch, "%s", run->torch);
        snprintf(v->torch_mode, sizeof v->torch_mode, "%s", run->mode);
    }
    if (run->threads > 0)
        v->threads = run->threads;
}

static void note_eval(const st_eval_record *e, struct sweep_target target, struct sweep_run *r)
{
    if (isnan(e->time_s) || isnan(e->test_accuracy))
        return;
    if (r->ncurve < SWEEP_MAX_CURVE) {  /* a language model's curve is its loss */
        r->curve_s[r->ncurve] = e->time_s;
        r->curve_acc[r->ncurve++] = target.loss ? e->test_loss : e->test_accuracy;
    }
    const bool reached = target.loss ? e->test_loss <= target.value : e->test_accuracy >= target.value;
    if (target.value > 0 && reached && isnan(r->time_to_target_s))
        r->time_to_target_s = e->time_s;
    r->final_accuracy = e->test_accuracy;
    r->final_loss = e->test_loss;
}

static void note_instance(const st_instance_record *in, struct sweep_run *r)
{
    const int k = in->rank;
    if (k < 0 || k >= SWEEP_MAX_INSTANCES || in->steps <= 0)
        return;
    r->inst_compute_ms[k] = (float)(1e3 * in->compute_s / (double)in->steps);
    r->inst_wait_ms[k] = (float)(1e3 * in->wait_s / (double)in->steps);
    r->inst_p90_ms[k] = (float)(1e3 * in->step_p90_s);
    if (k >= r->ninst)
        r->ninst = k + 1;
}

/* The run's rates and step split from its counted intervals. */
static int take_rates(struct sweep_run *r, const struct interval_sums *acc, double samples_per_step)
{
    r->samples_per_s = acc->steps * samples_per_step / acc->seconds;
    r->step_ms = 1e3 * acc->seconds / acc->steps;
    r->compute_ms = 1e3 * acc->compute / acc->steps;
    r->allreduce_ms = 1e3 * acc->reduce / acc->steps;
    r->wait_ms = 1e3 * acc->wait / acc->steps;
    double known = r->compute_ms + (isnan(r->allreduce_ms) ? 0 : r->allreduce_ms) +
                   (isnan(r->wait_ms) ? 0 : r->wait_ms);
    r->other_ms = isnan(r->compute_ms) ? NAN : fmax(0, r->step_ms - known);
    /* a NaN or infinite rate, ranked, would win or lose the sweep */
    if (!(isfinite(r->samples_per_s) && r->samples_per_s > 0 && isfinite(r->step_ms) && r->step_ms > 0))
        return run_failed(r, "metrics: the train records give no finite throughput");
    return 0;
}

/* What reading one run's records keeps between lines. */
struct reading {
    double instances, batch;  /* from the run record: NAN before it */
    double first_from, prev_step, instance_sum;
    struct interval_sums acc;
    st_train_record first_train;
    bool summary;
};

/* The run record: the job's shape, and whether it is the run the sweep
 * asked for (its backend, its balance). */
static int take_run_record(const st_run_record *run, struct reading *s, struct sweep_run *r, struct sweep_versions *v)
{
    s->instances = run->instances > 0 ? run->instances : NAN;
    s->batch = run->batch_per_instance > 0  /* samples a step per instance: every micro-batch */
                   ? (double)run->batch_per_instance * (run->grad_accum > 1 ? run->grad_accum : 1)
                   : NAN;
    s->prev_step = (double)run->first_step;
    snprintf(r->precision, sizeof r->precision, "%s", run->precision);
    snprintf(r->mode, sizeof r->mode, "%s", run->mode);
    /* One instance has no all-reduce to check (torch_gpt.py then makes no group).  The record names
     * the group's real backend: a script's SHMTRAIN_TORCH_BACKEND takes effect only where
     * shmtrain_torch is imported (its entry point, installed), and the ceiling's independence is
     * the shm backend's, so a run over gloo in their place is refused, not reported as theirs. */
    if (r->system == SWEEP_TORCH_SHM && run->instances > 1 && strcmp(run->backend, "shm") != 0)
        return run_failed(r, "DDP over shm: the peer's run record says its all-reduce was not shm");
    if (!strncmp(run->system, "pytorch", 7) && run->instances > 1 && run->backend[0] &&
        strcmp(run->backend, r->system == SWEEP_TORCH ? "gloo" : "shm") != 0)
        return run_failed(r, "the script's run record names another backend than the sweep chose "
                             "(SHMTRAIN_TORCH_BACKEND: is shmtrain_torch installed for its python?)");
    if ((r->system == SWEEP_INDEPENDENT) != !strcmp(run->balance, "independent"))
        return run_failed(r, r->system == SWEEP_INDEPENDENT
                                 ? "the run record does not say --balance independent: not the ceiling asked for"
                                 : "the run record says --balance independent: its instances exchanged nothing");
    note_versions(run, v);
    return 0;
}

/* One line's record into the reading: -1 (said in r) when it cannot be. */
static int take_record(const st_record *rec, struct sweep_target target, struct reading *s, struct sweep_run *r,
                       struct sweep_versions *v)
{
    switch (rec->type) {
    case ST_RECORD_RUN: return take_run_record(&rec->u.run, s, r, v);
    case ST_RECORD_TRAIN:
        if (isnan(s->instances) || isnan(s->batch))
            return run_failed(r, "metrics: a train record before the run record");
        if (s->acc.count == 0)  /* what a run of one interval is measured by: the first interval counted */
            s->first_train = rec->u.train, s->first_from = s->prev_step;
        add_interval(&s->acc, &rec->u.train, &s->prev_step, s->instances * s->batch);
        break;
    case ST_RECORD_EVAL: note_eval(&rec->u.eval, target, r); break;
    case ST_RECORD_SUMMARY:
        s->summary = true;
        r->steps = rec->u.summary.steps;
        break;
    case ST_RECORD_INSTANCE:
        note_instance(&rec->u.instance, r);
        if (rec->u.instance.samples_per_s > 0) {
            s->instance_sum += rec->u.instance.samples_per_s;
            r->instance_rates++;
        }
        break;
    case ST_RECORD_UNKNOWN: break;
    }
    return 0;
}

int sweep_read_metrics(const char *text, struct sweep_target target, struct sweep_run *r, struct sweep_versions *v)
{
    r->steps = 0;
    r->samples_per_s = r->step_ms = r->compute_ms = r->allreduce_ms = r->wait_ms = r->other_ms = NAN;
    r->time_to_target_s = r->final_accuracy = r->final_loss = NAN;
    r->ncurve = 0;
    if (!text || !*text)
        return run_failed(r, "the run wrote no metrics");
    r->instance_rates = r->ninst = 0;
    struct reading s = {.instances = NAN, .batch = NAN};
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        char buf[4096];
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len >= sizeof buf)
            len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = nl ? nl + 1 : NULL;
        st_record rec;
        rec.type = st_metrics_parse(buf, &rec);
        if (take_record(&rec, target, &s, r, v) != 0)
            return -1;
    }
    const double per_step = s.instances * s.batch;
    if (s.acc.count == 0)
        return run_failed(r, "metrics: no training interval recorded (is the budget shorter than --log-every?)");
    if (s.acc.count == 1)
        first_interval_only(&s.acc, &s.first_train, s.first_from, per_step);
    if (!s.summary)
        return run_failed(r, "metrics: the run did not finish (no summary record)");
    if (take_rates(r, &s.acc, per_step) != 0)
        return -1;
    /* Independent instances wait for no one: the machine's speed is the sum
     * of each one's own (rank 0's pace times N would hide the slow one). */
    if (r->system == SWEEP_INDEPENDENT && r->instance_rates != (int)s.instances)
        return run_failed(r, "metrics: an independent run needs every instance's own speed (instance records)");
    if (r->system == SWEEP_INDEPENDENT)
        r->samples_per_s = s.instance_sum;
    return 0;
}

int sweep_read_report(const char *text, struct sweep_run *r)
{
    r->rss_max_mb = r->rss_total_mb = r->wall_s = NAN;
    if (!text || !strstr(text, "\"ranks\":"))
        return run_failed(r, "the launcher wrote no report");
    r->wall_s = st_json_get_number(text, "seconds");
    double mx = 0, sum = 0;
    for (const char *p = strstr(text, "\"max_rss_kb\":"); p; p = strstr(p + 1, "\"max_rss_kb\":")) {
        double kb = st_json_get_number(p, "max_rss_kb");
        if (!(kb > 0))
            continue;  /* not measured (or not a size): no part of the peak */
        mx = fmax(mx, kb);
        sum += kb;
    }
    r->rss_max_mb = mx / 1024;
    r->rss_total_mb = sum / 1024;
    const char *ok = st_json_find(text, "ok");
    if (!ok || strncmp(ok, "true", 4) != 0)
        return run_failed(r, "an instance failed");
    return 0;
}

/* ---------------------------------------------------------- statistics -- */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static struct sweep_stat stat_of(double *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]))
            v[k++] = v[i];
    if (k == 0)
        return (struct sweep_stat){NAN, NAN, NAN, 0};
    qsort(v, (size_t)k, sizeof *v, by_value);
    double median = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
    return (struct sweep_stat){median, v[0], v[k - 1], k};
}

static bool mine(const struct sweep_run *r, int setting, int system)
{
    return r->setting == setting && r->system == system && r->ok;
}

/* Statistics of one double field of the successful runs of (setting, system). */
static struct sweep_stat field_stat(const struct sweep_run *runs, int nruns, int setting, int system, size_t offset)
{
    double vals[256];
    int n = 0;
    for (int i = 0; i < nruns && n < 256; i++)
        if (mine(&runs[i], setting, system))
            vals[n++] = *(const double *)((const char *)&runs[i] + offset);
    return stat_of(vals, n);
}

bool sweep_system_ran(const struct sweep_summary *sums, int nsettings, int system)
{
    for (int s = 0; s < nsettings; s++)
        if (sums[s * SWEEP_NSYSTEMS + system].runs > 0)
            return true;
    return false;
}

/* The successful run of (setting, system) closest to the median throughput
 * (`with_curve`: among those with an accuracy curve), or -1. */
static int median_run(const struct sweep_run *runs, int nruns, int setting, int system, double median,
                      bool with_curve)
{
    int at = -1;
    double best = INFINITY;
    for (int i = 0; i < nruns; i++)
        if (mine(&runs[i], setting, system) && (!with_curve || runs[i].ncurve > 0) &&
            fabs(runs[i].samples_per_s - median) < best) {
            best = fabs(runs[i].samples_per_s - median);
            at = i;
        }
    return at;
}

/* The instance the others wait for: the most compute a step. */
static void slowest_instance(const struct sweep_run *r, struct sweep_summary *o)
{
    o->slowest_rank = -1;
    o->imbalance = o->slowest_p90_ms = NAN;
    if (!r || r->ninst < 2)
        return;
    int slow = 0, fast = 0;
    for (int k = 1; k < r->ninst; k++) {
        slow = r->inst_compute_ms[k] > r->inst_compute_ms[slow] ? k : slow;
        fast = r->inst_compute_ms[k] < r->inst_compute_ms[fast] ? k : fast;
    }
    if (!(r->inst_compute_ms[fast] > 0))
        return;
    o->slowest_rank = slow;
    o->imbalance = r->inst_compute_ms[slow] / r->inst_compute_ms[fast];
    o->slowest_p90_ms = r->inst_p90_ms[slow];
}

#define FIELD(name) field_stat(runs, nruns, s, sys, offsetof(struct sweep_run, name))

void sweep_summarize(const struct sweep_run *runs, int nruns, int nsettings, struct sweep_summary *sums)
{
    for (int s = 0; s < nsettings; s++)
        for (int sys = 0; sys < SWEEP_NSYSTEMS; sys++) {
            struct sweep_summary *o = &sums[s * SWEEP_NSYSTEMS + sys];
            memset(o, 0, sizeof *o);
            o->curve_run = -1;
            for (int i = 0; i < nruns; i++)
                if (runs[i].setting == s && runs[i].system == sys) {
                    o->runs++;
                    o->failed += !runs[i].ok;
                    o->reached += runs[i].ok && !isnan(runs[i].time_to_target_s);
                }
            o->samples_per_s = FIELD(samples_per_s);
            o->step_ms = FIELD(step_ms);
            o->time_to_target_s = FIELD(time_to_target_s);
            o->wall_s = FIELD(wall_s);
            o->compute_ms = FIELD(compute_ms).median;
            o->allreduce_ms = FIELD(allreduce_ms).median;
            o->wait_ms = FIELD(wait_ms).median;
            o->other_ms = FIELD(other_ms).median;
            o->final_accuracy = FIELD(final_accuracy).median;
            o->final_loss = FIELD(final_loss).median;
            o->rss_max_mb = FIELD(rss_max_mb).max;
            o->rss_total_mb = FIELD(rss_total_mb).max;
            for (int i = 0; i < nruns; i++)
                if (mine(&runs[i], s, sys) && runs[i].precision[0])
                    snprintf(o->precision, sizeof o->precision, "%s",
                             !o->precision[0] || !strcmp(o->precision, runs[i].precision) ? runs[i].precision
                                                                                          : "mixed");
            /* Draw the repeat whose throughput is closest to the median. */
            o->curve_run = median_run(runs, nruns, s, sys, o->samples_per_s.median, true);
            o->median_run = median_run(runs, nruns, s, sys, o->samples_per_s.median, false);
            slowest_instance(o->median_run >= 0 ? &runs[o->median_run] : NULL, o);
        }
}

int sweep_best(const struct sweep_summary *sums, int nsettings, bool target_set, bool *by_target)
{
    int best = -1;
    *by_target = false;
    if (target_set)
        for (int s = 0; s < nsettings; s++) {
            const struct sweep_summary *o = &sums[s * SWEEP_NSYSTEMS + SWEEP_SHMTRAIN];
            if (o->runs == 0 || o->failed || o->reached < o->runs)
                continue;
            if (best < 0 || o->time_to_target_s.median <
                                sums[best * SWEEP_NSYSTEMS + SWEEP_SHMTRAIN].time_to_target_s.median)
                best = s;
        }
    if (best >= 0) {
        *by_target = true;
        return best;
    }
    for (int s = 0; s < nsettings; s++) {
        const struct sweep_summary *o = &sums[s * SWEEP_NSYSTEMS + SWEEP_SHMTRAIN];
        if (o->samples_per_s.n == 0)
            continue;
        if (best < 0 || o->samples_per_s.median > sums[best * SWEEP_NSYSTEMS].samples_per_s.median)
            best = s;
    }
    for (int s = 0; best < 0 && s < nsettings; s++)  /* no rates at all: the quickest run */
        if (sums[s * SWEEP_NSYSTEMS].wall_s.n && (best < 0 || sums[s * SWEEP_NSYSTEMS].wall_s.median <
                                                               sums[best * SWEEP_NSYSTEMS].wall_s.median))
            best = s;
    for (int s = 0; s < nsettings && best >= 0; s++)
        if (sums[best * SWEEP_NSYSTEMS].samples_per_s.n == 0 && sums[s * SWEEP_NSYSTEMS].wall_s.n &&
            sums[s * SWEEP_NSYSTEMS].wall_s.median < sums[best * SWEEP_NSYSTEMS].wall_s.median)
            best = s;
    return best;
}
