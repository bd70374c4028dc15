/* Internal: gradient accumulation, --grad-accum N (nanoGPT's
 * gradient_accumulation_steps; PyTorch DDP's no_sync around all but the
 * last micro-batch).  An optimizer step runs N micro-batches forward and
 * backward; their gradients are summed here and the step's gradient is
 * their mean, exchanged once, so a step of B samples x N micro-batches x W
 * instances trains like one of N x B x W in a single batch, up to round-off.
 *
 * The engine writes each micro-batch's gradients into the exchange buffer
 * (`grads`, P floats); after each but the last, accum_add() moves them into
 * the sum; after the last, accum_finish() leaves the mean in `grads`.  With
 * --bucket-mb, accum_ready() stands in front of the buckets: during the
 * last micro-batch it finishes each range as the engine reports it and
 * passes it on, so the buckets still go during backward.
 *
 * Open-ended (--balance dynamic): a rank does not know which of its
 * micro-batches is its last, nor how many it computes (none, even), so
 * every one goes into the sum and accum_finish() divides by `steps` all
 * the same (the step's mean over W x steps micro-batches is the exchange's
 * average of these); the buckets then never start during backward.
 *
 * Ownership: struct accum owns `sum`; `grads` and `next` are borrowed. */
#ifndef SHMTRAIN_TRAIN_ACCUM_H
#define SHMTRAIN_TRAIN_ACCUM_H

#include <stdbool.h>
#include <stddef.h>

#include "shmtrain/status.h"

struct accum {
    float *grads, *sum;
    size_t count;
    int steps;            /* micro-batches per rank per optimizer step (>= 2, or open-ended, to allocate) */
    bool open_ended;      /* --balance dynamic: any number of micro-batches a step */
    int added;            /* micro-batches in the sum this step */
    bool last;            /* the current micro-batch is the step's last */
    void (*next)(void *ctx, size_t first, size_t count);  /* the buckets' callback, or NULL */
    void *next_ctx;
};

/* steps == 1 allocates nothing, unless open-ended, and every call below
 * is then a no-op. */
st_status accum_init(struct accum *a, float *grads, size_t count, int steps, bool open_ended);
void accum_free(struct accum *a);

/* A step begins (its sum starts empty). */
void accum_step(struct accum *a);
/* Say which micro-batch of the step comes next (0 .. steps - 1). */
void accum_begin(struct accum *a, int micro);
/* After a micro-batch's backward that is not the last: into the sum. */
void accum_add(struct accum *a);
/* After the last one's backward, without buckets: grads = mean. */
void accum_finish(struct accum *a);
/* The engine's st_grads_ready_fn in front of the buckets' (ctx: the accum). */
void accum_ready(void *ctx, size_t first, size_t count);

#endif
