/* The edges between nodes as the builders wire them: a node's input in the
 * layout its primitive wants, and a gradient delivered to its producer (or
 * added into it), each reordered through a temporary where the layouts
 * differ.  Above the context (memories, primitives), the reorders and the
 * backward temporaries; below every builder. */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* Add j's gradient, kept in its other input's buffer (its home), read
 * where it lies by the next writer of p backward: that writer's sum takes
 * it in place of p's buffer, which would otherwise hold a copy of it (a
 * pass over a residual block's input each step).  Only where the home's
 * buffer stays as the add left it until then: its own (image models; a
 * GPT's gradient buffers are shared by liveness), written by nothing else
 * (no ReLU's backward in place on it), in p's layout. */
static bool read_in_place_later(st_net *n, int j, int p, const_dnnl_memory_desc_t md, dnnl_memory_t computed)
{
    const struct xnode *x = &n->x[j], *px = &n->x[p];
    const int home = dn_state(x)->diff_home;
    if (x->kind != NODE_ADD || home < 0 || home == p || computed != dn_state(x)->diff.mem || px->consumers < 2 ||
        n->x[home].fuse_relu || dn_diffs_shared(n) || !dn_same(md, dn_state(px)->diff.md))
        return false;
    for (int k = j - 1; k > p; k--) {
        if (n->x[k].in != p && n->x[k].in2 != p)
            continue;
        struct oplist *bwd = &dn_state(&n->x[k])->bwd;  /* its sum into p's buffer, made when k was built */
        for (int i = 0; i < bwd->n; i++) {
            struct op *o = &bwd->v[i];
            if (o->prim != dn_state(px)->accum || o->nargs != 3 || o->args[0].memory != dn_state(px)->diff.mem)
                continue;
            o->args[0].memory = computed;
            return true;
        }
        return false;
    }
    return false;
}

/* The gradient w.r.t. producer p's output, computed by node j in layout
 * `md`, must reach p->diff (first writer) or be added to it.  Returns in
 * *target the memory j's backward primitive should write: p's own buffer
 * when layouts agree, else a scratch one followed by a reorder.  With
 * `computed` set, the gradient already sits in that memory (flatten's view,
 * add's own diff) and is only delivered. */
st_status dn_deliver(st_net *n, int j, int p, const_dnnl_memory_desc_t md, dnnl_memory_t computed,
                     dnnl_memory_t *target)
{
    struct xnode *px = &n->x[p];
    struct oplist *bwd = &dn_state(&n->x[j])->bwd;
    *target = NULL;
    if (!px->wants_diff)
        return ST_OK;
    bool first = px->first_writer == j;
    dnnl_memory_t dest = first ? dn_state(px)->diff.mem : dn_state(px)->diff_tmp.mem;
    if (computed && first && computed == dn_state(&n->x[j])->diff.mem && dn_state(&n->x[j])->diff_home == p)
        return ST_OK;  /* it is already there: the two share a buffer (add's) */
    if (computed && first && read_in_place_later(n, j, p, md, computed))
        return ST_OK;
    if (!computed && dn_same(md, dn_state(px)->dst.md)) {
        *target = dest;
    } else {
        if (!computed)
            OK(dn_bwd_temp(n, DN_TEMP_DIFF_SRC, md, &computed));
        *target = computed;
        OK(dn_add_reorder(n, bwd, computed, dest));
    }
    if (!first)
        OK(dn_add_op(n, bwd, dn_state(px)->accum, NODE_KINDS, DNNL_ARG_SRC_0, dn_state(px)->diff.mem, DNNL_ARG_SRC_1,
                  dn_state(px)->diff_tmp.mem, DNNL_ARG_DST, dn_state(px)->diff.mem, -1));
    return ST_OK;
}

/* Forward input of node x in the layout `want`, reordering if needed. */
st_status dn_input_as(st_net *n, struct xnode *x, const_dnnl_memory_desc_t want, dnnl_memory_t *out)
{
    struct xnode *px = &n->x[x->in];
    if (dn_same(want, dn_state(px)->dst.md)) {
        *out = dn_state(px)->dst.mem;
        return ST_OK;
    }
    OK(dn_mem_new(n, out, want, NULL));
    return dn_add_reorder(n, &dn_state(x)->fwd, dn_state(px)->dst.mem, *out);
}

st_status dn_bwd_input(st_net *n, struct oplist *bwd, dnnl_memory_t have, const_dnnl_memory_desc_t want,
                       enum dn_temp purpose, dnnl_memory_t *out)
{
    if (dn_same(want, dn_mem_md(have))) {
        *out = have;
        return ST_OK;
    }
    OK(dn_bwd_temp(n, purpose, want, out));
    return dn_add_reorder(n, bwd, have, *out);
}

st_status dn_add_bwd_op(st_net *n, int j, dnnl_primitive_t prim, const_dnnl_memory_desc_t md, struct op **op, ...)
{
    dnnl_exec_arg_t args[10];
    int nargs = 0;
    va_list ap;
    va_start(ap, op);
    for (int key; (key = va_arg(ap, int)) != -1 && nargs < 9;)
        args[nargs++] = (dnnl_exec_arg_t){key, va_arg(ap, dnnl_memory_t)};
    va_end(ap);
    struct oplist *bwd = &dn_state(&n->x[j])->bwd;
    OK(dn_add_op(n, bwd, prim, n->x[j].kind, -1));
    const int at = bwd->n - 1;  /* the delivery may grow the list: the op is found again by its place */
    dnnl_memory_t target;
    OK(dn_deliver(n, j, n->x[j].in, md, NULL, &target));
    if (!target)
        OK(dn_mem_new(n, &target, md, NULL));  /* computed anyway, then dropped */
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, target};
    struct op *o = &bwd->v[at];
    memcpy(o->args, args, (size_t)nargs * sizeof *args);
    o->nargs = nargs;
    if (op)
        *op = o;
    return ST_OK;
}
