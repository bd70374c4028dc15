#define _GNU_SOURCE
#include "step_rig.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
    r->params = st_net_params(r->net, &P);
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

double rig_step(struct step_rig *r)
{
    float loss;
    if (st_net_forward(r->net, r->x) || st_net_loss(r->net, r->labels, &loss, NULL) || st_net_backward(r->net))
        die(r, "step");
    const double t0 = rig_now();
    st_optim_step(r->optim, r->params, r->grads, 0.001f);
    return rig_now() - t0;
}

void rig_destroy(struct step_rig *r)
{
    free(r->x);
    free(r->labels);
    st_optim_destroy(r->optim);
    st_net_destroy(r->net);
    st_model_destroy(r->model);
}
