/* The activation gradients' memory in a sequence model: buffers shared by
 * liveness rather than one per layer.
 *
 * A node's output gradient (its `diff`) is alive only from the backward
 * step of its first writer (its highest-numbered consumer) down to its own
 * backward step; in a GPT most live for one step.  Kept one per layer, the
 * gradients were as large as the activations themselves: 10 GB of gpt2 at
 * its recipe's batch 12 x 1024, where a handful of buffers serve.  So in a
 * model of sequence layers the builders make the gradients' memories
 * without buffers (dn_diff_deferred), and this pass, over the finished
 * plan, gives each a buffer no other gradient alive at the same time uses
 * (interval partitioning, largest first), the buffers allocated here and
 * owned by the net.  A gradient that shares its producer's buffer (an
 * add's, dn_build_add) is one interval with it.
 *
 * The same holds for the copies a layer's backward converts for its
 * kernels (a bf16 linear layer's fp32 output gradient in bf16: 57 MB for
 * gpt2's qkv at batch 12, in each of 12 blocks): alive only while that
 * layer's backward runs, so every layer's copy of one purpose shares one
 * buffer (dn_bwd_temp).  So does the scratchpad of an inner product's
 * backward: oneDNN's own kept one per primitive (2.7 GB of bf16 gpt2's 96
 * at batch 12: the transposed copies its bf16 kernels make); made with a
 * user scratchpad, all of them share the largest's.
 *
 * Image models keep one buffer per gradient: their layers take raw
 * pointers to gradients while building (flatten's view, the max-pool's
 * chunks) and keep zeroed padding in blocked layouts, which shared buffers
 * would not honour. */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* The layer kinds whose builders reach gradients only through their memory
 * objects at run time. */
static bool defers(node_kind k)
{
    switch (k) {
    case NODE_INPUT: case NODE_EMBED: case NODE_LAYERNORM: case NODE_ATTENTION: case NODE_GELU:
    case NODE_LINEAR: case NODE_ADD: case NODE_HEAD: case NODE_RELU: case NODE_DROPOUT:
        return true;
    default:
        return false;
    }
}

bool dn_diffs_shared(const st_net *n)
{
    if (!n->model->nodes[0].tokens)
        return false;
    for (int j = 0; j < n->nx; j++)
        if (!defers(n->x[j].kind))
            return false;
    return true;
}

/* One gradient buffer's claim: [lo, hi] in node indices (backward runs hi
 * first), and the memories it serves. */
struct claim {
    size_t bytes;
    int lo, hi;
    dnnl_memory_t mem[8];  /* a node's diff and the adds' sharing it, in a chain */
    int nmem;
    int buffer;
};

static int by_size(const void *a, const void *b)
{
    const struct claim *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : y->hi - x->hi;
}

/* Node j's gradient lives from its first writer's step to its own; with
 * no consumer, from before the backward pass (the loss's gradient). */
static int last_step(const st_net *n, int j)
{
    return n->x[j].first_writer >= 0 ? n->x[j].first_writer : n->nx;
}

/* The claims: each deferred diff (joined with the add that shares it) and
 * each deferred diff_tmp (a second consumer's gradient, alive as long). */
static int gather_claims(const st_net *n, struct claim *c)
{
    int k = 0;
    for (int j = 0; j < n->nx; j++) {
        const struct onednn_node *dn = dn_state(&n->x[j]);
        if (dn->diff_deferred && dn->diff_home < 0)
            c[k++] = (struct claim){.bytes = dnnl_memory_desc_get_size(dn->diff.md), .lo = j, .hi = last_step(n, j),
                                    .mem = {dn->diff.mem}, .nmem = 1, .buffer = -1};
        if (dn->diff_tmp.mem && dn->diff_deferred)
            c[k++] = (struct claim){.bytes = dnnl_memory_desc_get_size(dn->diff_tmp.md), .lo = j,
                                    .hi = last_step(n, j), .mem = {dn->diff_tmp.mem}, .nmem = 1, .buffer = -1};
    }
    for (int j = 0; j < n->nx; j++) {  /* an add sharing its input's buffer joins that input's claim */
        const struct onednn_node *dn = dn_state(&n->x[j]);
        if (!dn->diff_deferred || dn->diff_home < 0)
            continue;
        for (int i = 0; i < k; i++)
            for (int m = 0; m < c[i].nmem; m++)
                if (c[i].mem[m] == dn_state(&n->x[dn->diff_home])->diff.mem && c[i].nmem < 8) {
                    c[i].mem[c[i].nmem++] = dn->diff.mem;
                    c[i].hi = c[i].hi > last_step(n, j) ? c[i].hi : last_step(n, j);
                    break;
                }
    }
    return k;
}

/* Claim i takes a buffer none of whose claims so far overlaps it. */
static int place(struct claim *c, int i, int buffers)
{
    for (int b = 0; b < buffers; b++) {
        bool free = true;
        for (int q = 0; q < i && free; q++)
            free = c[q].buffer != b || c[q].lo > c[i].hi || c[q].hi < c[i].lo;
        if (free)
            return b;
    }
    return buffers;
}

st_status dn_bwd_temp(st_net *n, enum dn_temp purpose, const_dnnl_memory_desc_t md, dnnl_memory_t *out)
{
    struct dn_bwd_temps *t = &dn_net(n)->temps;
    if (!dn_net(n)->diffs_shared)
        return dn_mem_new(n, out, md, NULL);
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 16;
        dnnl_memory_t *mems = realloc(t->mems, (size_t)cap * sizeof *mems);
        if (mems)
            t->mems = mems;
        int *slot = mems ? realloc(t->slot, (size_t)cap * sizeof *slot) : NULL;
        if (!slot)
            return st_fail(ST_ERR_NOMEM, "net: out of memory");
        t->slot = slot, t->cap = cap;
    }
    OK(dn_mem_unbacked(n, out, md));
    const size_t bytes = dnnl_memory_desc_get_size(md);
    t->bytes[purpose] = t->bytes[purpose] > bytes ? t->bytes[purpose] : bytes;
    t->mems[t->n] = *out, t->slot[t->n++] = purpose;
    return ST_OK;
}

st_status dn_user_scratchpad(st_net *n, const_dnnl_primitive_attr_t *out)
{
    struct onednn_net *d = dn_net(n);
    if (!d->user_scratchpad) {
        TRY(dnnl_primitive_attr_create(&d->user_scratchpad));
        TRY(dnnl_primitive_attr_set_scratchpad_mode(d->user_scratchpad, dnnl_scratchpad_mode_user));
    }
    *out = d->user_scratchpad;
    return ST_OK;
}

st_status dn_op_scratchpad(st_net *n, struct op *o, const_dnnl_primitive_desc_t pd)
{
    const_dnnl_memory_desc_t md = dn_query(pd, dnnl_query_scratchpad_md, 0);
    if (!md || dnnl_memory_desc_get_size(md) == 0)
        return ST_OK;
    if (o->nargs >= (int)(sizeof o->args / sizeof *o->args))
        return st_fail(ST_ERR_BACKEND, "net: an op with too many arguments for its scratchpad");
    dnnl_memory_t m;
    OK(dn_bwd_temp(n, DN_TEMP_SCRATCHPAD, md, &m));
    o->args[o->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m};
    return ST_OK;
}

static st_status place_temps(struct onednn_net *d)
{
    struct dn_bwd_temps *t = &d->temps;
    for (int s = 0; s < DN_TEMP_SLOTS; s++)
        if (t->bytes[s] && !(t->buffers[s] = nn_lines_alloc(t->bytes[s], 1, true)))
            return st_fail(ST_ERR_NOMEM, "net: out of memory for %.1f MB of backward's conversions", t->bytes[s] / 1e6);
    for (int i = 0; i < t->n; i++)
        if (dnnl_memory_set_data_handle(t->mems[i], t->buffers[t->slot[i]]) != dnnl_success)
            return st_fail(ST_ERR_BACKEND, "oneDNN: cannot place a conversion in its buffer");
    return ST_OK;
}

st_status dn_share_diffs(st_net *n)
{
    struct onednn_net *d = dn_net(n);
    if (!d->diffs_shared)
        return ST_OK;
    OK(place_temps(d));
    struct claim *c = calloc((size_t)(2 * n->nx), sizeof *c);
    size_t *sizes = calloc((size_t)(2 * n->nx), sizeof *sizes);
    st_status st = c && sizes ? ST_OK : st_fail(ST_ERR_NOMEM, "net: out of memory");
    const int k = st == ST_OK ? gather_claims(n, c) : 0;
    qsort(c, (size_t)k, sizeof *c, by_size);
    int buffers = 0;
    for (int i = 0; i < k; i++) {
        c[i].buffer = place(c, i, buffers);
        buffers += c[i].buffer == buffers;
        sizes[c[i].buffer] = sizes[c[i].buffer] > c[i].bytes ? sizes[c[i].buffer] : c[i].bytes;
    }
    if (st == ST_OK && !(d->diff_buffers = calloc((size_t)buffers ? (size_t)buffers : 1, sizeof *d->diff_buffers)))
        st = st_fail(ST_ERR_NOMEM, "net: out of memory");
    for (int b = 0; st == ST_OK && b < buffers; b++, d->ndiff_buffers++)
        if (!(d->diff_buffers[b] = nn_lines_alloc(sizes[b], 1, true)))
            st = st_fail(ST_ERR_NOMEM, "net: out of memory for %.1f MB of gradients", sizes[b] / 1e6);
    for (int i = 0; st == ST_OK && i < k; i++)
        for (int m = 0; m < c[i].nmem; m++)
            if (dnnl_memory_set_data_handle(c[i].mem[m], d->diff_buffers[c[i].buffer]) != dnnl_success)
                st = st_fail(ST_ERR_BACKEND, "oneDNN: cannot place a gradient in its buffer");
    for (int b = 0; b < buffers; b++)
        d->diff_bytes += sizes[b];
    free(c);
    free(sizes);
    return st;
}

void dn_diffs_free(struct onednn_net *d)
{
    if (d->user_scratchpad)
        dnnl_primitive_attr_destroy(d->user_scratchpad);
    for (int s = 0; s < DN_TEMP_SLOTS; s++)
        free(d->temps.buffers[s]);
    free(d->temps.mems);
    free(d->temps.slot);
    for (int b = 0; b < d->ndiff_buffers; b++)
        free(d->diff_buffers[b]);
    free(d->diff_buffers);
}

/* Every output gradient the plan holds (diff, and diff_tmp where a second
 * consumer adds in), and the buffers behind them. */
void dn_gradient_memory(const st_net *n, st_net_gradient_memory *m)
{
    const struct onednn_net *d = dn_net(n);
    *m = (st_net_gradient_memory){0};
    for (int j = 0; j < n->nx; j++) {
        const struct onednn_node *dn = dn_state(&n->x[j]);
        const dnnl_memory_t mems[2] = {dn->diff.mem, dn->diff_tmp.mem};
        for (int k = 0; k < 2; k++) {
            if (!mems[k] || !dn_mem_ptr(mems[k]))
                continue;  /* a fused head's: never held */
            m->gradients++;
            if (!dn->diff_deferred && !(k == 0 && dn->diff_home >= 0)) {
                m->buffers++;
                m->bytes += dnnl_memory_desc_get_size(dn_mem_md(mems[k]));
            }
        }
    }
    m->buffers += d->ndiff_buffers;
    m->bytes += d->diff_bytes;
    for (int s = 0; s < DN_TEMP_SLOTS; s++)
        if (d->temps.buffers[s])
            m->conversion_buffers++, m->conversion_bytes += d->temps.bytes[s];
}
