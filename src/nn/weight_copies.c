/* The low-precision copies (bf16, fp16) of the weights a low-precision
 * net's kernels read.  The backend
 * registers them as it builds (where each lives, and where each element
 * goes in its kernel's layout); the optimizer writes them in its update
 * pass (st_optim_set_copies), so no step converts a weight; the net writes
 * them itself only when the parameters may have changed another way
 * (st_net_params hands out a writable pointer): at the first forward pass,
 * after a resume or a broadcast. */
#include <stdlib.h>

#include "kernels/copy_layouts.h"
#include "net.h"

static st_status add(st_net *n, st_weight_copy copy)
{
    if (n->ncopies == n->cap_copies) {
        const int cap = n->cap_copies ? 2 * n->cap_copies : 8;
        st_weight_copy *grown = realloc(n->copies, (size_t)cap * sizeof *grown);
        if (!grown) {
            free((void *)copy.index);
            return st_fail(ST_ERR_NOMEM, "net: out of memory");
        }
        n->copies = grown;
        n->cap_copies = cap;
    }
    n->copies[n->ncopies++] = copy;
    n->copies_stale = true;
    return ST_OK;
}

st_status nn_copy_add(st_net *n, size_t offset, size_t count, uint16_t *dst, st_dtype type, uint32_t *index)
{
    return add(n, (st_weight_copy){.offset = offset, .count = count, .dst = dst, .type = type, .index = index});
}

st_status nn_copy_add_pairs(st_net *n, size_t offset, long rows, long cols, uint16_t *dst, st_copy_layout layout)
{
    return add(n, (st_weight_copy){.offset = offset, .count = (size_t)(rows * cols), .dst = dst,
                                   .type = ST_DTYPE_BF16, .layout = layout, .rows = rows, .cols = cols});
}

void nn_copies_refresh(st_net *n)
{
    if (!n->copies_stale)
        return;
    for (int k = 0; k < n->ncopies; k++) {
        const st_weight_copy *c = &n->copies[k];
        nn_copy_write(c, n->params + c->offset, 0, c->count);
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
            differing += c->dst[st_weight_copy_place(c, i)] != want;
        }
    }
    return differing;
}
