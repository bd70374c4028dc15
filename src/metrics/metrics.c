/* The metrics records (include/shmtrain/metrics.h): one writer, one reader. */
#define _GNU_SOURCE
#include "shmtrain/metrics.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/json.h"

static const char *const TYPE_NAMES[] = {[ST_RECORD_RUN] = "run", [ST_RECORD_TRAIN] = "train",
                                         [ST_RECORD_EVAL] = "eval", [ST_RECORD_SUMMARY] = "summary",
                                         [ST_RECORD_INSTANCE] = "instance"};

static void optional_string(st_json *j, const char *key, const char *value)
{
    if (value[0])
        st_json_string(j, key, value);
}

static void write_run(st_json *j, const st_run_record *r)
{
    st_json_string(j, "system", r->system);
    st_json_int(j, "instances", r->instances);
    st_json_int(j, "threads", r->threads);
    st_json_string(j, "model", r->model);
    st_json_int(j, "params", r->params);
    st_json_int(j, "batch_per_instance", r->batch_per_instance);
    optional_string(j, "onednn", r->onednn);
    optional_string(j, "isa", r->isa);
    optional_string(j, "launcher", r->launcher);
    optional_string(j, "torch", r->torch);
    optional_string(j, "backend", r->backend);
    optional_string(j, "mode", r->mode);
    optional_string(j, "allreduce_dtype", r->allreduce_dtype);
    optional_string(j, "precision", r->precision);
    optional_string(j, "recipe", r->recipe);
    if (r->layers > 0) {
        st_json_int(j, "layers", r->layers);
        st_json_int(j, "bf16_layers", r->bf16_layers);
    }
    st_json_uint(j, "first_step", r->first_step);
    if (r->context > 0)
        st_json_int(j, "context", r->context);
    if (r->grad_accum > 1)
        st_json_int(j, "grad_accum", r->grad_accum);
    optional_string(j, "balance", r->balance);
}

static void write_train(st_json *j, const st_train_record *r)
{
    st_json_uint(j, "step", r->step);
    st_json_number(j, "epoch", r->epoch, "%.4f");
    st_json_number(j, "loss", r->loss, "%.6f");
    st_json_number(j, "accuracy", r->accuracy, "%.5f");
    st_json_number(j, "lr", r->lr, "%.6g");
    st_json_number(j, "samples_per_s", r->samples_per_s, "%.1f");
    if (r->tokens_per_s > 0)
        st_json_number(j, "tokens_per_s", r->tokens_per_s, "%.1f");
    st_json_number(j, "time_s", r->time_s, "%.3f");
    st_json_number(j, "compute_s", r->compute_s, "%.4f");
    st_json_number(j, "allreduce_s", r->allreduce_s, "%.4f");
    st_json_number(j, "wait_s", r->wait_s, "%.4f");
    if (r->data_s > 0)
        st_json_number(j, "data_s", r->data_s, "%.4f");
    if (r->faults_said)
        st_json_number(j, "page_faults", r->page_faults, "%.1f");
}

static void write_eval(st_json *j, const st_eval_record *r)
{
    st_json_uint(j, "step", r->step);
    st_json_uint(j, "epoch", r->epoch);
    st_json_number(j, "test_loss", r->test_loss, "%.6f");
    st_json_number(j, "test_accuracy", r->test_accuracy, "%.5f");
    st_json_number(j, "time_s", r->time_s, "%.3f");
    st_json_number(j, "eval_s", r->eval_s, "%.3f");
    st_json_uint(j, "predictions", r->predictions);
}

static void write_instance(st_json *j, const st_instance_record *r)
{
    st_json_int(j, "rank", r->rank);
    st_json_int(j, "steps", r->steps);
    st_json_number(j, "step_p50_s", r->step_p50_s, "%.6f");
    st_json_number(j, "step_p90_s", r->step_p90_s, "%.6f");
    st_json_number(j, "step_max_s", r->step_max_s, "%.6f");
    st_json_number(j, "compute_s", r->compute_s, "%.4f");
    st_json_number(j, "exchange_s", r->exchange_s, "%.4f");
    st_json_number(j, "wait_s", r->wait_s, "%.4f");
    if (r->samples_per_s > 0)
        st_json_number(j, "samples_per_s", r->samples_per_s, "%.1f");
}

static void write_summary(st_json *j, const st_summary_record *r)
{
    st_json_int(j, "steps", r->steps);
    st_json_int(j, "instances", r->instances);
    st_json_int(j, "batch_per_instance", r->batch_per_instance);
    st_json_number(j, "total_s", r->total_s, "%.3f");
    st_json_number(j, "train_s", r->train_s, "%.3f");
    st_json_number(j, "samples_per_s", r->samples_per_s, "%.1f");
    if (r->tokens_per_s > 0)
        st_json_number(j, "tokens_per_s", r->tokens_per_s, "%.1f");
    st_json_number(j, "final_test_accuracy", r->final_test_accuracy, "%.5f");
    st_json_number(j, "best_test_accuracy", r->best_test_accuracy, "%.5f");
    if (r->peak_rss_mb > 0)
        st_json_number(j, "peak_rss_mb", r->peak_rss_mb, "%.1f");
    if (r->micro_batches > 0) {
        st_json_uint(j, "micro_batches", r->micro_batches);
        st_json_uint(j, "micro_batches_here", r->micro_batches_here);
    }
    if (r->allreduces_said)
        st_json_uint(j, "step_allreduces", r->step_allreduces);
    st_json_object_begin(j, "time_to_accuracy_s");
    for (int i = 0; i < r->nreached && i < ST_METRICS_MAX_TARGETS; i++) {
        char key[16];
        snprintf(key, sizeof key, "%.2f", r->reached_accuracy[i]);
        st_json_number(j, key, r->reached_s[i], "%.2f");
    }
    st_json_object_end(j);
}

/* The record's line, JSON and its newline, in a buffer of its own
 * (malloc'd; NULL when out of memory). */
static char *record_line(const st_record *r, size_t *len)
{
    char *line = NULL;
    FILE *m = open_memstream(&line, len);
    if (!m)
        return NULL;
    st_json j;
    st_json_init(&j, m);
    st_json_object_begin(&j, NULL);
    st_json_string(&j, "type", TYPE_NAMES[r->type]);
    switch (r->type) {
    case ST_RECORD_RUN: write_run(&j, &r->u.run); break;
    case ST_RECORD_TRAIN: write_train(&j, &r->u.train); break;
    case ST_RECORD_EVAL: write_eval(&j, &r->u.eval); break;
    case ST_RECORD_SUMMARY: write_summary(&j, &r->u.summary); break;
    case ST_RECORD_INSTANCE: write_instance(&j, &r->u.instance); break;
    case ST_RECORD_UNKNOWN: break;
    }
    st_json_object_end(&j);
    fputc('\n', m);
    if (fclose(m) != 0) {
        free(line);
        return NULL;
    }
    return line;
}

st_status st_metrics_write(FILE *f, const st_record *r)
{
    if (!f || r->type <= ST_RECORD_UNKNOWN || r->type > ST_RECORD_INSTANCE)
        return st_fail(ST_ERR_INVALID, "metrics: no file, or no such record type");
    size_t len;
    char *line = record_line(r, &len);
    if (!line)
        return st_fail(ST_ERR_NOMEM, "metrics: out of memory");
    const off_t start = ftello(f);
    const bool written = fwrite(line, 1, len, f) == len;
    const bool ok = fflush(f) == 0 && written;
    const int err = errno;
    free(line);
    if (ok)
        return ST_OK;
    /* a full disk takes part of a line: cut the file back to the last whole one */
    clearerr(f);
    if (start >= 0 && ftruncate(fileno(f), start) == 0)
        fseeko(f, start, SEEK_SET);
    return st_fail(ST_ERR_IO, "%s", strerror(err ? err : EIO));
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* A record's step: metrics.jsonl's "step" field, or scalars.csv's first
 * column; -1 when the line has none (a run or summary record, the header). */
static long long line_step(const char *line, bool csv)
{
    const char *p = csv ? line : strstr(line, "\"step\":");
    if (!p)
        return -1;
    p += csv ? 0 : 7;
    if (!is_digit(*p))
        return -1;
    return strtoll(p, NULL, 10);
}

st_status st_metrics_drop_after(const char *path, uint64_t step, bool csv)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return errno == ENOENT ? ST_OK : st_fail(ST_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.resume.%d", path, (int)getpid()) >= sizeof tmp) {
        fclose(in);
        return st_fail(ST_ERR_IO, "%s: the name is too long", path);
    }
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return st_fail(ST_ERR_IO, "%s: cannot write beside it: %s", path, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool ok = true;
    while ((n = getline(&line, &cap, in)) > 0)
        if (line[n - 1] == '\n' && line_step(line, csv) <= (long long)step)  /* a cut last line goes too */
            ok &= fwrite(line, 1, (size_t)n, out) == (size_t)n;
    free(line);
    ok &= !ferror(in);
    fclose(in);
    ok &= fflush(out) == 0 && fsync(fileno(out)) == 0;
    const int err = errno;
    ok &= fclose(out) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return st_fail(ST_ERR_IO, "%s: cannot drop the steps after %llu: %s", path, (unsigned long long)step,
                       strerror(ok ? errno : err));
    }
    return ST_OK;
}

/* ------------------------------------------------------------- reading -- */

static double num(const char *line, const char *key) { return st_json_get_number(line, key); }

/* A count another program wrote: 0 when absent or not positive, and held to
 * what its field can take (a double past the target type's range does not
 * convert: undefined behaviour). */
static unsigned long long count(const char *line, const char *key)
{
    double v = num(line, key);
    return v > 0 ? (v < 0x1p53 ? (unsigned long long)v : 1ull << 53) : 0;
}

static int int_count(const char *line, const char *key)
{
    unsigned long long v = count(line, key);
    return v < INT_MAX ? (int)v : INT_MAX;
}

static void parse_summary(const char *line, st_summary_record *r)
{
    r->steps = (long)count(line, "steps");
    r->instances = int_count(line, "instances");
    r->batch_per_instance = int_count(line, "batch_per_instance");
    r->total_s = num(line, "total_s");
    r->train_s = num(line, "train_s");
    r->samples_per_s = num(line, "samples_per_s");
    r->tokens_per_s = num(line, "tokens_per_s");
    r->final_test_accuracy = num(line, "final_test_accuracy");
    r->best_test_accuracy = num(line, "best_test_accuracy");
    r->peak_rss_mb = num(line, "peak_rss_mb");
    r->micro_batches = count(line, "micro_batches");
    r->micro_batches_here = count(line, "micro_batches_here");
    r->allreduces_said = st_json_find(line, "step_allreduces") != NULL;
    r->step_allreduces = count(line, "step_allreduces");
    const char *p = st_json_find(line, "time_to_accuracy_s");
    if (!p || *p != '{')
        return;
    for (p++; *p == '"' && r->nreached < ST_METRICS_MAX_TARGETS;) {
        char *end;
        double acc = strtod(p + 1, &end);
        if (end == p + 1 || strncmp(end, "\":", 2) != 0)
            break;
        double s = strtod(end + 2, &end);
        r->reached_accuracy[r->nreached] = acc;
        r->reached_s[r->nreached++] = s;
        p = *end == ',' ? end + 1 : end;
    }
}

st_record_type st_metrics_parse(const char *line, st_record *out)
{
    memset(out, 0, sizeof *out);
    char type[16];
    st_json_get_string(line, "type", type, sizeof type);
    for (int t = ST_RECORD_RUN; t <= ST_RECORD_INSTANCE; t++)
        if (!strcmp(type, TYPE_NAMES[t]))
            out->type = (st_record_type)t;
    switch (out->type) {
    case ST_RECORD_RUN: {
        st_run_record *r = &out->u.run;
        st_json_get_string(line, "system", r->system, sizeof r->system);
        r->instances = int_count(line, "instances");
        r->threads = int_count(line, "threads");
        r->batch_per_instance = int_count(line, "batch_per_instance");
        st_json_get_string(line, "model", r->model, sizeof r->model);
        r->params = (long long)count(line, "params");
        st_json_get_string(line, "onednn", r->onednn, sizeof r->onednn);
        st_json_get_string(line, "isa", r->isa, sizeof r->isa);
        st_json_get_string(line, "launcher", r->launcher, sizeof r->launcher);
        st_json_get_string(line, "torch", r->torch, sizeof r->torch);
        st_json_get_string(line, "backend", r->backend, sizeof r->backend);
        st_json_get_string(line, "mode", r->mode, sizeof r->mode);
        st_json_get_string(line, "allreduce_dtype", r->allreduce_dtype, sizeof r->allreduce_dtype);
        st_json_get_string(line, "precision", r->precision, sizeof r->precision);
        st_json_get_string(line, "recipe", r->recipe, sizeof r->recipe);
        r->layers = int_count(line, "layers");
        r->bf16_layers = int_count(line, "bf16_layers");
        r->first_step = count(line, "first_step");
        r->context = int_count(line, "context");
        r->grad_accum = int_count(line, "grad_accum");
        st_json_get_string(line, "balance", r->balance, sizeof r->balance);
        break;
    }
    case ST_RECORD_TRAIN: {
        st_train_record *r = &out->u.train;
        r->step = count(line, "step");
        r->epoch = num(line, "epoch");
        r->loss = num(line, "loss");
        r->accuracy = num(line, "accuracy");
        r->lr = num(line, "lr");
        r->samples_per_s = num(line, "samples_per_s");
        r->tokens_per_s = num(line, "tokens_per_s");
        r->time_s = num(line, "time_s");
        r->compute_s = num(line, "compute_s");
        r->allreduce_s = num(line, "allreduce_s");
        r->wait_s = num(line, "wait_s");
        r->data_s = num(line, "data_s");
        r->faults_said = st_json_find(line, "page_faults") != NULL;
        r->page_faults = num(line, "page_faults");
        break;
    }
    case ST_RECORD_EVAL: {
        st_eval_record *r = &out->u.eval;
        r->step = count(line, "step");
        r->epoch = count(line, "epoch");
        r->test_loss = num(line, "test_loss");
        r->test_accuracy = num(line, "test_accuracy");
        r->time_s = num(line, "time_s");
        r->eval_s = num(line, "eval_s");
        r->predictions = count(line, "predictions");
        break;
    }
    case ST_RECORD_SUMMARY: parse_summary(line, &out->u.summary); break;
    case ST_RECORD_INSTANCE: {
        st_instance_record *r = &out->u.instance;
        r->rank = int_count(line, "rank");
        r->steps = (long)count(line, "steps");
        r->step_p50_s = num(line, "step_p50_s");
        r->step_p90_s = num(line, "step_p90_s");
        r->step_max_s = num(line, "step_max_s");
        r->compute_s = num(line, "compute_s");
        r->exchange_s = num(line, "exchange_s");
        r->wait_s = num(line, "wait_s");
        r->samples_per_s = num(line, "samples_per_s");
        break;
    }
    case ST_RECORD_UNKNOWN: break;
    }
    return out->type;
}
