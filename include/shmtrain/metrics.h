/* The metrics file: one JSON object per line, each a record of one type.
 *
 * Written by the trainer's rank 0 (src/train) and, with the same records,
 * by the PyTorch peer (bench/torch_ddp.py); read by shmrun --sweep.  This
 * header is the contract: a field added here is written and read by the
 * same code.  docs/training.md describes the fields.
 *
 *   run      once at start (and again on resume): what ran
 *   train    every --log-every steps: the interval's loss, speed, time split
 *   eval     every evaluation
 *   summary  once at the end
 */
#ifndef SHMTRAIN_METRICS_H
#define SHMTRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_record_type {
    ST_RECORD_UNKNOWN = 0,  /* not a record of ours (or not JSON) */
    ST_RECORD_RUN,
    ST_RECORD_TRAIN,
    ST_RECORD_EVAL,
    ST_RECORD_SUMMARY,
    ST_RECORD_INSTANCE
} st_record_type;

typedef struct st_run_record {
    char system[32];                 /* "shmtrain", "pytorch-ddp" */
    int instances, threads, batch_per_instance;
    char model[256];
    long long params;
    char onednn[32], isa[32];        /* shmtrain's; "" otherwise */
    char launcher[16];               /* whose variables placed the instances: shmrun, mpirun, srun, torchrun, none */
    char torch[32];                  /* the PyTorch peer's; "" otherwise */
    char backend[8];                 /* the PyTorch peer's gradient all-reduce: "gloo", "shm"
                                        (python/shmtrain_torch); "" otherwise */
    char mode[16];                   /* how the PyTorch peer ran its model: "eager", "channels_last",
                                        "compile" (torch.compile); "" otherwise */
    char allreduce_dtype[8];         /* the gradient exchange: "fp32", "bf16", "fp16"; "" when not said */
    char precision[8];               /* compute, as built: "bf16" when any layer computes in bf16
                                        (mixed), else "fp32"; "" when not said */
    char recipe[160];                /* the effective optimizer, schedule, decay and clipping in words */
    int layers, lowp_layers;         /* the net's layers, and how many compute below fp32 (0, 0: not said;
                                        older records: "bf16_layers") */
    unsigned long long first_step;   /* > 0 after a resume */
    int context;                     /* a language model's tokens per sample (window); 0 otherwise */
    int grad_accum;                  /* micro-batches per optimizer step; written when > 1, else 0 (one) */
    char balance[16];                /* who computes them: "static", "dynamic", "independent" (--balance:
                                        no exchange, a model per instance); "" not said */
    char kernels[256];               /* the kernel switches measured on this CPU and kept (st_nn_tune):
                                        "SHMTRAIN_ONEDNN_POOL (0.93 of the step)", "the defaults"; "" not said */
} st_run_record;

typedef struct st_train_record {
    unsigned long long step;
    double epoch, loss, accuracy, lr, samples_per_s, time_s;
    double compute_s, allreduce_s, wait_s;   /* summed over the interval */
    double data_s;                           /* streamed images: waiting for their decoding (0 otherwise) */
    double tokens_per_s;                     /* language models (samples_per_s x context); else 0, not written */
    bool faults_said;                        /* page_faults is the writer's (shmtrain's); else not written */
    double page_faults;                      /* per step over the interval, in the writing process (minor +
                                                major, getrusage): 0 once nothing is allocated or touched
                                                for the first time in a step */
} st_train_record;

typedef struct st_eval_record {
    unsigned long long step, epoch;
    double test_loss, test_accuracy, time_s, eval_s;
    unsigned long long predictions;  /* scored, over all instances: the test samples (a language model:
                                        validation windows x context), each once */
} st_eval_record;

#define ST_METRICS_MAX_TARGETS 16

typedef struct st_summary_record {
    long steps;
    int instances, batch_per_instance;
    double total_s, train_s, samples_per_s, final_test_accuracy, best_test_accuracy;
    double tokens_per_s;             /* language models; else 0, not written */
    double peak_rss_mb;              /* the writing instance's peak resident memory (getrusage's
                                        ru_maxrss), MiB; 0: not said */
    unsigned long long micro_batches;      /* computed by all instances, counted each step; 0: not said */
    unsigned long long micro_batches_here; /* of those, by the writing instance (rank 0) */
    unsigned long long samples_decoded;    /* training samples the writing instance decoded (a folder
                                              streamed past --data-memory); 0: not streamed, not written */
    bool allreduces_said;            /* step_allreduces is the writer's (shmtrain's); else not written */
    unsigned long long step_allreduces;    /* all-reduce calls inside the training steps, every kind (gradients,
                                        buckets, the tail); 0 under --balance independent */
    int nreached;                    /* test-accuracy thresholds reached, and when */
    double reached_accuracy[ST_METRICS_MAX_TARGETS], reached_s[ST_METRICS_MAX_TARGETS];
} st_summary_record;

/* One per instance at a run's end (rank 0 writes them all): where its
 * steps went, so the instance the others wait for is named. */
typedef struct st_instance_record {
    int rank;
    long steps;
    double step_p50_s, step_p90_s, step_max_s;  /* step times: quantiles within 2% above, and the slowest */
    double compute_s, exchange_s, wait_s;       /* summed over its steps; the wait is part of the exchange */
    double samples_per_s;                       /* its own, over its steps after the first log interval (all of
                                                   them in a shorter run); NAN: not said */
} st_instance_record;

typedef struct st_record {
    st_record_type type;
    union {
        st_run_record run;
        st_train_record train;
        st_eval_record eval;
        st_summary_record summary;
        st_instance_record instance;
    } u;
} st_record;

/* Write one record as one line and flush it (a crash keeps every line).
 * A write that fails (a full disk) leaves no part of its line: the file is
 * cut back to the last whole record, and ST_ERR_IO says why. */
st_status st_metrics_write(FILE *f, const st_record *r);

/* A resumed run goes on from its checkpoint's step: the records after it
 * (metrics.jsonl's train and eval records, or with `csv` scalars.csv's
 * rows), written before a crash, are dropped, so that no step appears
 * twice; a cut last line goes too.  The file is rewritten aside and renamed
 * over; a missing file is no error. */
st_status st_metrics_drop_after(const char *path, uint64_t step, bool csv);

/* Read one line; fields absent from it are NAN (numbers), 0 or "".
 * Returns the record's type. */
st_record_type st_metrics_parse(const char *line, st_record *out);

#ifdef __cplusplus
}
#endif
#endif
