/* Image batches decoded on demand by worker threads ahead of the trainer
 * (data.h, st_stream).  A batch is a job in a short queue: its samples are
 * claimed one at a time under the lock by the workers and by the thread
 * that takes it, each decoding into the job's own buffer. */
#define _GNU_SOURCE
#include "dataset_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { QUEUE = 2 };  /* the batch being taken and the next one */

struct job {
    bool used;
    st_batch_spec spec;           /* order resolved into idx */
    float mean[4], std[4];
    uint32_t *idx;
    bool *real;
    float *x;
    int *labels;
    int next, done, batch;        /* samples claimed, finished */
    char err[320];                /* the first decoding failure */
};

struct st_stream {
    const st_folder *folder;
    const st_dataset *labels;
    int split, c, h, w;
    size_t sample;                /* bytes of one decoded image */
    pthread_mutex_t lock;
    pthread_cond_t work, finished;
    struct job jobs[QUEUE];
    pthread_t *threads;
    int nthreads;
    bool stopping;
    unsigned long long decoded;   /* samples, by every thread */
};

static bool same_batch(const st_batch_spec *a, const st_batch_spec *b)
{
    return a->first == b->first && a->world == b->world && a->rank == b->rank && a->batch == b->batch &&
           a->epoch == b->epoch && a->augment == b->augment && a->seed == b->seed;
}

/* Decode sample k of job j outside the lock. */
static void decode_sample(struct st_stream *s, struct job *j, int k, uint8_t *scratch)
{
    char err[320];
    const size_t floats = s->sample;
    if (st_folder_decode_one(s->folder, s->split, j->idx[k], scratch, err, sizeof err) == 0) {
        st_batch_spec spec = j->spec;
        spec.mean = j->mean;
        spec.std = j->std;
        sample_fill(scratch, s->c, s->h, s->w, j->idx[k], &spec, j->x + (size_t)k * floats);
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (!j->err[0])
        snprintf(j->err, sizeof j->err, "%s", err);
    pthread_mutex_unlock(&s->lock);
}

/* Under the lock: a sample of some queued job to decode, oldest job first. */
static struct job *claim(struct st_stream *s, int *k)
{
    for (int q = 0; q < QUEUE; q++)
        if (s->jobs[q].used && s->jobs[q].next < s->jobs[q].batch) {
            *k = s->jobs[q].next++;
            return &s->jobs[q];
        }
    return NULL;
}

static void finish(struct st_stream *s, struct job *j)
{
    pthread_mutex_lock(&s->lock);
    s->decoded++;
    if (++j->done == j->batch)
        pthread_cond_broadcast(&s->finished);
    pthread_mutex_unlock(&s->lock);
}

static void *worker(void *arg)
{
    struct st_stream *s = arg;
    uint8_t *scratch = malloc(s->sample);
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        int k;
        struct job *j = scratch ? claim(s, &k) : NULL;
        if (!j) {
            pthread_cond_wait(&s->work, &s->lock);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        decode_sample(s, j, k, scratch);
        finish(s, j);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    free(scratch);
    return NULL;
}

static void free_job(struct job *j)
{
    free(j->idx), free(j->real), free(j->x), free(j->labels);
    *j = (struct job){0};
}

/* Under the lock: queue a job for `spec`, its order resolved now. */
static st_status enqueue(struct st_stream *s, const st_batch_spec *spec, struct job **out)
{
    struct job *j = NULL;
    for (int q = 0; q < QUEUE && !j; q++)
        if (!s->jobs[q].used)
            j = &s->jobs[q];
    if (!j)
        return st_fail(ST_ERR_INVALID, "data: more than %d batches requested ahead", QUEUE);
    const size_t n = st_dataset_size(s->labels);
    j->idx = malloc((size_t)spec->batch * sizeof *j->idx);
    j->real = malloc((size_t)spec->batch * sizeof *j->real);
    j->x = malloc((size_t)spec->batch * s->sample * sizeof *j->x);
    j->labels = malloc((size_t)spec->batch * sizeof *j->labels);
    if (!j->idx || !j->real || !j->x || !j->labels) {
        free_job(j);
        return st_fail(ST_ERR_NOMEM, "data: out of memory for a batch of %d", spec->batch);
    }
    j->used = true;
    j->spec = *spec;
    j->spec.order = NULL;
    j->batch = spec->batch;
    for (int c = 0; c < s->c && c < 4; c++)  /* the spec's may change once it is queued */
        j->mean[c] = spec->mean[c], j->std[c] = spec->std[c];
    for (int k = 0; k < spec->batch; k++) {
        j->idx[k] = (uint32_t)batch_sample(spec, k, n, &j->real[k]);
        j->labels[k] = st_dataset_label(s->labels, j->idx[k]);
    }
    pthread_cond_broadcast(&s->work);
    *out = j;
    return ST_OK;
}

st_status st_stream_request(st_stream *s, const st_batch_spec *spec)
{
    pthread_mutex_lock(&s->lock);
    struct job *j;
    st_status st = enqueue(s, spec, &j);
    pthread_mutex_unlock(&s->lock);
    return st;
}

st_status st_stream_take(st_stream *s, const st_batch_spec *spec, float *x, int *labels, int *valid)
{
    uint8_t *scratch = malloc(s->sample);
    if (!scratch)
        return st_fail(ST_ERR_NOMEM, "data: out of memory");
    pthread_mutex_lock(&s->lock);
    struct job *j = NULL;
    for (int q = 0; q < QUEUE && !j; q++)
        if (s->jobs[q].used && same_batch(&s->jobs[q].spec, spec))
            j = &s->jobs[q];
    for (int q = 0; q < QUEUE && !j; q++)  /* not the batch asked for: another run of the loop; drop them */
        if (s->jobs[q].used && s->jobs[q].next == s->jobs[q].done)
            free_job(&s->jobs[q]);
    st_status st = j ? ST_OK : enqueue(s, spec, &j);
    while (st == ST_OK && j->next < j->batch) {  /* help: the step waits for this batch anyway */
        const int k = j->next++;
        pthread_mutex_unlock(&s->lock);
        decode_sample(s, j, k, scratch);
        finish(s, j);
        pthread_mutex_lock(&s->lock);
    }
    while (st == ST_OK && j->done < j->batch)
        pthread_cond_wait(&s->finished, &s->lock);
    if (st == ST_OK) {
        if (j->err[0])
            st = st_fail(ST_ERR_FORMAT, "%s", j->err);
        memcpy(x, j->x, (size_t)j->batch * s->sample * sizeof *x);
        memcpy(labels, j->labels, (size_t)j->batch * sizeof *labels);
        int real = 0;
        for (int k = 0; k < j->batch; k++)
            real += j->real[k];
        if (valid)
            *valid = real;
        free_job(j);
    }
    pthread_mutex_unlock(&s->lock);
    free(scratch);
    return st;
}

unsigned long long st_stream_decoded(st_stream *s)
{
    pthread_mutex_lock(&s->lock);
    const unsigned long long n = s->decoded;
    pthread_mutex_unlock(&s->lock);
    return n;
}

st_status st_stream_create(st_stream **out, const st_folder *f, int split, const st_dataset *labels, int workers)
{
    *out = NULL;
    st_stream *s = calloc(1, sizeof *s);
    if (!s)
        return st_fail(ST_ERR_NOMEM, "data: out of memory");
    s->folder = f;
    s->labels = labels;
    s->split = split;
    st_dataset_shape(labels, &s->c, &s->h, &s->w);
    s->sample = st_folder_sample_bytes(f);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->finished, NULL);
    s->threads = calloc(workers > 0 ? (size_t)workers : 1, sizeof *s->threads);
    st_status st = s->threads ? ST_OK : st_fail(ST_ERR_NOMEM, "data: out of memory");
    for (int i = 0; i < workers && st == ST_OK; i++) {
        const int err = pthread_create(&s->threads[i], NULL, worker, s);
        if (err)
            st = st_fail(ST_ERR_SYS, "data: pthread_create: %s", strerror(err));
        else
            s->nthreads++;
    }
    if (st != ST_OK) {
        st_stream_destroy(s);
        return st;
    }
    *out = s;
    return ST_OK;
}

void st_stream_destroy(st_stream *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    for (int q = 0; q < QUEUE; q++)  /* a worker may have been decoding into it: all joined now */
        if (s->jobs[q].used)
            free_job(&s->jobs[q]);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->finished);
    free(s->threads);
    free(s);
}

st_status st_stream_stats(st_stream *s, size_t cap, float *mean, float *std)
{
    const size_t n = st_dataset_size(s->labels), take = n < cap ? n : cap;
    uint32_t *order = malloc(n * sizeof *order);
    uint8_t *pick = calloc(n, 1);
    st_dataset *sample = NULL;
    st_status st = order && pick ? alloc_dataset(&sample, take, s->c, s->h, s->w, "stats", true)
                                 : st_fail(ST_ERR_NOMEM, "data: out of memory");
    long bad = -1;
    char err[320] = "";
    if (st == ST_OK) {
        st_epoch_order(order, n, 0x57a75ull, 0);
        for (size_t k = 0; k < take; k++)
            pick[order[k]] = 1;
        size_t at = 0;
        for (size_t i = 0; i < n; i++)  /* in the listing's order */
            if (pick[i])
                order[at++] = (uint32_t)i;
#pragma omp parallel for schedule(dynamic, 16)
        for (long k = 0; k < (long)take; k++) {
            char mine[320];
            if (st_folder_decode_one(s->folder, s->split, order[k], sample->images + (size_t)k * s->sample, mine,
                                     sizeof mine) != 0) {
#pragma omp critical(stream_stats_error)
                if (bad < 0 || k < bad) {
                    bad = k;
                    snprintf(err, sizeof err, "%s", mine);
                }
            }
        }
        if (bad >= 0)
            st = st_fail(ST_ERR_FORMAT, "%s", err);
    }
    if (st == ST_OK)
        st_dataset_stats(sample, mean, std, s->c);
    st_dataset_destroy(sample);
    free(order);
    free(pick);
    return st;
}
