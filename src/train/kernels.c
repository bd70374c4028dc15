/* The engine's kernels for this run (issue 66): rank 0 measures them
 * (--tune) or reads the answer a --tune before it kept, and every instance
 * takes rank 0's, so that the replicas compute alike.  Where no answer is
 * kept the engine's defaults run, as before. */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <string.h>

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

static void rank0_answer(struct trainer *t, const st_net_config *nc, struct answer *a)
{
    char dir[4096];
    const bool have_dir = cache_dir(dir, sizeof dir);
    const st_nn_tune_request rq = {.model = t->model, .net = *nc, .threads = omp_get_max_threads(),
                                   .cache_dir = have_dir ? dir : NULL, .force = t->o->tune,
                                   .cached_only = !t->o->tune};
    if (t->o->tune)
        train_say(t, "measuring the engine's kernels for %s on this CPU (--tune)\n", t->o->model);
    a->status = st_nn_tune(&rq, &a->tuned);
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
    nc->tuning = a.tuned.tuning;
    snprintf(t->kernels, sizeof t->kernels, "%s", a.tuned.chose);
    if (a.tuned.cached)
        train_say(t, "kernels: %s (kept in %s)\n", a.tuned.chose, a.tuned.cache_file);
    else if (t->o->tune)
        train_say(t, "kernels: %s, measured in %.1f s (%d switches tried, %d changed the net%s%s)\n", a.tuned.chose,
                  a.tuned.measure_s, a.tuned.tried, a.tuned.timed, *a.tuned.cache_file ? "; kept in " : "",
                  a.tuned.cache_file);
    return ST_OK;
}
