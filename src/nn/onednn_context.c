/* The oneDNN backend's registry and plumbing (see onednn_internal.h). */
#define _GNU_SOURCE
#include <dnnl_debug.h>
#include "onednn_internal.h"

st_status dn_dnnl_error(const st_net *n, const char *call, dnnl_status_t s)
{
    const struct onednn_net *d = n->dnet;
    const struct xnode *x = d && d->cur >= 0 && d->cur < n->nx ? &n->x[d->cur] : NULL;
    char call_name[64];
    snprintf(call_name, sizeof call_name, "%.*s", (int)strcspn(call, "("), call);
    if (x)
        return st_fail(ST_ERR_BACKEND, "oneDNN: %s failed: %s (%s layer at model line %d)", call_name,
                       dnnl_status2str(s), node_kind_name(x->kind), x->nd->line);
    return st_fail(ST_ERR_BACKEND, "oneDNN: %s failed: %s", call_name, dnnl_status2str(s));
}

static bool grow(void **v, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return true;
    int c = *cap ? *cap * 2 : 64;
    void *p = realloc(*v, (size_t)c * elem);
    if (!p)
        return false;
    *v = p;
    *cap = c;
    return true;
}

static st_status keep_mem(st_net *n, dnnl_memory_t m)
{
    struct onednn_net *d = n->dnet;
    if (!grow((void **)&d->mems, &d->cap_mems, d->nmems, sizeof *d->mems)) {
        dnnl_memory_destroy(m);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->mems[d->nmems++] = m;
    return ST_OK;
}

/* A memory with `handle` (not owned), or allocated and zeroed (blocked
 * layouts' padding must be zero: primitives assume it). */
st_status dn_mem_new(st_net *n, dnnl_memory_t *out, const dnnl_memory_desc_t *md, void *handle)
{
    TRY(dnnl_memory_create(out, md, n->dnet->eng, handle ? handle : DNNL_MEMORY_ALLOCATE));
    OK(keep_mem(n, *out));
    if (!handle) {
        void *p = NULL;
        TRY(dnnl_memory_get_data_handle(*out, &p));
        memset(p, 0, dnnl_memory_desc_get_size(md));
    }
    return ST_OK;
}

void *dn_mem_ptr(dnnl_memory_t m)
{
    void *p = NULL;
    dnnl_memory_get_data_handle(m, &p);
    return p;
}

const dnnl_memory_desc_t *dn_mem_md(dnnl_memory_t m)
{
    const dnnl_memory_desc_t *md = NULL;
    dnnl_memory_get_memory_desc(m, &md);
    return md;
}

/* oneDNN's first candidate, or with `avoid` set the first whose kernel
 * name does not start with it (and is not the reference), if there is one. */
static dnnl_status_t first_candidate(st_net *n, dnnl_primitive_desc_t *out, const void *op_desc,
                                     const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint,
                                     const char *avoid)
{
    struct onednn_net *d = n->dnet;
    dnnl_primitive_desc_iterator_t it;
    if (!avoid || dnnl_primitive_desc_iterator_create(&it, op_desc, attr, d->eng, hint) != dnnl_success)
        return dnnl_primitive_desc_create(out, op_desc, attr, d->eng, hint);
    *out = NULL;
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl = NULL;
        if (pd && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
            strncmp(impl, avoid, strlen(avoid)) && strncmp(impl, "ref", 3)) {
            *out = pd;
            break;
        }
        if (pd)
            dnnl_primitive_desc_destroy(pd);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return *out ? dnnl_success : dnnl_primitive_desc_create(out, op_desc, attr, d->eng, hint);
}

st_status dn_pd_new_avoiding(st_net *n, dnnl_primitive_desc_t *out, const void *op_desc,
                                 const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint, const char *avoid)
{
    struct onednn_net *d = n->dnet;
    TRY(first_candidate(n, out, op_desc, attr, hint, avoid));
    if (!grow((void **)&d->pds, &d->cap_pds, d->npds, sizeof *d->pds)) {
        dnnl_primitive_desc_destroy(*out);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->pds[d->npds++] = *out;  /* backward pds keep a raw pointer to their hint */
    return ST_OK;
}

st_status dn_pd_new(st_net *n, dnnl_primitive_desc_t *out, const void *op_desc,
                        const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint)
{
    return dn_pd_new_avoiding(n, out, op_desc, attr, hint, NULL);
}

/* oneDNN 2.6 picks its brgemm convolution first for a forward pass in
 * nhwc, but with few input channels its older jit kernel is much faster
 * here (bench/st-kernel-candidates conv, one core: lenet's 1->6 5x5 0.220 ->
 * 0.088 ms per 16-image chunk, its 6->16 5x5 at batch 64 0.44 -> 0.27 ms).
 * SHMTRAIN_ONEDNN_BRGCONV=1 keeps oneDNN's choice for comparison. */
const char *dn_conv_fwd_avoid(const st_net *n, const dnnl_memory_desc_t *src)
{
    const dnnl_blocking_desc_t *b = &src->format_desc.blocking;
    bool nhwc = src->ndims == 4 && src->format_kind == dnnl_blocked && b->inner_nblks == 0 && b->strides[1] == 1;
    return nhwc && src->dims[1] < 16 && !n->dnet->opt.brgconv ? "brgconv" : NULL;
}

st_status dn_prim_new(st_net *n, dnnl_primitive_t *out, const_dnnl_primitive_desc_t pd)
{
    struct onednn_net *d = n->dnet;
    TRY(dnnl_primitive_create(out, pd));
    if (!grow((void **)&d->prims, &d->cap_prims, d->nprims, sizeof *d->prims)) {
        dnnl_primitive_destroy(*out);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->prims[d->nprims++] = *out;
    return ST_OK;
}

st_status dn_reorder_new(st_net *n, dnnl_primitive_t *out, const dnnl_memory_desc_t *from,
                             const dnnl_memory_desc_t *to)
{
    dnnl_primitive_desc_t pd;
    TRY(dnnl_reorder_primitive_desc_create(&pd, from, n->dnet->eng, to, n->dnet->eng, NULL));
    struct onednn_net *d = n->dnet;
    if (!grow((void **)&d->pds, &d->cap_pds, d->npds, sizeof *d->pds)) {
        dnnl_primitive_desc_destroy(pd);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->pds[d->npds++] = pd;
    return dn_prim_new(n, out, pd);
}

const dnnl_memory_desc_t *dn_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index)
{
    return dnnl_primitive_desc_query_md(pd, what, index);
}

const dnnl_memory_desc_t *dn_arg_md(const_dnnl_primitive_desc_t pd, int arg)
{
    return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

bool dn_same(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b)
{
    return dnnl_memory_desc_equal(a, b) != 0;
}

st_status dn_plain_md(st_net *n, dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
    TRY(dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, tags[ndims]));
    return ST_OK;
}

st_status dn_any_md(st_net *n, dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    return dn_any_md_of(n, md, ndims, dims, dnnl_f32);
}

st_status dn_any_md_of(st_net *n, dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt)
{
    TRY(dnnl_memory_desc_init_by_tag(md, ndims, dims, dt, dnnl_format_tag_any));
    return ST_OK;
}

/* Append an op; args are (key, memory) pairs ending with a key of -1. */
st_status dn_add_op(st_net *n, struct oplist *l, dnnl_primitive_t prim, int prof, ...)
{
    if (!grow((void **)&l->v, &l->cap, l->n, sizeof *l->v))
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    struct op *o = &l->v[l->n++];
    memset(o, 0, sizeof *o);
    o->prim = prim;
    o->node = n->dnet->cur;
    o->prof = prof;
    va_list ap;
    va_start(ap, prof);
    for (int key; (key = va_arg(ap, int)) != -1 && o->nargs < 10;) {
        o->args[o->nargs].arg = key;
        o->args[o->nargs++].memory = va_arg(ap, dnnl_memory_t);
    }
    va_end(ap);
    return ST_OK;
}

st_status dn_add_step(st_net *n, struct oplist *l, st_status (*step)(st_net *, int), int prof)
{
    OK(dn_add_op(n, l, NULL, prof, -1));
    l->v[l->n - 1].step = step;
    return ST_OK;
}

/* "64x6x28x28 s4704:784:28:1 b8c": dims, strides, inner blocks (verbose builds). */
void dn_md_str(char *buf, size_t len, const dnnl_memory_desc_t *md)
{
    size_t at = 0;
    for (int i = 0; i < md->ndims && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "x" : "", (long long)md->dims[i]);
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    for (int i = 0; i < md->ndims && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ":" : " s", (long long)b->strides[i]);
    for (int i = 0; i < b->inner_nblks && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld%c", i ? "" : " b", (long long)b->inner_blks[i],
                               "abcdef"[b->inner_idxs[i] % 6]);
    if (md->data_type != dnnl_f32 && at < len)  /* a conversion shows as one */
        snprintf(buf + at, len - at, " %s", md->data_type == dnnl_bf16 ? "bf16" : "other type");
}

st_status dn_add_reorder(st_net *n, struct oplist *l, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_primitive_t r;
    OK(dn_reorder_new(n, &r, dn_mem_md(from), dn_mem_md(to)));
    if (n->dnet->opt.verbose) {  /* which layouts meet where: the cost a profile calls "reorders" */
        char a[256], b[256];
        dn_md_str(a, sizeof a, dn_mem_md(from));
        dn_md_str(b, sizeof b, dn_mem_md(to));
        fprintf(stderr, "shmtrain: node %d (line %d): reorder %s -> %s (%zu bytes)\n", n->dnet->cur,
                n->x[n->dnet->cur].nd->line, a, b, dnnl_memory_desc_get_size(dn_mem_md(to)));
    }
    return dn_add_op(n, l, r, NODE_KINDS, DNNL_ARG_FROM, from, DNNL_ARG_TO, to, -1);
}

void dn_impl_name(struct xnode *x, const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) {
        size_t len = strlen(x->impl);
        snprintf(x->impl + len, sizeof x->impl - len, "%s%s", len ? " / " : "", impl);
    }
}

/* ---------------------------------------------------------------- tensors -- */

/* The node's output (and gradient) memories, in layout `md`. */
st_status dn_set_dst(st_net *n, struct xnode *x, const dnnl_memory_desc_t *md)
{
    return dn_set_dst_diff_in(n, x, md, NULL);
}

/* The same, the gradient kept in `diff_buffer` (someone else's, same
 * layout) when not NULL. */
st_status dn_set_dst_diff_in(st_net *n, struct xnode *x, const dnnl_memory_desc_t *md, void *diff_buffer)
{
    x->dn->dst.md = *md;
    OK(dn_mem_new(n, &x->dn->dst.mem, md, NULL));
    OK(dn_mem_new(n, &x->dn->diff.mem, md, diff_buffer));
    x->dn->diff.md = *md;
    if (x->consumers > 1) {
        OK(dn_mem_new(n, &x->dn->diff_tmp.mem, md, NULL));
        x->dn->diff_tmp.md = *md;
        dnnl_binary_desc_t bd;
        dnnl_primitive_desc_t pd;
        TRY(dnnl_binary_desc_init(&bd, dnnl_binary_add, md, md, md));
        OK(dn_pd_new(n, &pd, &bd, NULL, NULL));
        OK(dn_prim_new(n, &x->dn->accum, pd));
    }
    x->dn->elems = dnnl_memory_desc_get_size(md) / sizeof(float);
    return ST_OK;
}

/* The gradient w.r.t. producer p's output, computed by node j in layout
 * `md`, must reach p->diff (first writer) or be added to it.  Returns in
 * *target the memory j's backward primitive should write: p's own buffer
 * when layouts agree, else a scratch one followed by a reorder.  With
 * `computed` set, the gradient already sits in that memory (flatten's view,
 * add's own diff) and is only delivered. */
st_status dn_deliver(st_net *n, int j, int p, const dnnl_memory_desc_t *md, dnnl_memory_t computed,
                         dnnl_memory_t *target)
{
    struct xnode *px = &n->x[p];
    struct oplist *bwd = &n->x[j].dn->bwd;
    *target = NULL;
    if (!px->wants_diff)
        return ST_OK;
    bool first = px->first_writer == j;
    dnnl_memory_t dest = first ? px->dn->diff.mem : px->dn->diff_tmp.mem;
    if (computed && first && dn_mem_ptr(computed) == dn_mem_ptr(dest))
        return ST_OK;  /* it is already there: the two share a buffer (add's) */
    if (!computed && dn_same(md, &px->dn->dst.md)) {
        *target = dest;
    } else {
        if (!computed)
            OK(dn_mem_new(n, &computed, md, NULL));
        *target = computed;
        OK(dn_add_reorder(n, bwd, computed, dest));
    }
    if (!first)
        OK(dn_add_op(n, bwd, px->dn->accum, NODE_KINDS, DNNL_ARG_SRC_0, px->dn->diff.mem, DNNL_ARG_SRC_1,
                  px->dn->diff_tmp.mem, DNNL_ARG_DST, px->dn->diff.mem, -1));
    return ST_OK;
}

/* Forward input of node x in the layout `want`, reordering if needed. */
st_status dn_input_as(st_net *n, struct xnode *x, const dnnl_memory_desc_t *want, dnnl_memory_t *out)
{
    struct xnode *px = &n->x[x->in];
    if (dn_same(want, &px->dn->dst.md)) {
        *out = px->dn->dst.mem;
        return ST_OK;
    }
    OK(dn_mem_new(n, out, want, NULL));
    return dn_add_reorder(n, &x->dn->fwd, px->dn->dst.mem, *out);
}

/* --------------------------------------------------- conv and linear -- */

bool dn_is_reference_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    return !impl || !strncmp(impl, "ref", 3);
}

dnnl_memory_t dn_arg_of(const struct op *o, int key)
{
    for (int i = 0; i < o->nargs; i++)
        if (o->args[i].arg == key)
            return o->args[i].memory;
    return NULL;
}
