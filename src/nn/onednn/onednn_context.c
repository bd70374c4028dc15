/* The oneDNN backend's registry and plumbing (see onednn_internal.h). */
#define _GNU_SOURCE
#include <dnnl_debug.h>
#include "onednn_internal.h"

st_status dn_dnnl_error(const st_net *n, const char *call, dnnl_status_t s)
{
    const struct onednn_net *d = dn_net(n);
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

static st_status keep_md(st_net *n, dnnl_memory_desc_t md)
{
    struct onednn_net *d = dn_net(n);
    if (!grow((void **)&d->mds, &d->cap_mds, d->nmds, sizeof *d->mds)) {
        dnnl_memory_desc_destroy(md);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->mds[d->nmds++] = md;
    return ST_OK;
}

static st_status keep_mem(st_net *n, dnnl_memory_t m)
{
    struct onednn_net *d = dn_net(n);
    if (!grow((void **)&d->mems, &d->cap_mems, d->nmems, sizeof *d->mems)) {
        dnnl_memory_destroy(m);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->mems[d->nmems++] = m;
    return ST_OK;
}

/* A memory with `handle` (not owned), or allocated and zeroed (blocked
 * layouts' padding must be zero: primitives assume it). */
st_status dn_mem_new(st_net *n, dnnl_memory_t *out, const_dnnl_memory_desc_t md, void *handle)
{
    TRY(dnnl_memory_create(out, md, dn_net(n)->eng, handle ? handle : DNNL_MEMORY_ALLOCATE));
    OK(keep_mem(n, *out));
    if (!handle) {
        void *p = NULL;
        TRY(dnnl_memory_get_data_handle(*out, &p));
        memset(p, 0, dnnl_memory_desc_get_size(md));
    }
    return ST_OK;
}

st_status dn_mem_unbacked(st_net *n, dnnl_memory_t *out, const_dnnl_memory_desc_t md)
{
    TRY(dnnl_memory_create(out, md, dn_net(n)->eng, DNNL_MEMORY_NONE));
    return keep_mem(n, *out);
}

void *dn_mem_ptr(dnnl_memory_t m)
{
    void *p = NULL;
    dnnl_memory_get_data_handle(m, &p);
    return p;
}

const_dnnl_memory_desc_t dn_mem_md(dnnl_memory_t m)
{
    const_dnnl_memory_desc_t md = NULL;
    dnnl_memory_get_memory_desc(m, &md);
    return md;
}

dnnl_data_type_t dn_md_type(const_dnnl_memory_desc_t md)
{
    dnnl_data_type_t dt = dnnl_f32;
    if (md)
        dnnl_memory_desc_query(md, dnnl_query_data_type, &dt);
    return dt;
}

static bool touches_bf16(const_dnnl_primitive_desc_t pd)
{
    static const dnnl_query_t queries[] = {dnnl_query_src_md,      dnnl_query_weights_md,      dnnl_query_dst_md,
                                           dnnl_query_diff_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md};
    for (size_t i = 0; i < sizeof queries / sizeof *queries; i++) {
        if (dn_md_type(dnnl_primitive_desc_query_md(pd, queries[i], 0)) == dnnl_bf16)
            return true;
    }
    return false;
}

static bool impl_is(const_dnnl_primitive_desc_t pd, const char *prefix)
{
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
           !strncmp(impl, prefix, strlen(prefix));
}

/* Moves *pd along oneDNN's candidates (in place: 3.x has no iterator) to
 * the first the engine takes; none taken, back to oneDNN's first. */
static st_status choose_impl(st_net *n, dnnl_primitive_desc_t *pd, const char *avoid, bool want_ref)
{
    dnnl_primitive_desc_t first;
    dnnl_status_t s = dnnl_primitive_desc_clone(&first, *pd);
    if (s != dnnl_success) {
        dnnl_primitive_desc_destroy(*pd);
        *pd = NULL;
        return dn_dnnl_error(n, "dnnl_primitive_desc_clone", s);
    }
    do {
        bool ref = impl_is(*pd, "ref");
        if (want_ref ? ref : !ref && !(avoid && impl_is(*pd, avoid))) {
            dnnl_primitive_desc_destroy(first);
            return ST_OK;
        }
    } while (dnnl_primitive_desc_next_impl(*pd) == dnnl_success);
    dnnl_primitive_desc_destroy(*pd);  /* left on the last candidate */
    *pd = first;
    return ST_OK;
}

st_status dn_pd_keep(st_net *n, const char *call, dnnl_status_t created, dnnl_primitive_desc_t *pd, const char *avoid)
{
    struct onednn_net *d = dn_net(n);
    if (created != dnnl_success) {
        *pd = NULL;
        return dn_dnnl_error(n, call, created);
    }
    /* The reference kernels compute what bf16 computes, on any ISA: with
     * SHMTRAIN_BF16_ANY_ISA the tests check the engine's bf16 plumbing there. */
    const bool want_ref = d->opt.bf16_any_isa && touches_bf16(*pd);
    if (avoid || want_ref)
        OK(choose_impl(n, pd, avoid, want_ref));
    if (!grow((void **)&d->pds, &d->cap_pds, d->npds, sizeof *d->pds)) {
        dnnl_primitive_desc_destroy(*pd);
        *pd = NULL;
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->pds[d->npds++] = *pd;  /* backward pds keep a raw pointer to their hint */
    return ST_OK;
}

/* oneDNN picks its brgemm convolutions first in nhwc (2.6 for the forward
 * pass, 3.2 for backward-data too, as "brg_fwd+brgconv"), but with few
 * input channels its older jit kernels are much faster on AVX-512 (bench/
 * st-kernel-candidates conv and st-step-ab: docs/benchmarks-history.md,
 * section 2, and benchmarks.md, section 0).  tuning.brgconv keeps oneDNN's
 * choice for comparison. */
const char *dn_conv_avoid(const st_net *n, const_dnnl_memory_desc_t src)
{
    struct dn_layout l;
    if (dn_net(n)->opt.brgconv || !dn_layout_of(src, &l))
        return NULL;
    bool nhwc = l.ndims == 4 && l.nblks == 0 && l.strides[1] == 1;
    return nhwc && l.dims[1] < 16 ? "brg" : NULL;
}

st_status dn_prim_new(st_net *n, dnnl_primitive_t *out, const_dnnl_primitive_desc_t pd)
{
    struct onednn_net *d = dn_net(n);
    TRY(dnnl_primitive_create(out, pd));
    if (!grow((void **)&d->prims, &d->cap_prims, d->nprims, sizeof *d->prims)) {
        dnnl_primitive_destroy(*out);
        return st_fail(ST_ERR_NOMEM, "oneDNN: out of memory");
    }
    d->prims[d->nprims++] = *out;
    return ST_OK;
}

const_dnnl_memory_desc_t dn_query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index)
{
    return dnnl_primitive_desc_query_md(pd, what, index);
}

const_dnnl_memory_desc_t dn_arg_md(const_dnnl_primitive_desc_t pd, int arg)
{
    return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

bool dn_same(const_dnnl_memory_desc_t a, const_dnnl_memory_desc_t b)
{
    return dnnl_memory_desc_equal(a, b) != 0;
}

/* ------------------------------------------------------- descriptors -- */

st_status dn_md_tag(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt,
                    dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t m;
    TRY(dnnl_memory_desc_create_with_tag(&m, ndims, dims, dt, tag));
    OK(keep_md(n, m));
    *md = m;
    return ST_OK;
}

st_status dn_md2(st_net *n, const_dnnl_memory_desc_t *md, long a, long b, dnnl_data_type_t dt,
               dnnl_format_tag_t tag)
{
    const dnnl_dims_t d = {a, b};
    return dn_md_tag(n, md, 2, d, dt, tag);
}

st_status dn_plain_md(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
    return dn_md_tag(n, md, ndims, dims, dnnl_f32, tags[ndims]);
}

st_status dn_any_md(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    return dn_any_md_of(n, md, ndims, dims, dnnl_f32);
}

st_status dn_any_md_of(st_net *n, const_dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims, dnnl_data_type_t dt)
{
    return dn_md_tag(n, md, ndims, dims, dt, dnnl_format_tag_any);
}

bool dn_layout_of(const_dnnl_memory_desc_t md, struct dn_layout *l)
{
    memset(l, 0, sizeof *l);
    if (!md || dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &l->ndims) != dnnl_success ||
        dnnl_memory_desc_query(md, dnnl_query_data_type, &l->dt) != dnnl_success ||
        dnnl_memory_desc_query(md, dnnl_query_format_kind, &l->kind) != dnnl_success)
        return false;
    if (l->ndims <= 0 || l->ndims > DNNL_MAX_NDIMS || l->kind != dnnl_blocked)
        return false;
    const dnnl_query_t queries[] = {dnnl_query_dims, dnnl_query_padded_dims, dnnl_query_strides,
                                    dnnl_query_inner_blks, dnnl_query_inner_idxs};
    dnnl_dim_t *fields[] = {l->dims, l->padded, l->strides, l->blks, l->idxs};
    if (dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &l->nblks) != dnnl_success ||
        dnnl_memory_desc_query(md, dnnl_query_submemory_offset_s64, &l->offset0) != dnnl_success)
        return false;
    for (size_t q = 0; q < sizeof queries / sizeof *queries; q++) {
        const dnnl_dims_t *v = NULL;  /* the query hands back a pointer into the descriptor */
        if (dnnl_memory_desc_query(md, queries[q], &v) != dnnl_success || !v)
            return false;
        memcpy(fields[q], *v, sizeof(dnnl_dims_t));
    }
    return true;
}

dnnl_dim_t dn_layout_offset(const struct dn_layout *l, const dnnl_dim_t *idx)
{
    dnnl_dim_t inner[DNNL_MAX_NDIMS], off = l->offset0, in_block = 0;
    for (int d = 0; d < DNNL_MAX_NDIMS; d++)
        inner[d] = 1;
    for (int k = 0; k < l->nblks; k++)
        inner[l->idxs[k]] *= l->blks[k];
    for (int d = 0; d < l->ndims; d++)
        off += idx[d] / inner[d] * l->strides[d];
    /* Within the innermost block: its dimensions' digits, outermost first. */
    dnnl_dim_t left[DNNL_MAX_NDIMS];
    memcpy(left, inner, sizeof left);
    for (int k = 0; k < l->nblks; k++) {
        const int d = (int)l->idxs[k];
        left[d] /= l->blks[k];
        in_block = in_block * l->blks[k] + idx[d] % inner[d] / left[d] % l->blks[k];
    }
    return off + in_block;
}

/* The blocked tags the engine meets in activations and weights; a layout
 * is rebuilt from its tag, since oneDNN 3 gives no descriptor from blocks. */
static const dnnl_format_tag_t blocked_tags[] = {
    dnnl_aBcd16b, dnnl_aBcd8b,     dnnl_aBcd4b,     dnnl_ABcd16b16a, dnnl_ABcd16a16b, dnnl_ABcd8b8a,
    dnnl_ABcd8a8b, dnnl_Acdb16a,   dnnl_Acdb8a,     dnnl_Abcd16a,    dnnl_Abcd8a,     dnnl_aBc16b,
    dnnl_aBc8b,   dnnl_AB16b16a,   dnnl_AB16a16b,
};

static dnnl_format_tag_t tag_of(const struct dn_layout *l, const_dnnl_memory_desc_t md)
{
    for (size_t i = 0; i < sizeof blocked_tags / sizeof *blocked_tags; i++) {
        dnnl_memory_desc_t m;
        if (dnnl_memory_desc_create_with_tag(&m, l->ndims, l->dims, l->dt, blocked_tags[i]) != dnnl_success)
            continue;  /* not a tag of this many dimensions */
        const bool same = dnnl_memory_desc_equal(m, md);
        dnnl_memory_desc_destroy(m);
        if (same)
            return blocked_tags[i];
    }
    return dnnl_format_tag_any;  /* none known: the primitive chooses, and a reorder follows if needed */
}

st_status dn_md_like(st_net *n, const_dnnl_memory_desc_t *out, const_dnnl_memory_desc_t md, dnnl_dim_t batch,
                     dnnl_data_type_t dt)
{
    struct dn_layout l;
    if (!dn_layout_of(md, &l) || l.offset0)
        return st_fail(ST_ERR_BACKEND, "oneDNN: a layout the engine cannot rebuild (node %d)", dn_net(n)->cur);
    const dnnl_format_tag_t tag = l.nblks ? tag_of(&l, md) : dnnl_format_tag_undef;
    if (batch > 0)
        l.dims[0] = batch;  /* the outermost dimension: the other strides stay */
    if (l.nblks)
        return dn_md_tag(n, out, l.ndims, l.dims, dt, tag);
    dnnl_memory_desc_t m;
    TRY(dnnl_memory_desc_create_with_strides(&m, l.ndims, l.dims, dt, l.strides));
    OK(keep_md(n, m));
    *out = m;
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
    o->node = dn_net(n)->cur;
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
void dn_md_str(char *buf, size_t len, const_dnnl_memory_desc_t md)
{
    struct dn_layout l;
    size_t at = 0;
    if (!dn_layout_of(md, &l)) {
        snprintf(buf, len, "(not a blocked layout)");
        return;
    }
    for (int i = 0; i < l.ndims && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "x" : "", (long long)l.dims[i]);
    for (int i = 0; i < l.ndims && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ":" : " s", (long long)l.strides[i]);
    for (int i = 0; i < l.nblks && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld%c", i ? "" : " b", (long long)l.blks[i],
                               "abcdef"[l.idxs[i] % 6]);
    if (l.dt != dnnl_f32 && at < len)  /* a conversion shows as one */
        snprintf(buf + at, len - at, " %s", l.dt == dnnl_bf16 ? "bf16" : "other type");
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
st_status dn_set_dst(st_net *n, struct xnode *x, const_dnnl_memory_desc_t md)
{
    return dn_set_dst_diff_in(n, x, md, -1);
}

/* A gradient's memory: its own buffer, or, where the net shares gradient
 * buffers (onednn_diffs.c), none until the plan is finished. */
static st_status diff_mem_new(st_net *n, const struct xnode *x, dnnl_memory_t *mem, const_dnnl_memory_desc_t md)
{
    return dn_state(x)->diff_deferred ? dn_mem_unbacked(n, mem, md) : dn_mem_new(n, mem, md, NULL);
}

/* Where a second consumer's gradient waits to be added to the first's. */
st_status dn_accum_new(st_net *n, struct xnode *x)
{
    const_dnnl_memory_desc_t md = dn_state(x)->diff.md;
    dnnl_primitive_desc_t pd;
    OK(diff_mem_new(n, x, &dn_state(x)->diff_tmp.mem, md));
    dn_state(x)->diff_tmp.md = dn_mem_md(dn_state(x)->diff_tmp.mem);
    OK(DN_PD(n, pd, NULL, dnnl_binary_primitive_desc_create(&pd, dn_net(n)->eng, dnnl_binary_add, md, md, md, NULL)));
    return dn_prim_new(n, &dn_state(x)->accum, pd);
}

/* The same, the gradient kept in node `home`'s gradient buffer (same
 * layout) when home >= 0. */
st_status dn_set_dst_diff_in(st_net *n, struct xnode *x, const_dnnl_memory_desc_t md, int home)
{
    OK(dn_mem_new(n, &dn_state(x)->dst.mem, md, NULL));
    dn_state(x)->dst.md = dn_mem_md(dn_state(x)->dst.mem);
    dn_state(x)->diff_home = home;
    dn_state(x)->diff_deferred = dn_net(n)->diffs_shared;
    if (home >= 0 && !dn_state(x)->diff_deferred)
        OK(dn_mem_new(n, &dn_state(x)->diff.mem, md, dn_mem_ptr(dn_state(&n->x[home])->diff.mem)));
    else
        OK(diff_mem_new(n, x, &dn_state(x)->diff.mem, md));
    dn_state(x)->diff.md = dn_mem_md(dn_state(x)->diff.mem);
    if (x->consumers > 1)
        OK(dn_accum_new(n, x));
    dn_state(x)->elems = dnnl_memory_desc_get_size(md) / (dn_md_type(md) == dnnl_bf16 ? sizeof(st_bf16) : sizeof(float));
    return ST_OK;
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

st_status dn_reserve_shared(float **buf, size_t *have, size_t floats, const char *purpose)
{
    if (floats <= *have)
        return ST_OK;
    free(*buf);
    *have = 0;
    if (!(*buf = nn_lines_alloc(floats, sizeof(float), true)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory for %s (%.1f MB)", purpose, floats * 4 / 1e6);
    *have = floats;
    return ST_OK;
}
