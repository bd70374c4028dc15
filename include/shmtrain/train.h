/* shmtrain training: the data-parallel loop that ties the engine, the data,
 * the collectives and checkpoints together.
 *
 * Every rank (one per instance, joined from shmrun's environment) holds a full
 * replica.  Parameters start identical (broadcast from rank 0); each step a
 * rank computes gradients on its own shard of the global batch, the gradients
 * are averaged by the shared-memory all-reduce (zero-copy: the gradient
 * buffer lives in the shared segment), and every rank applies the same
 * update, so replicas stay bitwise identical.  docs/training.md is the manual.
 */
#ifndef SHMTRAIN_TRAIN_H
#define SHMTRAIN_TRAIN_H

#include "shmtrain/tuning.h"
#include "shmtrain/dtype.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shmtrain/nn.h"
#include "shmtrain/optim.h"
#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --balance: static, each instance its own micro-batches (the step waits
 * for the slowest); dynamic, the instances of a node take the step's
 * micro-batches from a shared counter until none is left (src/train/balance.h);
 * independent, each its own micro-batches and no exchange at all: N models
 * each trained alone on its shard, the machine's ceiling that a
 * synchronized run is measured against (shmrun --sweep runs it). */
typedef enum st_balance { ST_BALANCE_STATIC = 0, ST_BALANCE_DYNAMIC = 1, ST_BALANCE_INDEPENDENT = 2 } st_balance;

typedef struct st_train_options {
    const char *model;            /* preset or file (default lenet) */
    const char *data_dir;         /* IDX directory (default Fashion-MNIST's) */
    const char *train_images, *train_labels, *test_images, *test_labels;
    const char *cifar_dir;        /* CIFAR binary directory instead of IDX */
    bool cifar100;
    const char *npy_images, *npy_labels, *npy_test_images, *npy_test_labels;  /* NumPy arrays instead */
    st_nn_tuning tuning;          /* the engine's switches (tuning.h; main() fills them from the environment) */
    const char *image_folder;     /* torchvision ImageFolder layout instead (data.h) */
    int image_size;               /* its images' shorter side before the centre crop (0: the model's input) */
    double data_memory_gb;        /* beyond this decoded, a folder is streamed (0: a quarter of RAM) */
    int data_workers;             /* streaming: decoding threads per instance */
    float val_fraction;           /* held out when the data has no test split (npy without test arrays) */
    const char *text[2];          /* --text: a language model's corpus (and its validation text) */
    int ntext;
    int text_tokens;              /* st_text_tokens: characters (default) or bytes */
    const char *tokens_bin, *val_bin;  /* token files instead of --text (text.h) */
    long vocab;                   /* their ids are below this (0: the model's vocabulary) */
    long eval_windows;            /* text: validation windows per evaluation (0 = all) */
    const char *model_recipe;     /* the model's `train` line, applied before the flags
                                     (st_model_recipe; for the start line), or NULL */
    int epochs;                   /* passes over the data; 0 = not given: 1, or as many as
                                     max_steps needs when it is given alone */
    bool evaluate_only;           /* --max-steps 0: evaluate (a resumed or imported model) and stop */
    long max_steps;               /* stop after this many optimizer steps (0 = no limit); with
                                     epochs too, whichever comes first */
    int batch;                    /* per instance (default 64) */
    int grad_accum;               /* micro-batches of `batch` per optimizer step (0 or 1: one) */
    int balance;                  /* st_balance: who computes a step's micro-batches */
    st_schedule schedule;         /* lr and its schedule */
    bool scale_lr;                /* multiply lr by the number of instances */
    st_optim_config optim;
    float clip_norm;              /* 0 = no clipping */
    uint64_t seed;
    long eval_every;              /* steps; 0 = at the end of each epoch */
    long log_every;               /* steps (default 50) */
    long checkpoint_every;        /* steps; 0 = only at the end */
    int keep_last;                /* with checkpoint_every: keep FILE-stepN.ckpt of the last K saves (0: none) */
    bool keep_best;               /* keep the best evaluation's checkpoint beside the checkpoint */
    bool tune;                    /* measure the engine's kernels on this CPU first (st_nn_tune), and keep the answer */
    const char *keep_best_path;   /* its file (a run folder's best.ckpt); NULL: st_train_best_path's */
    const char *resume_hint;      /* what `--resume` takes to go on from the checkpoint (a run's folder);
                                     NULL: the checkpoint's name */
    void (*on_start)(void *ctx);  /* rank 0, once setup and any resume succeeded, before the first
                                     record: the caller's outputs may be written from then on */
    void *on_start_ctx;
    long check_replicas;          /* compare parameter hashes every K steps */
    st_dtype precision;           /* compute: fp32 (default) or bf16 mixed precision (docs/engine.md) */
    st_dtype allreduce_dtype;     /* the gradient exchange: fp32 (default), bf16 or fp16 (half the bytes) */
    double bucket_mb;             /* > 0: all-reduce buckets of this size during backward (overlap) */
    const char *checkpoint;       /* path (default shmtrain.ckpt); NULL: none written (--no-checkpoint) */
    const char *resume;           /* checkpoint to resume from, or NULL */
    const char *init_from;        /* a safetensors file to start from (shmtrain export's, or
                                     PyTorch's names), or NULL; a resume takes precedence */
    const char *metrics;          /* JSON-lines file (default: in the log dir) */
    const char *events_dir;       /* TensorBoard event files and scalars.csv go here (the run folder), or NULL */
    long train_subset, test_subset;
    bool augment, quiet, flush_denormals;
    float target_accuracy;        /* stop once test accuracy reaches it (0 = off) */
    float target_loss;            /* stop once the test (validation) loss is at most it (0 = off) */
} st_train_options;

typedef struct st_train_result {
    double best_accuracy, final_accuracy, final_loss;
    double seconds, samples_per_s;
    long steps;
    bool interrupted;
} st_train_result;

void st_train_defaults(st_train_options *o);

/* A model by preset name, model file, or the checkpoint it was trained in
 * (the model text a checkpoint carries). */
st_status st_train_model_load(st_model **m, const char *name);

/* --keep-best's file beside `checkpoint` ("a.ckpt" -> "a-best.ckpt"), so
 * that runs checkpointing into one folder keep a best each. */
void st_train_best_path(const char *checkpoint, char *out, size_t len);

/* Run training.  ST_ERR_INTERRUPTED after a clean stop on SIGINT/SIGTERM
 * (a checkpoint was written); ST_ERR_FORMAT / ST_ERR_IO for bad inputs,
 * with the file named in st_last_error(). */
st_status st_train_run(const st_train_options *o, st_train_result *r);

/* Each layer's kernels as a run of `o` would build them for model `m`
 * (o->model's, as st_train_model_load reads it; the tuner's kept answer
 * read, nothing measured; omp_get_max_threads() threads), and what chose
 * them: the text of a run folder's kernels.txt.  Builds the whole net at
 * o->batch (its memory, for the moment it takes). */
st_status st_train_describe_kernels(const st_model *m, const st_train_options *o, FILE *f);

/* Sampling from a language model's checkpoint (shmtrain sample): prints
 * the prompt and `tokens` more, drawn at `temperature` (0: greedy) from the
 * `top_k` likeliest (0: all), deterministic from `seed`. */
typedef struct st_sample_options {
    const char *checkpoint, *prompt;
    int tokens, top_k;
    double temperature;
    uint64_t seed;
} st_sample_options;
st_status st_sample(const st_sample_options *o, FILE *out);

/* shmtrain export: a checkpoint's parameters and batch-norm statistics in
 * the safetensors format at `path`, named as PyTorch names them
 * (st_model_tensors), with the model text, the training step and a
 * language model's alphabet in its metadata.  Written atomically. */
st_status st_export_safetensors(const char *checkpoint, const char *path);
/* --init-from: the parameters and batch-norm statistics of model `m` from a
 * safetensors file by their PyTorch names; a missing or unknown name, another
 * shape or dtype, or an untied head is an error naming it, and nothing is
 * read half: the spans are only written tensor by tensor after the names
 * checked (a failure leaves the caller to stop). */
st_status st_import_safetensors(const char *path, const st_model *m, float *params, float *buffers);

/* Request a clean stop after the current step (from any thread; also
 * async-signal-safe, but see src/shmtrain.c for why shmtrain takes its
 * signals with sigwait instead of a handler). */
void st_train_request_stop(void);

#ifdef __cplusplus
}
#endif
#endif
