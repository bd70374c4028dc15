/* The low-precision copies (bf16, fp16) of the weights a low-precision
 * net's kernels read.  The backend
 * registers them as it builds (where each lives, and where each element
 * goes in its kernel's layout); the optimizer writes them in its update
 * pass (st_optim_set_copies), so no step converts a weight; the net writes
 * them itself only when the parameters may have changed another way
 * (st_net_params hands out a writable pointer): at the first forward pass,
 * after a resume or a broadcast. */
#include <stdlib.h>

#include "net.h"

st_status nn_copy_add(st_net *n, size_t offset, size_t count, uint16_t *dst, st_dtype type, uint32_t *index)
{
    if (n->ncopies == n->cap_copies) {
        const int cap = n->cap_copies ? 2 * n->cap_copies : 8;
        st_weight_copy *grown = realloc(n->copies, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(index);
            return st_fail(ST_ERR_NOMEM, "net: out of memory");
        }
        n->copies = grown;
        n->cap_copies = cap;
    }
    n->copies[n->ncopies++] = (st_weight_copy){.offset = offset, .count = count, .dst = dst, .type = type, .index = index};
    n->copies_stale = true;
    return ST_OK;
}

void nn_copies_refresh(st_net *n)
{
    if (!n->copies_stale)
        return;
    for (int k = 0; k < n->ncopies; k++) {
        const st_weight_copy *c = &n->copies[k];
        const float *p = n->params + c->offset;
        if (c->index)
            st_dtype_scatter_n(c->dst, c->index, c->type, p, c->count);
        else
            st_dtype_convert_n(c->dst, c->type, p, ST_DTYPE_F32, c->count);
        n->counters.weight_reorders++;
    }
    n->copies_stale = false;
}

void nn_copies_free(st_net *n)
{
    for (int k = 0; k < n->ncopies; k++)
        free((void *)n->copies[k].index);
    free(n->copies);
    n->copies = NULL;
    n->ncopies = n->cap_copies = 0;
}

const st_weight_copy *st_net_weight_copies(const st_net *n, int *count)
{
    *count = n->ncopies;
    return n->copies;
}

size_t st_net_weight_copies_differing(const st_net *n)
{
    size_t differing = 0;
    for (int k = 0; k < n->ncopies; k++) {
        const st_weight_copy *c = &n->copies[k];
        for (size_t i = 0; i < c->count; i++) {
            uint16_t want;
            st_dtype_convert_n(&want, c->type, &n->params[c->offset + i], ST_DTYPE_F32, 1);
            differing += c->dst[c->index ? c->index[i] : i] != want;
        }
    }
    return differing;
}
