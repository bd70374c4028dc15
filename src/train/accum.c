/* Gradient accumulation over micro-batches (accum.h). */
#include "accum.h"

#include <stdlib.h>
#include <string.h>

st_status accum_init(struct accum *a, float *grads, size_t count, int steps, bool open_ended)
{
    memset(a, 0, sizeof *a);
    a->grads = grads;
    a->count = count;
    a->steps = steps;
    a->open_ended = open_ended;
    a->last = true;
    if (steps < 2 && !open_ended)
        return ST_OK;
    /* written now (calloc would leave fresh pages untouched), on this
     * instance's node and outside any step: under --balance dynamic an
     * instance may take its first micro-batch many steps in, and faulted
     * then (train records' page_faults) */
    if (!(a->sum = malloc((count ? count : 1) * sizeof(float))))
        return st_fail(ST_ERR_NOMEM, "--grad-accum: out of memory for %zu gradients", count);
    memset(a->sum, 0, (count ? count : 1) * sizeof(float));
    return ST_OK;
}

void accum_free(struct accum *a)
{
    free(a->sum);
    a->sum = NULL;
}

void accum_step(struct accum *a) { a->added = 0; }

void accum_begin(struct accum *a, int micro) { a->last = !a->open_ended && micro == a->steps - 1; }

void accum_add(struct accum *a)
{
    float *restrict sum = a->sum;
    const float *restrict g = a->grads;
    if (!sum || a->last)
        return;
    if (a->added++ == 0) {
        memcpy(sum, g, a->count * sizeof(float));
        return;
    }
    for (size_t i = 0; i < a->count; i++)
        sum[i] += g[i];
}

/* grads = (grads + sum) / steps over [first, first + count): the earlier
 * micro-batches' sum plus the last's, then the mean. */
static void finish_range(struct accum *a, size_t first, size_t count)
{
    float *restrict g = a->grads + first;
    const float *restrict sum = a->sum + first;
    const float steps = (float)a->steps;
    for (size_t i = 0; i < count; i++)
        g[i] = (g[i] + sum[i]) / steps;
}

void accum_finish(struct accum *a)
{
    if (!a->sum)
        return;
    if (!a->open_ended) {
        finish_range(a, 0, a->count);
        return;
    }
    /* every micro-batch is in the sum; a rank that took none adds zeros */
    float *restrict g = a->grads;
    const float *restrict sum = a->sum;
    const float steps = (float)a->steps;
    if (a->added == 0)
        memset(g, 0, a->count * sizeof(float));
    else
        for (size_t i = 0; i < a->count; i++)
            g[i] = sum[i] / steps;
}

void accum_ready(void *ctx, size_t first, size_t count)
{
    struct accum *a = ctx;
    if (!a->last)
        return;  /* an earlier micro-batch: no exchange yet (DDP's no_sync) */
    if (a->sum)
        finish_range(a, first, count);
    if (a->next)
        a->next(a->next_ctx, first, count);
}
