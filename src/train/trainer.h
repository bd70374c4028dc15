/* Internal: the trainer's state, shared by the loop (train.c) and its data
 * loading (train_data.c). */
#ifndef SHMTRAIN_TRAINER_H
#define SHMTRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "overlap.h"
#include "shmtrain/bf16.h"
#include "shmtrain/data.h"
#include "shmtrain/nn.h"
#include "shmtrain/optim.h"
#include "shmtrain/train.h"

#define TAIL 4    /* extra floats reduced with the gradients: loss, correct, stop, non-finite */
#define NTHRESH 7 /* test-accuracy thresholds whose time is reported (train.c) */

struct trainer {
    const st_train_options *o;
    struct train_comm comm;    /* the job's group: one node's shared memory, or nodes over MPI */
    int rank, world;
    st_model *model;
    st_net *net;
    st_optim *opt;
    st_dataset *train, *test;
    float mean[3], std[3];
    uint32_t *order;
    float *x;
    int *y;
    float *grads;              /* P gradients + TAIL, in the shared segment */
    st_bf16 *grads_bf16;       /* --allreduce-dtype bf16: the P gradients as exchanged, after them */
    struct overlap ov;         /* --bucket-mb: the buckets' progress thread */
    size_t P;
    FILE *metrics;
    st_schedule sched;         /* the options' schedule, its length filled in */
    bool tty;
    uint64_t epoch, epoch_pos, step, first_step;
    long steps_per_epoch;
    double start, elapsed_before, train_seconds, best_acc, last_acc, last_loss;
    long last_eval_step;
    double reached_at[NTHRESH];
    long reached_step[NTHRESH];
    /* accumulated over the current log interval */
    double t_compute, t_reduce, t_wait, loss_sum, correct_sum;
    long interval_steps;
    double interval_start;
};

/* Each node's first rank decodes both splits and publishes them; the
 * node's others attach.  Fills t->train, t->test, t->mean, t->std. */
st_status train_load_data(struct trainer *t);

#endif
