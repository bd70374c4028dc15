/* The engine's kernels chosen by measurement on this CPU (shmtrain/tune.h):
 * the step timed under each kernel switch, the answer cached per machine,
 * oneDNN, model and shape. */
#define _GNU_SOURCE
#include "shmtrain/tune.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shmtrain/tuning.h"
#include "tune_kept.h"

enum { WARM_STEPS = 2, TIMED_STEPS = 5 };  /* per net and candidate: 14 steps each switch that changes the net */
#define KEEP_BELOW 0.97  /* a switch must take 3% off the step: the rounds' spread here is 1-2% */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static bool *field(st_nn_tuning *t, const st_nn_switch *s) { return (bool *)((char *)t + s->offset); }

/* The nets the trials build, and their fixed inputs. */
struct trial {
    const st_nn_tune_request *rq;
    void *x;
    int *labels;
};

/* A net under `tuning` and what it builds (st_net_describe's text, owned
 * by the caller). */
static st_status build(const struct trial *tr, const st_nn_tuning *tuning, st_net **n, char **built)
{
    st_net_config nc = tr->rq->net;
    nc.tuning = *tuning;
    *built = NULL;
    st_status st = st_net_create(n, tr->rq->model, &nc);
    if (st != ST_OK)
        return st;
    size_t size = 0;
    FILE *f = open_memstream(built, &size);
    if (!f)
        return st_fail(ST_ERR_NOMEM, "tune: out of memory");
    st_net_describe(*n, f);
    return fclose(f) == 0 ? ST_OK : st_fail(ST_ERR_NOMEM, "tune: out of memory");
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One step's compute (forward, loss, backward), seconds. */
static st_status step(const struct trial *tr, st_net *n, double *seconds)
{
    float loss;
    const double t0 = now_s();
    st_status st = st_net_forward(n, tr->x);
    if (st == ST_OK)
        st = st_net_loss(n, tr->labels, &loss, NULL);
    if (st == ST_OK)
        st = st_net_backward(n);
    *seconds = now_s() - t0;
    return st;
}

/* The candidate's step over the best's: each warmed, then their steps in
 * alternation (a shared machine drifts within seconds; the first net built
 * also pays the first touches), the ratio of the medians. */
static st_status race(const void *arg, st_net *best, st_net *candidate, double *ratio)
{
    const struct trial *tr = arg;
    double tb[TIMED_STEPS], tc[TIMED_STEPS], unused;
    st_status st = ST_OK;
    for (int s = 0; st == ST_OK && s < WARM_STEPS; s++)
        if ((st = step(tr, best, &unused)) == ST_OK)
            st = step(tr, candidate, &unused);
    for (int s = 0; st == ST_OK && s < TIMED_STEPS; s++)
        if ((st = step(tr, best, &tb[s])) == ST_OK)
            st = step(tr, candidate, &tc[s]);
    if (st != ST_OK)
        return st;
    qsort(tb, TIMED_STEPS, sizeof *tb, by_value);
    qsort(tc, TIMED_STEPS, sizeof *tc, by_value);
    *ratio = tc[TIMED_STEPS / 2] / tb[TIMED_STEPS / 2];
    return ST_OK;
}

static nn_tune_race_fn *racer = race;

void nn_tune_set_race(nn_tune_race_fn *r) { racer = r ? r : race; }

/* A switch is kept where it wins two races, the second run at once after
 * the first: one race under a passing load kept SHMTRAIN_ONEDNN_NO_CHUNKS
 * for cnn at "0.27 of the step" (measured beside CI's tests) where it runs
 * at 0.99 (st-step-ab, unloaded).  The ratio kept is the second's. */
static st_status wins_twice(const struct trial *tr, st_net *best, st_net *candidate, double *ratio)
{
    st_status st = racer(tr, best, candidate, ratio);
    if (st == ST_OK && *ratio < KEEP_BELOW)
        st = racer(tr, best, candidate, ratio);
    return st;
}

/* The CPU's model name as Linux says it ("unnamed" elsewhere). */
static void cpu_name(char *buf, size_t len)
{
    snprintf(buf, len, "unnamed");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            v += *v == ' ';
            snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    if (f)
        fclose(f);
}

/* What an answer depends on, as the cache file's first lines. */
static void key_text(const st_nn_tune_request *rq, char *key, size_t len)
{
    char onednn[64], base[600] = "", machine[200];
    st_nn_onednn_version(onednn, sizeof onednn);
    if (rq->machine)
        snprintf(machine, sizeof machine, "%s", *rq->machine ? rq->machine : "unnamed");
    else
        cpu_name(machine, sizeof machine);
    int n;
    const st_nn_switch *sw = st_nn_switches(&n);
    st_nn_tuning t = rq->net.tuning;
    for (int i = 0; i < n; i++)
        if (*field(&t, &sw[i]) && strlen(base) + strlen(sw[i].env) + 2 < sizeof base)
            strcat(strcat(base, " "), sw[i].env);
    snprintf(key, len,
             "# shmtrain's kernels for this step on this CPU (st_nn_tune); delete to measure again\n"
             "machine %s\nonednn %s %s\nmodel %016llx\nbatch %d\nthreads %d\nprecision %s\nswitches%s\n",
             machine, onednn, st_nn_onednn_isa(),
             (unsigned long long)fnv1a(st_model_text(rq->model), 0xcbf29ce484222325ull), rq->net.batch, rq->threads,
             st_dtype_name(rq->net.precision), base);
}

/* A kept answer for this key: its switches on in out->tuning. */
static bool read_cached(const char *path, const char *key, st_nn_tuned *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char text[4096];
    const size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = '\0';
    return nn_tune_read_kept(text, key, out);
}

/* Written whole or not at all: a temporary file renamed over the old. */
static st_status write_cached(const char *dir, const char *path, const char *key, const st_nn_tuned *out)
{
    char made[4200];
    for (size_t i = 1; dir[i - 1]; i++)  /* each folder on the way, as mkdir -p */
        if (dir[i] == '/' || dir[i] == '\0') {
            snprintf(made, sizeof made, "%.*s", (int)i, dir);
            if (mkdir(made, 0700) != 0 && errno != EEXIST)
                return st_fail(ST_ERR_IO, "tune: cannot make the cache folder %s: %s", made, strerror(errno));
        }
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return st_fail(ST_ERR_IO, "tune: cannot write %s: %s", tmp, strerror(errno));
    bool ok = fprintf(f, "%schose %s\nmeasured in %.1f s: %d kernel switches tried, %d timed\n", key, out->chose,
                      out->measure_s, out->tried, out->timed) > 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return st_fail(ST_ERR_IO, "tune: cannot write %s", path);
    }
    return ST_OK;
}

/* Fixed inputs for the trials: pixels in [-0.5, 0.5) or token ids, and
 * labels of every class. */
static st_status make_inputs(const st_nn_tune_request *rq, struct trial *tr)
{
    const st_model *m = rq->model;
    const size_t in = st_model_input_size(m) * (size_t)rq->net.batch;
    const size_t rows = (size_t)rq->net.batch * (size_t)st_model_positions(m);
    const int vocab = st_model_vocab(m), classes = st_model_classes(m);
    tr->x = malloc(in * 4 + 4);
    tr->labels = malloc(rows * sizeof(int) + sizeof(int));
    if (!tr->x || !tr->labels)
        return st_fail(ST_ERR_NOMEM, "tune: out of memory");
    for (size_t i = 0; i < in; i++) {
        const uint32_t h = (uint32_t)(i * 2654435761u);
        if (vocab)
            ((int32_t *)tr->x)[i] = (int32_t)(h % (uint32_t)vocab);
        else
            ((float *)tr->x)[i] = (float)(h % 1000) / 1000.0f - 0.5f;
    }
    for (size_t i = 0; i < rows; i++)
        tr->labels[i] = (int)(i % (size_t)classes);
    return ST_OK;
}

/* Each kernel switch the caller left off, raced against the best so far;
 * kept where it takes KEEP_BELOW off the step. */
static st_status measure(const struct trial *tr, st_nn_tuned *out)
{
    int n;
    const st_nn_switch *sw = st_nn_switches(&n);
    st_net *best = NULL, *candidate = NULL;
    char *best_built = NULL, *built = NULL;
    double step_share = 1;  /* the kept switches' step over the defaults' */
    st_status st = build(tr, &out->tuning, &best, &best_built);
    for (int i = 0; st == ST_OK && i < n; i++) {
        if (!sw[i].kernel || *field(&out->tuning, &sw[i]))
            continue;
        st_nn_tuning t = out->tuning;
        *field(&t, &sw[i]) = true;
        out->tried++;
        double ratio = 1;
        if ((st = build(tr, &t, &candidate, &built)) == ST_OK && strcmp(built, best_built)) {
            out->timed++;
            st = wins_twice(tr, best, candidate, &ratio);
        }
        if (st == ST_OK && ratio < KEEP_BELOW) {
            st_net *old = best;
            char *old_built = best_built;
            best = candidate, best_built = built;
            candidate = old, built = old_built;
            out->tuning = t;
            step_share *= ratio;
            const size_t used = strlen(out->chose);
            snprintf(out->chose + used, sizeof out->chose - used, "%s%s (%.2f of the step)", used ? " " : "",
                     sw[i].env, step_share);
        }
        st_net_destroy(candidate);
        free(built);
        candidate = NULL, built = NULL;
    }
    st_net_destroy(best);
    free(best_built);
    if (!out->chose[0])
        snprintf(out->chose, sizeof out->chose, "the defaults");
    return st;
}

st_status st_nn_tune(const st_nn_tune_request *rq, st_nn_tuned *out)
{
    *out = (st_nn_tuned){.tuning = rq ? rq->net.tuning : (st_nn_tuning){0}};
    if (!rq || !rq->model || rq->net.batch < 1 || rq->threads < 1)
        return st_fail(ST_ERR_INVALID, "tune: a model, a batch and threads of at least 1");
    char key[1200];
    key_text(rq, key, sizeof key);
    if (rq->cache_dir) {
        snprintf(out->cache_file, sizeof out->cache_file, "%s/kernels-%016llx.txt", rq->cache_dir,
                 (unsigned long long)fnv1a(key, 0xcbf29ce484222325ull));
        if (!rq->force && read_cached(out->cache_file, key, out)) {
            out->cached = true;
            return ST_OK;
        }
        out->tuning = rq->net.tuning;
    }
    if (rq->cached_only) {
        snprintf(out->chose, sizeof out->chose, "the defaults");
        return ST_OK;
    }
    struct trial tr = {.rq = rq};
    const double t0 = now_s();
    st_status st = make_inputs(rq, &tr);
    if (st == ST_OK)
        st = measure(&tr, out);
    out->measure_s = now_s() - t0;
    free(tr.x);
    free(tr.labels);
    if (st != ST_OK)
        return st;
    if (rq->cache_dir && (st = write_cached(rq->cache_dir, out->cache_file, key, out)) != ST_OK)
        out->cache_file[0] = '\0';  /* measured, not kept */
    return st;
}
