/* shmtrain optimizers, gradient clipping and learning-rate schedules.
 *
 * Optimizers work on one flat span of parameters and the matching span of
 * gradients (st_net_params/st_net_grads), with PyTorch's update rules, so a
 * run here can be compared with torch.optim step for step.
 */
#ifndef SHMTRAIN_OPTIM_H
#define SHMTRAIN_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/bf16.h"
#include "shmtrain/dtype.h"
#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_optim_kind { ST_OPTIM_SGD = 0, ST_OPTIM_ADAMW = 1 } st_optim_kind;

typedef struct st_optim_config {
    st_optim_kind kind;
    float momentum;      /* SGD (0 = plain SGD) */
    bool nesterov;       /* SGD with momentum */
    float weight_decay;  /* SGD: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps;   /* AdamW (0 = 0.9, 0.999, 1e-8) */
    const uint8_t *decay_mask; /* AdamW: per parameter, 1 = decays (NULL: all do); borrowed */
} st_optim_config;

typedef struct st_optim st_optim;

/* An optimizer for `count` parameters.  Its state (momentum buffer, or
 * Adam's m and v) is zero until the first step. */
st_status st_optim_create(st_optim **out, size_t count, const st_optim_config *cfg);
void st_optim_destroy(st_optim *o);

/* One update with learning rate `lr`: params -= f(grads, state). */
void st_optim_step(st_optim *o, float *params, const float *grads, float lr);
/* The same with each gradient times grad_scale (a clip's, st_clip_scale):
 * the bits of scaling the gradients in place first (each product rounded
 * once, where the update reads it), without that pass over them. */
void st_optim_step_scaled(st_optim *o, float *params, const float *grads, float grad_scale, float lr);

/* Where a copy's elements lie.  ST_COPY_LISTED: element i at
 * dst[index[i]], or at dst[i] where index is NULL.  The other two are
 * AMX's bf16 layouts for a [rows, cols] weight (row-major in the flat
 * buffer; count = rows x cols), which pair two bf16 words in each 32-bit
 * lane a tile multiplies, written whole cache lines at a time by the
 * optimizer (no index, no reorder from a plain copy each step):
 *   ST_COPY_PAIRS_ALONG_ROWS   blocks of 64 rows x 32 columns, row blocks
 *       outer; in a block, column pair q of rows 0..63 side by side
 *       (oneDNN's AB16b64a2b over [rows, cols], equally BA16a64b2a over
 *       [cols, rows]: a linear layer's weights, the head's for its logits);
 *   ST_COPY_PAIRS_DOWN_COLUMNS blocks of 32 rows x 64 columns, column
 *       blocks outer; in a block, row pair q of columns 0..63 side by side
 *       (BA16a64b2a over [rows, cols]: the head's table for its input's
 *       gradient).
 * Their padding (rows and columns up to whole blocks) is the caller's to
 * zero once; it is never written. */
typedef enum st_copy_layout {
    ST_COPY_LISTED = 0,
    ST_COPY_PAIRS_ALONG_ROWS,
    ST_COPY_PAIRS_DOWN_COLUMNS,
} st_copy_layout;

/* A copy of `count` parameters from `offset` in a rounding type (bf16 or
 * fp16: 16-bit words; the pair layouts bf16 only), in the layout a kernel
 * reads.  A low-precision net hands its copies over (st_net_weight_copies). */
typedef struct st_weight_copy {
    size_t offset, count;
    uint16_t *dst;
    st_dtype type;
    const uint32_t *index;   /* ST_COPY_LISTED */
    st_copy_layout layout;
    long rows, cols;         /* the pair layouts' matrix */
} st_weight_copy;

/* Where element i of the copy lies in dst (tests, and the net's check that
 * every copy matches its master). */
size_t st_weight_copy_place(const st_weight_copy *c, size_t i);

/* From the next step on, each step also writes these copies of the
 * parameters it updates, in the same pass over them (the new value rounded
 * to the copy's type): the kernels then read weights no reorder converted.  The array
 * and what it points to are borrowed; NULL, 0 stops it. */
void st_optim_set_copies(st_optim *o, const st_weight_copy *copies, int count);

/* The state as one flat span (for checkpoints; layout fixed per kind), and
 * the number of steps taken (Adam's bias correction uses it). */
float *st_optim_state(st_optim *o, size_t *count);
uint64_t st_optim_steps(const st_optim *o);
void st_optim_set_steps(st_optim *o, uint64_t steps);

/* Scale grads so their L2 norm is at most max_norm (if > 0); returns the
 * norm before clipping (NaN/Inf propagate, so callers can check it). */
float st_clip_grad_norm(float *grads, size_t count, float max_norm);
/* Its two halves: the L2 norm (the same bits at any thread count), and
 * the factor the gradients take (1 where max_norm is 0 or not exceeded). */
float st_grad_norm(const float *grads, size_t count);
float st_clip_scale(float norm, float max_norm);

typedef enum st_schedule_kind {
    ST_SCHED_CONSTANT = 0,
    ST_SCHED_STEP = 1,     /* lr * gamma^(floor(step / step_size)) */
    ST_SCHED_COSINE = 2    /* lr * (1 + cos(pi * step / total)) / 2, down to min_lr */
} st_schedule_kind;

typedef struct st_schedule {
    st_schedule_kind kind;
    float lr;
    uint64_t warmup;       /* linear warm-up from lr/warmup to lr over this many steps */
    uint64_t step_size;    /* ST_SCHED_STEP */
    float gamma;           /* ST_SCHED_STEP (0 = 0.1) */
    uint64_t total;        /* ST_SCHED_COSINE: steps of the whole run */
    float min_lr;          /* ST_SCHED_COSINE floor */
} st_schedule;

/* Learning rate for 0-based step `step`. */
float st_schedule_lr(const st_schedule *s, uint64_t step);

#ifdef __cplusplus
}
#endif
#endif
