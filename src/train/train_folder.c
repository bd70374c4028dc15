/* The trainer's image folders: decoded whole and shared once per node when
 * they fit --data-memory, else streamed by each rank's decoding workers,
 * the next batch requested while this one trains (trainer.h). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

/* The held-out split of a folder without val/ does not change with --seed
 * (as an array set's, train_data.c). */
#define HOLD_OUT_SEED 0x5eedull
/* Normalisation statistics of a streamed set: over this many drawn images
 * (all of a smaller set, so that its numbers are the decoded set's). */
#define STATS_SAMPLE 10000

static size_t default_budget(void)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 4 : (size_t)1 << 32;
}

st_status train_open_folder(struct trainer *t, bool *streamed)
{
    const st_train_options *o = t->o;
    *streamed = false;
    st_shape in;
    st_dtype dtype;
    st_model_input(t->model, &in, &dtype);
    if (in.ndims != 3)
        return st_fail(ST_ERR_INVALID, "--image-folder: model '%s' does not read images (C H W)", o->model);
    const st_image_spec spec = {.channels = in.dims[0], .height = in.dims[1], .width = in.dims[2],
                                .resize = o->image_size};
    st_status st = st_folder_open(&t->folder, o->image_folder, &spec);
    if (st != ST_OK)
        return st;
    const size_t n = st_folder_count(t->folder, 0);
    if (!st_folder_count(t->folder, 1)) {
        const size_t held = (size_t)((double)n * o->val_fraction);
        if (held == 0 || held >= n)
            return st_fail(ST_ERR_FORMAT, "--image-folder %s: %zu images: --val-fraction %g of them holds none out "
                                          "(or all)", o->image_folder, n, (double)o->val_fraction);
        if ((st = st_folder_hold_out(t->folder, held, HOLD_OUT_SEED)) != ST_OK)
            return st;
    }
    const double bytes = (double)(st_folder_count(t->folder, 0) + st_folder_count(t->folder, 1)) *
                         (double)st_folder_sample_bytes(t->folder);
    const double budget = o->data_memory_gb > 0 ? o->data_memory_gb * 1e9 : (double)default_budget();
    *streamed = bytes > budget;
    if (!*streamed)
        return ST_OK;
    for (int s = 0; s < 2 && st == ST_OK; s++) {
        st_dataset **d = s ? &t->test : &t->train;
        if ((st = st_folder_labels(t->folder, s, d)) == ST_OK)
            st = st_stream_create(&t->stream[s], t->folder, s, *d, s ? 0 : o->data_workers);
    }
    if (st == ST_OK)
        st = st_stream_stats(t->stream[0], STATS_SAMPLE, t->mean, t->std);
    if (st == ST_OK && t->rank == 0 && !o->quiet)
        printf("shmtrain: %s decodes to %.3g GB, more than --data-memory %.3g GB: streamed, %d decoding "
               "worker%s per instance\n", o->image_folder, bytes / 1e9, budget / 1e9, o->data_workers,
               o->data_workers == 1 ? "" : "s");
    return st;
}

st_status train_load_folder_split(struct trainer *t, bool test, st_dataset **out)
{
    return st_folder_decode(t->folder, test ? 1 : 0, out);
}

/* The batch after `spec` in the loop's order: the next micro-batch, the
 * next step's first, or the next epoch's (its order made now). */
static bool next_batch(struct trainer *t, const st_batch_spec *spec, int micro, st_batch_spec *next)
{
    *next = *spec;
    if (micro + 1 < t->accum_steps) {
        next->rank = spec->rank + t->world;
        return true;
    }
    next->rank = t->rank;
    const size_t n = st_dataset_size(t->train);
    if (spec->first + 2 * t->global_batch <= n) {
        next->first = spec->first + t->global_batch;
        return true;
    }
    if (!t->next_order && !(t->next_order = malloc(n * sizeof *t->next_order)))
        return false;  /* then taken without a request */
    st_epoch_order(t->next_order, n, t->o->seed, spec->epoch + 1);
    next->order = t->next_order;
    next->first = 0;
    next->epoch = spec->epoch + 1;
    return true;
}

/* The batch taken, decoded ahead where the next one is known.  Under
 * --balance dynamic it is not (whichever instance is free takes the next
 * micro-batch), so each is decoded as it is taken, the workers helping. */
st_status train_stream_batch(struct trainer *t, const st_batch_spec *spec, int micro)
{
    const double t0 = st_now_s();
    st_status st = st_stream_take(t->stream[0], spec, t->x, t->y, NULL);
    st_batch_spec next;
    if (st == ST_OK && !t->bal.dynamic && next_batch(t, spec, micro, &next))
        st = st_stream_request(t->stream[0], &next);
    t->t_data += st_now_s() - t0;
    return st;
}

void train_close_folder(struct trainer *t)
{
    for (int s = 0; s < 2; s++) {
        st_stream_destroy(t->stream[s]);
        t->stream[s] = NULL;
    }
    st_folder_destroy(t->folder);
    t->folder = NULL;
    free(t->next_order);
    t->next_order = NULL;
}
