/* One preset's training step on fixed data, for the step benchmarks
 * (st-step-bench, st-step-ab): forward, loss, backward, SGD with momentum.
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
    int *labels;
};

double rig_now(void);
void rig_sort(double *v, int n);  /* ascending, for medians and ranges */
void rig_create(struct step_rig *r, const char *tool, const char *model, int batch, int threads);
/* The same in a precision (ST_DTYPE_F32 or ST_DTYPE_BF16). */
void rig_create_in(struct step_rig *r, const char *tool, const char *model, int batch, int threads, st_dtype precision);
/* ... with these engine switches (the others take the environment's) */
void rig_create_tuned(struct step_rig *r, const char *tool, const char *model, int batch, int threads,
                      st_dtype precision, const st_nn_tuning *tuning);
/* One step; the seconds the optimizer took, for the shares. */
double rig_step(struct step_rig *r);
void rig_destroy(struct step_rig *r);

#endif
