/* The bucketed, overlapped gradient all-reduce (overlap.h). */
#define _GNU_SOURCE
#include "overlap.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *progress(void *arg)
{
    struct overlap *o = arg;
    /* The backward pass owns the instance's cores while buckets go: the
     * collectives split a call over this thread's OpenMP pool, so it has one. */
    omp_set_num_threads(1);
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->head == o->tail && !o->quit)
            pthread_cond_wait(&o->work, &o->mu);
        if (o->head == o->tail)
            break;  /* quit, nothing left */
        const size_t lo = o->queue[2 * o->head], hi = o->queue[2 * o->head + 1];
        o->head = (o->head + 1) % o->cap;
        const bool skip = o->failed != ST_OK;  /* after a failure the group is broken anyway */
        pthread_mutex_unlock(&o->mu);
        st_status st = skip ? ST_OK : comm_allreduce(o->comm, o->grads + lo, hi - lo, o->wire, ST_AVG);
        pthread_mutex_lock(&o->mu);
        if (st != ST_OK && o->failed == ST_OK) {
            o->failed = st;
            snprintf(o->why, sizeof o->why, "%s", st_last_error());  /* thread-local: keep it */
        }
        if (--o->pending == 0)
            pthread_cond_broadcast(&o->done);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

st_status overlap_start(struct overlap *o, struct train_comm *c, float *grads, size_t count, st_dtype wire,
                        double bucket_mb)
{
    memset(o, 0, sizeof *o);
    o->comm = c;
    o->grads = grads;
    o->wire = wire;
    o->bucket = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (o->bucket < 1024)
        o->bucket = 1024;
    o->cap = (int)(count / o->bucket) + 1024;  /* a bucket per layer at most, plus the full ones */
    o->queue = calloc(2 * (size_t)o->cap, sizeof *o->queue);
    if (!o->queue)
        return st_fail(ST_ERR_NOMEM, "train: out of memory for the gradient buckets");
    int err = pthread_mutex_init(&o->mu, NULL);
    if (!err)
        err = pthread_cond_init(&o->work, NULL);
    if (!err)
        err = pthread_cond_init(&o->done, NULL);
    if (!err)
        err = pthread_create(&o->thread, NULL, progress, o);
    if (err) {
        free(o->queue);
        o->queue = NULL;
        return st_fail(ST_ERR_SYS, "train: cannot start the all-reduce progress thread: %s", strerror(err));
    }
    o->started = true;
    return ST_OK;
}

/* Queue [lo, hi) for the progress thread; the caller holds the lock. */
static void send_locked(struct overlap *o, size_t lo, size_t hi)
{
    if (hi <= lo)
        return;
    o->queue[2 * o->tail] = lo;
    o->queue[2 * o->tail + 1] = hi;
    o->tail = (o->tail + 1) % o->cap;
    o->pending++;
    pthread_cond_signal(&o->work);
}

void overlap_ready(void *ctx, size_t first, size_t count)
{
    struct overlap *o = ctx;
    pthread_mutex_lock(&o->mu);
    if (o->hi > o->lo && first + count != o->lo) {  /* not adjacent: send what was gathered */
        send_locked(o, o->lo, o->hi);
        o->lo = o->hi = 0;
    }
    if (o->hi == o->lo)
        o->hi = first + count;
    o->lo = first;
    if (o->hi - o->lo >= o->bucket) {
        send_locked(o, o->lo, o->hi);
        o->lo = o->hi = 0;
    }
    pthread_mutex_unlock(&o->mu);
}

st_status overlap_finish(struct overlap *o)
{
    pthread_mutex_lock(&o->mu);
    send_locked(o, o->lo, o->hi);
    o->lo = o->hi = 0;
    while (o->pending > 0)
        pthread_cond_wait(&o->done, &o->mu);
    st_status st = o->failed;
    char why[256];
    snprintf(why, sizeof why, "%s", o->why);
    pthread_mutex_unlock(&o->mu);
    return st == ST_OK ? ST_OK : st_fail(st, "%s", why);
}

void overlap_stop(struct overlap *o)
{
    if (!o->started)
        return;
    pthread_mutex_lock(&o->mu);
    o->quit = true;
    pthread_cond_signal(&o->work);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    pthread_cond_destroy(&o->work);
    pthread_cond_destroy(&o->done);
    pthread_mutex_destroy(&o->mu);
    free(o->queue);
    o->started = false;
}
