/* One preset's training step on fixed data, for the step benchmarks
 * (st-step-bench, st-step-ab): forward, loss, backward, SGD with momentum
 * (or, after rig_use_recipe, the model's own optimizer and clip).
 * rig_create sets OpenMP's thread count first (oneDNN fixes it when the
 * primitives are created) and exits with a message on any failure, as a
 * benchmark's main() would. */
#ifndef SHMTRAIN_BENCH_STEP_RIG_H
#define SHMTRAIN_BENCH_STEP_RIG_H

#include "shmtrain/nn.h"
#include "shmtrain/optim.h"

struct step_rig {
    const char *tool;  /* for messages */
    st_model *model;
    st_net *net;
    st_optim *optim;
    float *x, *params, *grads;
    size_t nparams;
    int *labels;
    uint8_t *decay_mask;  /* AdamW's, from rig_use_recipe */
    float clip;           /* the recipe's --clip-norm (0: none) */
};

double rig_now(void);
void rig_sort(double *v, int n);  /* ascending, for medians and ranges */
void rig_create(struct step_rig *r, const char *tool, const char *model, int batch, int threads);
/* The same in a precision (ST_DTYPE_F32 or ST_DTYPE_BF16). */
void rig_create_in(struct step_rig *r, const char *tool, const char *model, int batch, int threads, st_dtype precision);
/* ... with these engine switches (the others take the environment's) */
void rig_create_tuned(struct step_rig *r, const char *tool, const char *model, int batch, int threads,
                      st_dtype precision, const st_nn_tuning *tuning);
/* The step's optimizer as the trainer runs the model's `train` line (its
 * optimizer, weight decay with nanoGPT's mask, betas, momentum, and its
 * clip, the norm counted with the optimizer): gpt2's recipe runs AdamW
 * and clips, where SGD's pass is lighter. */
void rig_use_recipe(struct step_rig *r);
/* One step; the seconds the optimizer took, for the shares. */
double rig_step(struct step_rig *r);
void rig_destroy(struct step_rig *r);

#endif
