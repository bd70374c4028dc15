/* Internal: the trainer's state, shared by the loop (train.c), its data
 * loading (train_data.c) and what it tells (report.c). */
#ifndef SHMTRAIN_TRAINER_H
#define SHMTRAIN_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shmtrain/clock.h"
#include "accum.h"
#include "balance.h"
#include "comm.h"
#include "overlap.h"
#include "steptimes.h"
#include "shmtrain/bf16.h"
#include "shmtrain/data.h"
#include "shmtrain/metrics.h"
#include "shmtrain/tfevents.h"
#include "shmtrain/nn.h"
#include "shmtrain/optim.h"
#include "shmtrain/text.h"
#include "shmtrain/train.h"
#include "shmtrain/tune.h"

#define TAIL 5    /* extra floats reduced with the gradients: loss, correct, stop, non-finite,
                     micro-batches computed */
#define NTHRESH 7 /* test-accuracy thresholds whose time is reported (report.c) */

struct trainer {
    const st_train_options *o;
    struct train_comm comm;    /* the job's group: one node's shared memory, or nodes over MPI */
    int rank, world;
    st_model *model;
    st_net *net;
    st_nn_tuned tuned;       /* the kernel switches this run takes and what chose them (train_kernels) */
    st_nn_tuning asked;      /* the caller's switches, before the tuner's answer */
    float *params;           /* the net's, for the optimizer: taken once, as st_net_params
                                makes the next forward pass rewrite the bf16 weight copies */
    st_optim *opt;
    st_dataset *train, *test;  /* images (streamed: their labels only); or */
    st_folder *folder;         /* --image-folder: its listing */
    st_stream *stream[2];      /* a folder beyond --data-memory: training, test batches decoded as needed */
    uint32_t *next_order;      /* streaming: the next epoch's order, for the batch requested ahead */
    st_text *text;             /* a language model's corpus */
    int context;               /* text: tokens per window (the model's positions) */
    size_t eval_count;         /* text: validation windows per evaluation */
    uint8_t *decay_mask;       /* text: which parameters AdamW decays */
    float mean[3], std[3];
    uint32_t *order;
    void *x;                   /* a batch: floats, or int32 token ids */
    int *y;                    /* labels: per sample, or per token */
    float *grads;              /* P gradients + TAIL, in the shared segment */
    struct overlap ov;         /* --bucket-mb: the buckets' progress thread */
    struct accum acc;          /* --grad-accum: the micro-batches' gradient sum */
    int accum_steps;           /* micro-batches per optimizer step */
    struct balance bal;        /* --balance: who computes which micro-batch */
    int step_taken;            /* micro-batches this rank computed in the current step */
    uint64_t taken_all;        /* micro-batches all ranks computed, counted each step (train_check_taken) */
    size_t global_batch;       /* samples per optimizer step: instances x batch x micro-batches */
    size_t P;
    FILE *metrics;
    st_tfevents *tb;           /* TensorBoard events and scalars.csv in the run folder, or NULL */
    bool records_lost;         /* a metrics record could not be written (a full disk): said at the end */
    char records_why[512];
    st_schedule sched;         /* the options' schedule, its length filled in */
    bool tty;
    uint64_t epoch, epoch_pos, step, first_step;
    long steps_per_epoch;
    long epochs_total, steps_total; /* the run's budget (train.c, budget): what ends it */
    double start, elapsed_before, train_seconds, best_acc, last_acc, last_loss;
    double kept_best;          /* --keep-best: best.ckpt's score (accuracy, or minus the loss); -inf: none yet */
    long last_eval_step;
    bool saved;                /* a checkpoint of this run (or the one it resumed) is at --checkpoint */
    long replica_checks;       /* --check-replicas checks passed, said at the end */
    bool independent;          /* --balance independent: no step exchanges anything */
    uint64_t step_allreduces;  /* all-reduce calls inside this run's steps (0 when independent) */
    double instances_sps;      /* every instance's own samples/s, summed (train_instances) */
    double reached_at[NTHRESH];
    long reached_step[NTHRESH];
    /* accumulated over the current log interval */
    double t_compute, t_reduce, t_wait, t_data, loss_sum, correct_sum;
    long interval_steps;
    double interval_start;
    double faults_at;          /* the process's page faults at the interval's start, evaluations' taken out */
    struct step_times times;   /* every step's time, for the instance records */
};

/* Each node's first rank decodes both splits and publishes them; the
 * node's others attach.  Fills t->train, t->test, t->mean, t->std, or
 * t->text. */
st_status train_load_data(struct trainer *t);

/* --image-folder: every rank lists the folder (and holds a split out when
 * it has no val/), then either the node's first rank decodes it whole to
 * publish (train_load_data goes on) or, beyond --data-memory, every rank
 * streams its own batches (*streamed set; t->train, t->test hold labels). */
st_status train_open_folder(struct trainer *t, bool *streamed);
st_status train_load_folder_split(struct trainer *t, bool test, st_dataset **out);
/* Streaming: this rank's batch of `spec`, and the next one requested. */
st_status train_stream_batch(struct trainer *t, const st_batch_spec *spec, int micro);
void train_close_folder(struct trainer *t);

/* Samples (images, or windows) in the training split, and the buffers a
 * batch needs.  Then rank `slot_rank`'s micro-batch `micro` of the current
 * step (this rank's own, or under --balance dynamic any rank's) into t->x,
 * t->y: a step's micro-batches and ranks together take the global batch's
 * samples as W x N ranks would (rank micro x W + rank), so --grad-accum N
 * on W instances sees the same samples as N x W instances. */
size_t train_samples(const struct trainer *t);
st_status train_alloc_batch(struct trainer *t);
st_status train_fill_batch(struct trainer *t, int slot_rank, int micro);

/* Forward and backward over the step's micro-batches that this rank
 * computes (balance.h), leaving their mean gradient in t->grads (the
 * buckets' share of it already on its way with --bucket-mb), their mean
 * loss and accuracy in *loss and *accuracy (means over the step's
 * micro-batches per rank: the exchange's average then makes the step's). */
st_status train_micro_batches(struct trainer *t, float *loss, float *accuracy);
/* After the exchange: the ranks computed every micro-batch of the step
 * exactly as many times as there are (`mean_taken` is the exchanged
 * tail's average of each rank's count). */
st_status train_check_taken(struct trainer *t, float mean_taken);
/* This process's page faults so far (minor + major). */
double train_page_faults(void);
/* At a run's end, every rank: each instance's step times gathered, an
 * instance record each in rank 0's metrics, the slowest named. */
st_status train_instances(struct trainer *t);

/* Evaluation batches: how many samples the split has, and this rank's part
 * of global batch `first` (valid: how many are real). */
size_t train_eval_samples(const struct trainer *t);
st_status train_fill_eval_batch(struct trainer *t, size_t first, int *valid);

/* kernels.c: the engine's kernel switches for this run into nc->tuning
 * (rank 0's measurement with --tune, or the answer one kept; the same on
 * every rank), kept in t->tuned; train_kernels_keep then writes what chose
 * them and each layer's kernels into the run folder's kernels.txt. */
st_status train_kernels(struct trainer *t, st_net_config *nc);
void train_kernels_keep(const struct trainer *t);

/* say.c: a progress line (rank 0, unless --quiet). */
void train_say(const struct trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* keep.c: a checkpoint of the run as it is now, at `path` (rank 0's to call). */
st_status train_save_to(struct trainer *t, const char *path);

/* src/train/keep.c: which checkpoints a run keeps beside --checkpoint's.
 * After a periodic save, with --keep K: FILE-stepN.ckpt for the last K.
 * After an evaluation, with --keep-best: best.ckpt beside FILE when this
 * one is the best so far (validation loss for a language model, test
 * accuracy otherwise).  A failed write is a warning: the run goes on. */
/* Rank 0: is there room on --checkpoint's disk for one checkpoint (written
 * aside before it replaces the last)?  ST_ERR_IO saying how much is needed
 * and free; others ST_OK. */
st_status train_check_room(const struct trainer *t);
void train_keep_last(struct trainer *t);
void train_keep_best(struct trainer *t, double accuracy, double loss);
void train_record(struct trainer *t, const st_record *r);
/* The interval's train record and progress line; the next interval begins. */
void train_log_interval(struct trainer *t, float lr);
/* Loss and accuracy on the held-out split, sharded across the ranks, then
 * recorded and said; its time is left out of the training time. */
st_status train_eval_and_report(struct trainer *t);
/* Rank 0's metrics file (--metrics, else the launcher's log directory),
 * appended to on a resume; the run record; the summary at the end. */
void train_open_metrics(struct trainer *t);
void train_run_record(struct trainer *t);
/* The effective recipe in words, "adamw lr 0.001 cosine to 0.0001 warm-up 100
 * weight-decay 0.1 beta2 0.99 clip-norm 1" (the start line, the run record). */
void train_recipe(const st_train_options *o, char *buf, size_t len);
void train_summary(struct trainer *t, st_train_result *r);

#endif
