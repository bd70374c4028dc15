/* The engine's kernels chosen by measurement on this CPU (issue 66), as
 * cudnn.benchmark chooses a convolution's algorithm: the switches that pick
 * between kernels computing the same thing (tuning.h, st_nn_switch.kernel)
 * are each tried on the model's training step (forward, loss, backward;
 * the optimizer is the same whatever the kernels), and one is kept when
 * the step runs faster by more than 3% with it, greedily, one after the
 * other.  A switch that changes nothing the net builds (st_net_describe
 * says the same) is not timed.  The answer is kept in a cache directory,
 * keyed by the CPU's name, oneDNN's version and ISA, the model's text,
 * batch, threads, precision and the caller's own switches, and read back
 * instead of measured again.
 *
 * A kernel kept changes the order of some sums (a layout, a blocking): the
 * result moves by rounding only, as each switch's own test bounds
 * (tests/test_switches.c). */
#ifndef SHMTRAIN_TUNE_H
#define SHMTRAIN_TUNE_H

#include <stdbool.h>

#include "shmtrain/nn.h"
#include "shmtrain/status.h"

typedef struct st_nn_tune_request {
    const st_model *model;
    st_net_config net;       /* batch, precision and the caller's switches (kept: the tuner only adds) */
    int threads;             /* OpenMP's for the net: part of the key */
    const char *cache_dir;   /* the answers' folder (made if missing); NULL: no cache */
    const char *machine;     /* the CPU's name, part of the key (NULL: /proc/cpuinfo's model name) */
    bool force;              /* measure even where an answer is kept */
    bool cached_only;        /* read a kept answer, measure nothing (none kept: the caller's switches) */
} st_nn_tune_request;

typedef struct st_nn_tuned {
    st_nn_tuning tuning;     /* the caller's switches and those the measurement turned on */
    char chose[256];         /* "SHMTRAIN_ONEDNN_POOL (0.93 of the step)", or "the defaults" */
    char cache_file[4200];   /* the answer's file, "" without a cache */
    bool cached;             /* read from it, not measured */
    double measure_s;        /* seconds the measurement took (0 when cached) */
    int tried, timed;        /* kernel switches tried; those whose net differed, so timed */
} st_nn_tuned;

/* Measure (or read) the kernels for rq; ST_ERR_INVALID for a bad request,
 * a net's own errors, ST_ERR_IO where a cache file cannot be written (the
 * answer is still in *out). */
st_status st_nn_tune(const st_nn_tune_request *rq, st_nn_tuned *out);

#endif
