/* Internal: the gradient all-reduce in buckets, overlapped with the
 * backward pass (PyTorch DDP's buckets).  As layers finish (the engine's
 * st_net_on_grads_ready, last layers first) their gradient ranges gather
 * into buckets of about --bucket-mb; a progress thread all-reduces each full
 * bucket while the backward pass goes on; the step then waits for the last.
 * Every rank cuts the same buckets (same model, same size), so the
 * collectives match; while a step's buckets run, only the progress thread
 * touches the group. */
#ifndef SHMTRAIN_TRAIN_OVERLAP_H
#define SHMTRAIN_TRAIN_OVERLAP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "comm.h"

struct overlap {
    struct train_comm *comm;
    float *grads;
    st_dtype wire;                   /* how the gradients travel (--allreduce-dtype) */
    size_t bucket;                   /* floats a bucket gathers before it goes */
    size_t lo, hi;                   /* the bucket being gathered: [lo, hi) */
    size_t *queue;                   /* [2 * cap]: lo, hi of buckets to reduce */
    int cap, head, tail, pending;    /* pending: queued or being reduced */
    bool quit, started;
    st_status failed;
    char why[256];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
};

/* Start the progress thread for a gradient buffer of `count` floats. */
st_status overlap_start(struct overlap *o, struct train_comm *c, float *grads, size_t count, st_dtype wire,
                        double bucket_mb);
/* The engine's callback (st_grads_ready_fn): ctx is the struct overlap. */
void overlap_ready(void *ctx, size_t first, size_t count);
/* After backward: send what is left, wait for every bucket, say how it went. */
st_status overlap_finish(struct overlap *o);
void overlap_stop(struct overlap *o);

#endif
