/* The metrics records (include/shmtrain/metrics.h): one writer, one reader. */
#define _GNU_SOURCE
#include "shmtrain/metrics.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "shmtrain/json.h"

static const char *const TYPE_NAMES[] = {[ST_RECORD_RUN] = "run", [ST_RECORD_TRAIN] = "train",
                                         [ST_RECORD_EVAL] = "eval", [ST_RECORD_SUMMARY] = "summary",
                                         [ST_RECORD_INSTANCE] = "instance"};

/* --------------------------------------------------------- the fields -- */

/* Every record's fields, once: the writer says them in this order, the
 * reader reads them back, both from these tables.  A key is its struct
 * member's name. */
enum field_type { F_STRING, F_INT, F_LONG, F_LLONG, F_U64, F_NUMBER };
enum field_when {
    W_ALWAYS,
    W_SET,        /* a number above 0, a string not empty */
    W_ABOVE_ONE,  /* grad_accum: one is said by saying nothing */
    W_FLAG,       /* the writer's own field: the bool at `cond`, set on reading when the key is there */
    W_WITH_LAST   /* said with the field before it (a pair: layers and lowp_layers) */
};

struct field {
    const char *key;
    enum field_type type;
    size_t at, size;         /* the member's offset and size */
    const char *format;      /* a number's */
    enum field_when when;
    size_t cond;             /* W_FLAG: the bool's offset */
    const char *was;         /* the key older writers gave it, read where the key is not there */
};

#define FIELD(rec, member, type, format, when, cond) \
    {#member, type, offsetof(rec, member), sizeof(((rec *)0)->member), format, when, cond, NULL}
#define RUN(m, t, w) FIELD(st_run_record, m, t, NULL, w, 0)
static const struct field RUN_FIELDS[] = {
    RUN(system, F_STRING, W_ALWAYS), RUN(instances, F_INT, W_ALWAYS), RUN(threads, F_INT, W_ALWAYS),
    RUN(model, F_STRING, W_ALWAYS), RUN(params, F_LLONG, W_ALWAYS), RUN(batch_per_instance, F_INT, W_ALWAYS),
    RUN(onednn, F_STRING, W_SET), RUN(isa, F_STRING, W_SET), RUN(launcher, F_STRING, W_SET),
    RUN(torch, F_STRING, W_SET), RUN(backend, F_STRING, W_SET), RUN(mode, F_STRING, W_SET),
    RUN(allreduce_dtype, F_STRING, W_SET), RUN(precision, F_STRING, W_SET), RUN(recipe, F_STRING, W_SET),
    RUN(layers, F_INT, W_SET), 
    {"lowp_layers", F_INT, offsetof(st_run_record, lowp_layers), sizeof(int), NULL, W_WITH_LAST, 0, "bf16_layers"},
    RUN(first_step, F_U64, W_ALWAYS), RUN(context, F_INT, W_SET), RUN(grad_accum, F_INT, W_ABOVE_ONE),
    RUN(balance, F_STRING, W_SET), RUN(kernels, F_STRING, W_SET),
};
#define TRAIN(m, format, w) FIELD(st_train_record, m, F_NUMBER, format, w, 0)
static const struct field TRAIN_FIELDS[] = {
    FIELD(st_train_record, step, F_U64, NULL, W_ALWAYS, 0), TRAIN(epoch, "%.4f", W_ALWAYS),
    TRAIN(loss, "%.6f", W_ALWAYS), TRAIN(accuracy, "%.5f", W_ALWAYS), TRAIN(lr, "%.6g", W_ALWAYS),
    TRAIN(samples_per_s, "%.1f", W_ALWAYS), TRAIN(tokens_per_s, "%.1f", W_SET), TRAIN(time_s, "%.3f", W_ALWAYS),
    TRAIN(compute_s, "%.4f", W_ALWAYS), TRAIN(allreduce_s, "%.4f", W_ALWAYS), TRAIN(wait_s, "%.4f", W_ALWAYS),
    TRAIN(data_s, "%.4f", W_SET),
    FIELD(st_train_record, page_faults, F_NUMBER, "%.1f", W_FLAG, offsetof(st_train_record, faults_said)),
};
#define EVAL(m, format) FIELD(st_eval_record, m, F_NUMBER, format, W_ALWAYS, 0)
static const struct field EVAL_FIELDS[] = {
    FIELD(st_eval_record, step, F_U64, NULL, W_ALWAYS, 0), FIELD(st_eval_record, epoch, F_U64, NULL, W_ALWAYS, 0),
    EVAL(test_loss, "%.6f"), EVAL(test_accuracy, "%.5f"), EVAL(time_s, "%.3f"), EVAL(eval_s, "%.3f"),
    FIELD(st_eval_record, predictions, F_U64, NULL, W_ALWAYS, 0),
};
#define SUMMARY(m, format, w) FIELD(st_summary_record, m, F_NUMBER, format, w, 0)
static const struct field SUMMARY_FIELDS[] = {
    FIELD(st_summary_record, steps, F_LONG, NULL, W_ALWAYS, 0),
    FIELD(st_summary_record, instances, F_INT, NULL, W_ALWAYS, 0),
    FIELD(st_summary_record, batch_per_instance, F_INT, NULL, W_ALWAYS, 0),
    SUMMARY(total_s, "%.3f", W_ALWAYS), SUMMARY(train_s, "%.3f", W_ALWAYS), SUMMARY(samples_per_s, "%.1f", W_ALWAYS),
    SUMMARY(tokens_per_s, "%.1f", W_SET), SUMMARY(final_test_accuracy, "%.5f", W_ALWAYS),
    SUMMARY(best_test_accuracy, "%.5f", W_ALWAYS), SUMMARY(peak_rss_mb, "%.1f", W_SET),
    FIELD(st_summary_record, micro_batches, F_U64, NULL, W_SET, 0),
    FIELD(st_summary_record, micro_batches_here, F_U64, NULL, W_WITH_LAST, 0),
    FIELD(st_summary_record, samples_decoded, F_U64, NULL, W_SET, 0),
    FIELD(st_summary_record, step_allreduces, F_U64, NULL, W_FLAG, offsetof(st_summary_record, allreduces_said)),
};
#define INSTANCE(m, format, w) FIELD(st_instance_record, m, F_NUMBER, format, w, 0)
static const struct field INSTANCE_FIELDS[] = {
    FIELD(st_instance_record, rank, F_INT, NULL, W_ALWAYS, 0),
    FIELD(st_instance_record, steps, F_LONG, NULL, W_ALWAYS, 0),
    INSTANCE(step_p50_s, "%.6f", W_ALWAYS), INSTANCE(step_p90_s, "%.6f", W_ALWAYS),
    INSTANCE(step_max_s, "%.6f", W_ALWAYS), INSTANCE(compute_s, "%.4f", W_ALWAYS),
    INSTANCE(exchange_s, "%.4f", W_ALWAYS), INSTANCE(wait_s, "%.4f", W_ALWAYS),
    INSTANCE(samples_per_s, "%.1f", W_SET),
};

static const struct fields {
    const struct field *v;
    size_t n;
} FIELDS[] = {
#define OF(table) {table, sizeof table / sizeof *table}
    [ST_RECORD_RUN] = OF(RUN_FIELDS), [ST_RECORD_TRAIN] = OF(TRAIN_FIELDS), [ST_RECORD_EVAL] = OF(EVAL_FIELDS),
    [ST_RECORD_SUMMARY] = OF(SUMMARY_FIELDS), [ST_RECORD_INSTANCE] = OF(INSTANCE_FIELDS),
#undef OF
};
_Static_assert(sizeof FIELDS / sizeof *FIELDS == ST_RECORD_INSTANCE + 1, "a field table per record type");

/* A field's value as a number (a string: its length), for W_SET. */
static double value_of(const struct field *f, const char *rec)
{
    const char *p = rec + f->at;
    switch (f->type) {
    case F_STRING: return (double)strlen(p);
    case F_INT: return *(const int *)(const void *)p;
    case F_LONG: return (double)*(const long *)(const void *)p;
    case F_LLONG: return (double)*(const long long *)(const void *)p;
    case F_U64: return (double)*(const unsigned long long *)(const void *)p;
    case F_NUMBER: return *(const double *)(const void *)p;
    }
    return 0;
}

static bool said(const struct field *f, const char *rec)
{
    switch (f->when) {
    case W_ALWAYS: return true;
    case W_SET: return value_of(f, rec) > 0;
    case W_ABOVE_ONE: return value_of(f, rec) > 1;
    case W_FLAG: return *(const bool *)(const void *)(rec + f->cond);
    case W_WITH_LAST: return said(f - 1, rec);
    }
    return false;
}

static void write_fields(st_json *j, st_record_type type, const void *record)
{
    const struct fields *t = &FIELDS[type];
    const char *rec = record;
    for (size_t i = 0; i < t->n; i++) {
        const struct field *f = &t->v[i];
        const void *p = rec + f->at;
        if (!said(f, rec))
            continue;
        switch (f->type) {
        case F_STRING: st_json_string(j, f->key, p); break;
        case F_INT: st_json_int(j, f->key, *(const int *)p); break;
        case F_LONG: st_json_int(j, f->key, *(const long *)p); break;
        case F_LLONG: st_json_int(j, f->key, *(const long long *)p); break;
        case F_U64: st_json_uint(j, f->key, *(const unsigned long long *)p); break;
        case F_NUMBER: st_json_number(j, f->key, *(const double *)p, f->format); break;
        }
    }
}

static void write_reached(st_json *j, const st_summary_record *r)
{
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
    write_fields(&j, r->type, &r->u);
    if (r->type == ST_RECORD_SUMMARY)
        write_reached(&j, &r->u.summary);
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

static void read_fields(const char *line, st_record_type type, void *record)
{
    const struct fields *t = &FIELDS[type];
    char *rec = record;
    for (size_t i = 0; i < t->n; i++) {
        const struct field *f = &t->v[i];
        void *p = rec + f->at;
        const char *key = f->was && !st_json_find(line, f->key) ? f->was : f->key;
        switch (f->type) {
        case F_STRING: st_json_get_string(line, key, p, f->size); break;
        case F_INT: *(int *)p = int_count(line, key); break;
        case F_LONG: *(long *)p = (long)count(line, key); break;
        case F_LLONG: *(long long *)p = (long long)count(line, key); break;
        case F_U64: *(unsigned long long *)p = count(line, key); break;
        case F_NUMBER: *(double *)p = num(line, key); break;
        }
        if (f->when == W_FLAG)
            *(bool *)(rec + f->cond) = st_json_find(line, f->key) != NULL;
    }
}

static void read_reached(const char *line, st_summary_record *r)
{
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
    if (out->type != ST_RECORD_UNKNOWN)
        read_fields(line, out->type, &out->u);
    if (out->type == ST_RECORD_SUMMARY)
        read_reached(line, &out->u.summary);
    return out->type;
}
