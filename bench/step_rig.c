#define _GNU_SOURCE
#include "step_rig.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double rig_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void rig_sort(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_double);
}

static void die(const struct step_rig *r, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", r->tool, what, st_last_error());
    exit(1);
}

void rig_create(struct step_rig *r, const char *tool, const char *model, int batch, int threads)
{
    rig_create_in(r, tool, model, batch, threads, ST_DTYPE_F32);
}

void rig_create_in(struct step_rig *r, const char *tool, const char *model, int batch, int threads, st_dtype precision)
{
    st_nn_tuning tuning;
    st_nn_tuning_from_env(&tuning);  /* a benchmark is a main(): the switches are its environment's */
    rig_create_tuned(r, tool, model, batch, threads, precision, &tuning);
}

void rig_create_tuned(struct step_rig *r, const char *tool, const char *model, int batch, int threads,
                      st_dtype precision, const st_nn_tuning *tuning)
{
    *r = (struct step_rig){.tool = tool};
    omp_set_num_threads(threads);
    if (st_model_load(&r->model, model) != ST_OK)
        die(r, "model");
    st_net_config nc = {.batch = batch, .precision = precision, .tuning = *tuning};
    if (st_net_create(&r->net, r->model, &nc) != ST_OK)
        die(r, "building the net");
    size_t P, in = st_model_input_size(r->model) * (size_t)batch;
    r->params = st_net_params(r->net, &P);  /* once: it marks the net's weight copies stale */
    r->nparams = P;
    r->grads = st_net_grads(r->net, NULL);
    st_optim_config oc = {.kind = ST_OPTIM_SGD, .momentum = 0.9f};
    if (st_optim_create(&r->optim, P, &oc) != ST_OK)
        die(r, "optimizer");
    int ncopies;
    const st_weight_copy *copies = st_net_weight_copies(r->net, &ncopies);
    st_optim_set_copies(r->optim, copies, ncopies);
    const size_t rows = (size_t)batch * (size_t)st_model_positions(r->model);
    const int vocab = st_model_vocab(r->model);
    r->x = malloc(in * sizeof(float));  /* or int32 token ids, as many */
    r->labels = malloc(rows * sizeof(int));
    if (!r->x || !r->labels) {
        fprintf(stderr, "%s: out of memory\n", tool);
        exit(1);
    }
    for (size_t i = 0; i < in; i++) {
        if (vocab)
            ((int32_t *)r->x)[i] = (int32_t)((i * 2654435761u) % (unsigned)vocab);
        else
            r->x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    }
    for (size_t i = 0; i < rows; i++)
        r->labels[i] = (int)(i % (size_t)st_model_classes(r->model));
}

/* The recipe's optimizer settings; its other words (lr, schedule,
 * batch size) do not change a step's work. */
static void read_recipe(const char *recipe, st_optim_config *oc, float *clip)
{
    char words[512];
    snprintf(words, sizeof words, "%s", recipe ? recipe : "");
    char *save = NULL, *key = strtok_r(words, " ", &save);
    for (char *value; key && (value = strtok_r(NULL, " ", &save)); key = strtok_r(NULL, " ", &save)) {
        if (!strcmp(key, "optimizer"))
            oc->kind = !strcmp(value, "adamw") ? ST_OPTIM_ADAMW : ST_OPTIM_SGD;
        else if (!strcmp(key, "weight-decay"))
            oc->weight_decay = strtof(value, NULL);
        else if (!strcmp(key, "beta2"))
            oc->beta2 = strtof(value, NULL);
        else if (!strcmp(key, "momentum"))
            oc->momentum = strtof(value, NULL);
        else if (!strcmp(key, "clip-norm"))
            *clip = strtof(value, NULL);
    }
}

void rig_use_recipe(struct step_rig *r)
{
    st_optim_config oc = {.kind = ST_OPTIM_SGD, .momentum = 0.9f};
    const size_t P = r->nparams;
    read_recipe(st_model_recipe(r->model), &oc, &r->clip);
    if (oc.kind == ST_OPTIM_ADAMW && st_model_vocab(r->model)) {  /* the trainer's mask for a language model */
        if (!(r->decay_mask = malloc(P ? P : 1)))
            die(r, "decay mask");
        st_model_decay_mask(r->model, r->decay_mask);
        oc.decay_mask = r->decay_mask;
    }
    st_optim_destroy(r->optim);
    if (st_optim_create(&r->optim, P, &oc) != ST_OK)
        die(r, "the recipe's optimizer");
    int ncopies;
    const st_weight_copy *copies = st_net_weight_copies(r->net, &ncopies);
    st_optim_set_copies(r->optim, copies, ncopies);
}

double rig_step(struct step_rig *r)
{
    float loss;
    if (st_net_forward(r->net, r->x) || st_net_loss(r->net, r->labels, &loss, NULL) || st_net_backward(r->net))
        die(r, "step");
    const double t0 = rig_now();
    const float scale = r->clip > 0 ? st_clip_scale(st_grad_norm(r->grads, r->nparams), r->clip) : 1.0f;
    st_optim_step_scaled(r->optim, r->params, r->grads, scale, 0.001f);
    return rig_now() - t0;
}

void rig_destroy(struct step_rig *r)
{
    free(r->x);
    free(r->labels);
    free(r->decay_mask);
    st_optim_destroy(r->optim);
    st_net_destroy(r->net);
    st_model_destroy(r->model);
}
