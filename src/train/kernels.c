/* The engine's kernels for this run (issue 66): rank 0 measures them
 * (--tune) or reads the answer a --tune before it kept, and every instance
 * takes rank 0's, so that the replicas compute alike.  Where no answer is
 * kept the engine's defaults run, as before.  What chose them and each
 * layer's kernels are said in the run folder's kernels.txt, and before any
 * run by `shmtrain --summary=kernels` (the same text). */
#define _GNU_SOURCE
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shmtrain/env.h"
#include "shmtrain/tune.h"
#include "trainer.h"

/* $XDG_CACHE_HOME/shmtrain, else $HOME/.cache/shmtrain; false: neither set. */
static bool cache_dir(char *dir, size_t len)
{
    const char *xdg = st_env_text(ST_ENV_XDG_CACHE_HOME), *home = st_env_text(ST_ENV_HOME);
    if (xdg && *xdg)
        return (size_t)snprintf(dir, len, "%s/shmtrain", xdg) < len;
    if (home && *home) {
        char cache[4096];
        if ((size_t)snprintf(cache, sizeof cache, "%s/.cache", home) >= sizeof cache)
            return false;
        return (size_t)snprintf(dir, len, "%s/shmtrain", cache) < len;
    }
    return false;
}

struct answer {
    st_status status;
    char error[256];
    st_nn_tuned tuned;
};

/* The tuner's answer for this model and net: measured when `measure`,
 * else read where one is kept (else the caller's switches). */
static st_status answer_for(const st_model *m, const st_net_config *nc, bool measure, st_nn_tuned *out)
{
    char dir[4096];
    const bool have_dir = cache_dir(dir, sizeof dir);
    const st_nn_tune_request rq = {.model = m, .net = *nc, .threads = omp_get_max_threads(),
                                   .cache_dir = have_dir ? dir : NULL, .force = measure, .cached_only = !measure};
    return st_nn_tune(&rq, out);
}

static void rank0_answer(struct trainer *t, const st_net_config *nc, struct answer *a)
{
    if (t->o->tune)
        train_say(t, "measuring the engine's kernels for %s on this CPU (--tune)\n", t->o->model);
    a->status = answer_for(t->model, nc, t->o->tune, &a->tuned);
    if (a->status == ST_ERR_IO) {  /* measured, but not kept: a warning, the run goes on */
        fprintf(stderr, "shmtrain: warning: %s\n", st_last_error());
        a->status = ST_OK;
    }
    if (a->status != ST_OK)
        snprintf(a->error, sizeof a->error, "%s", st_last_error());
}

st_status train_kernels(struct trainer *t, st_net_config *nc)
{
    struct answer a = {.tuned = {.tuning = nc->tuning}};
    if (t->rank == 0)
        rank0_answer(t, nc, &a);
    st_status st = t->world > 1 ? comm_broadcast(&t->comm, &a, sizeof a, 0) : ST_OK;
    if (st != ST_OK)
        return st;
    if (a.status != ST_OK)
        return st_fail(a.status, "%s", a.error);
    t->asked = nc->tuning;
    nc->tuning = a.tuned.tuning;
    t->tuned = a.tuned;
    if (a.tuned.cached)
        train_say(t, "kernels: %s (kept in %s)\n", a.tuned.chose, a.tuned.cache_file);
    else if (t->o->tune)
        train_say(t, "kernels: %s, measured in %.1f s (%d switches tried, %d changed the net%s%s)\n", a.tuned.chose,
                  a.tuned.measure_s, a.tuned.tried, a.tuned.timed, *a.tuned.cache_file ? "; kept in " : "",
                  a.tuned.cache_file);
    return ST_OK;
}

/* What chose the kernels, then each layer's (st_net_describe): the text of
 * kernels.txt and of --summary=kernels.  `asked`: the caller's switches,
 * before the tuner's answer. */
static void describe(FILE *f, const st_net *n, const st_nn_tuned *a, const st_nn_tuning *asked, bool measured)
{
    fprintf(f, "# each layer's kernels: forward / backward-weights / backward-data (none where its input takes\n"
               "# no gradient), by oneDNN's name for its implementation (the first it offers for the shape) or\n"
               "# the engine's own C step, and what fused or moved it; the engine's choices are its switches\n"
               "# (docs/engine.md)\n");
    if (a->cached)
        fprintf(f, "# chosen by measurement on this CPU, kept by an earlier --tune in %s: %s\n", a->cache_file,
                a->chose);
    else if (measured)
        fprintf(f, "# chosen by measurement on this CPU, this run's --tune (%.1f s, %d switches tried): %s\n",
                a->measure_s, a->tried, a->chose);
    else
        fprintf(f, "# the engine's defaults: nothing measured for this CPU, model, batch, threads and precision "
                   "(--tune measures)\n");
    int count;
    const st_nn_switch *sw = st_nn_switches(&count);
    for (int i = 0; i < count; i++)
        if (*(const bool *)((const char *)&a->tuning + sw[i].offset))
            fprintf(f, "# %s on: %s\n", sw[i].env,
                    *(const bool *)((const char *)asked + sw[i].offset) ? "the caller's (the environment)"
                                                                          : "kept by the measurement");
    st_net_describe(n, f);
}

/* kernels.txt beside the metrics (rank 0), written aside and renamed; one
 * not written is a warning: the run goes on. */
void train_kernels_keep(const struct trainer *t)
{
    if (t->rank != 0 || !t->o->events_dir)
        return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/kernels.txt", t->o->events_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL;
    if (f) {
        describe(f, t->net, &t->tuned, &t->asked, t->o->tune);
        ok = !ferror(f);
        ok = fclose(f) == 0 && ok;
    }
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "shmtrain: warning: %s not written: %s\n", path, strerror(errno));
        unlink(tmp);
    }
}

st_status st_train_describe_kernels(const st_model *m, const st_train_options *o, FILE *f)
{
    st_net *n = NULL;
    st_nn_tuned a;
    const st_net_config nc = {.batch = o->batch, .precision = o->precision, .tuning = o->tuning};
    st_status st = answer_for(m, &nc, false, &a);
    if (st == ST_OK) {
        st_net_config built = nc;
        built.tuning = a.tuning;
        st = st_net_create(&n, m, &built);
    }
    if (st == ST_OK)
        describe(f, n, &a, &o->tuning, false);
    st_net_destroy(n);
    return st;
}
