/* Reorders, checked once when they are made (see onednn_internal.h).
 *
 * oneDNN's reorders are trusted nowhere else in the engine, and they are
 * where a library bug stays silent: Debian 13's 3.7.2 writes a third of a
 * convolution's weights to the wrong place on the way to its backward-data
 * layout (ABcd16a16b) when the outputs are not a multiple of 16, so lenet's
 * 6-channel layer would train on wrong input gradients, with no error.
 * Each reorder the engine makes first moves an index pattern, and every
 * element must land where the destination's layout puts it; the layouts'
 * offsets are computed here from their strides and blocks, not by oneDNN.
 */
#define _GNU_SOURCE
#include <stdint.h>

#include "onednn_internal.h"

static bool checkable(dnnl_data_type_t dt)
{
    return dt == dnnl_f32 || dt == dnnl_bf16 || dt == dnnl_s32;
}

/* Element i's value: its index where both sides hold it exactly, else a
 * hash of it in [-128, 127], which bf16 holds exactly. */
static float pattern(dnnl_dim_t i, bool exact)
{
    return exact ? (float)(i & 0xffffff) : (float)((uint32_t)((uint64_t)i * 2654435761u) >> 24) - 128.0f;
}

static void put(void *buf, dnnl_data_type_t dt, dnnl_dim_t at, float v)
{
    if (dt == dnnl_f32) {
        ((float *)buf)[at] = v;
    } else if (dt == dnnl_s32) {
        ((int32_t *)buf)[at] = (int32_t)v;
    } else {
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        ((uint16_t *)buf)[at] = (uint16_t)(bits >> 16);  /* exact: the pattern's values need 8 bits */
    }
}

static float get(const void *buf, dnnl_data_type_t dt, dnnl_dim_t at)
{
    if (dt == dnnl_f32)
        return ((const float *)buf)[at];
    if (dt == dnnl_s32)
        return (float)((const int32_t *)buf)[at];
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[at] << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* dn_layout_offset is a sum of one term per dimension (a dimension's outer
 * index times its stride, plus its digits inside the inner blocks), so a
 * table of each dimension's terms gives every element's offset in ndims
 * additions: a 77 MB table's check took seconds through the whole
 * arithmetic per element. */
struct offsets {
    dnnl_dim_t *at[DNNL_MAX_NDIMS];      /* at[d][i]: dimension d's term at index i */
    dnnl_dim_t *all;
};

static bool offsets_of(const struct dn_layout *l, struct offsets *o)
{
    dnnl_dim_t total = 0, idx[DNNL_MAX_NDIMS] = {0};
    for (int d = 0; d < l->ndims; d++)
        total += l->dims[d];
    if (!(o->all = malloc((size_t)total * sizeof *o->all)))
        return false;
    dnnl_dim_t *next = o->all;
    for (int d = 0; d < l->ndims; d++, next += l->dims[d - 1]) {
        o->at[d] = next;
        for (idx[d] = 0; idx[d] < l->dims[d]; idx[d]++)
            next[idx[d]] = dn_layout_offset(l, idx) - l->offset0;
        idx[d] = 0;
    }
    return true;
}

/* Steps idx through every index of the outer dimensions (all but the
 * last), the last of them fastest; false after the last. */
static bool next_row(dnnl_dim_t *idx, const struct dn_layout *l)
{
    for (int d = l->ndims - 2; d >= 0; d--) {
        if (++idx[d] < l->dims[d])
            return true;
        idx[d] = 0;
    }
    return false;
}

static dnnl_dim_t row_offset(const struct dn_layout *l, const struct offsets *o, const dnnl_dim_t *idx)
{
    dnnl_dim_t off = l->offset0;
    for (int d = 0; d < l->ndims - 1; d++)
        off += o->at[d][idx[d]];
    return off;
}

/* The pattern, each element where layout l puts it. */
static void fill(const struct dn_layout *l, const struct offsets *o, void *buf, bool exact)
{
    const int last = l->ndims - 1;
    dnnl_dim_t idx[DNNL_MAX_NDIMS] = {0}, lin = 0;
    do {
        const dnnl_dim_t row = row_offset(l, o, idx);
        for (dnnl_dim_t i = 0; i < l->dims[last]; i++)
            put(buf, l->dt, row + o->at[last][i], pattern(lin++, exact));
    } while (next_row(idx, l));
}

/* Does buf hold the pattern where layout l puts each element? */
static bool holds(const struct dn_layout *l, const struct offsets *o, const void *buf, bool exact)
{
    const int last = l->ndims - 1;
    dnnl_dim_t idx[DNNL_MAX_NDIMS] = {0}, lin = 0;
    do {
        const dnnl_dim_t row = row_offset(l, o, idx);
        for (dnnl_dim_t i = 0; i < l->dims[last]; i++)
            if (get(buf, l->dt, row + o->at[last][i]) != pattern(lin++, exact))
                return false;
    } while (next_row(idx, l));
    return true;
}

static size_t larger(size_t a, size_t b)
{
    return a > b ? a : b;
}

static st_status run_once(st_net *n, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    TRY(dnnl_primitive_execute(r, dn_net(n)->strm, 2, args));
    TRY(dnnl_stream_wait(dn_net(n)->strm));
    return ST_OK;
}

st_status dn_reorder_verify(st_net *n, dnnl_primitive_t r, const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to,
                            bool *right)
{
    struct dn_layout lf, lt;
    *right = true;
    if (!dn_layout_of(from, &lf) || !dn_layout_of(to, &lt) || !checkable(lf.dt) || !checkable(lt.dt))
        return ST_OK;  /* nothing the engine makes; not checked */
    if (lf.ndims != lt.ndims || memcmp(lf.dims, lt.dims, sizeof lf.dims)) {
        *right = false;
        return ST_OK;
    }
    /* The memories as the primitive knows them (a test may claim other
     * layouts), each buffer big enough for either view. */
    const_dnnl_primitive_desc_t pd;
    TRY(dnnl_primitive_get_primitive_desc(r, &pd));
    const_dnnl_memory_desc_t own_from = dn_query(pd, dnnl_query_src_md, 0), own_to = dn_query(pd, dnnl_query_dst_md, 0);
    const bool exact = lf.dt != dnnl_bf16 && lt.dt != dnnl_bf16;
    const size_t from_bytes = larger(dnnl_memory_desc_get_size(from), dnnl_memory_desc_get_size(own_from)),
                 to_bytes = larger(dnnl_memory_desc_get_size(to), dnnl_memory_desc_get_size(own_to));
    void *src = calloc(1, from_bytes ? from_bytes : 1), *dst = malloc(to_bytes ? to_bytes : 1);
    struct offsets of = {0}, ot = {0};
    dnnl_memory_t ms = NULL, md = NULL;
    st_status st = ST_OK;
    if (!src || !dst || !offsets_of(&lf, &of) || !offsets_of(&lt, &ot)) {
        st = st_fail(ST_ERR_NOMEM, "net: out of memory");
        goto out;
    }
    memset(dst, 0xff, to_bytes);  /* NaN, or -1: no pattern value */
    dnnl_status_t s = dnnl_memory_create(&ms, own_from, dn_net(n)->eng, src);
    if (s == dnnl_success)
        s = dnnl_memory_create(&md, own_to, dn_net(n)->eng, dst);
    if (s != dnnl_success) {
        st = dn_dnnl_error(n, "dnnl_memory_create", s);
        goto out;
    }
    fill(&lf, &of, src, exact);
    if ((st = run_once(n, r, ms, md)) == ST_OK)
        *right = holds(&lt, &ot, dst, exact);
out:
    free(of.all);
    free(ot.all);
    if (md)
        dnnl_memory_destroy(md);
    if (ms)
        dnnl_memory_destroy(ms);
    free(dst);
    free(src);
    return st;
}

/* A reorder primitive (its pd and it owned by the net), and whether it is right. */
static st_status checked_reorder(st_net *n, const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to,
                                 dnnl_primitive_t *r, bool *right)
{
    dnnl_primitive_desc_t pd;
    OK(DN_PD(n, pd, NULL, dnnl_reorder_primitive_desc_create(&pd, from, dn_net(n)->eng, to, dn_net(n)->eng, NULL)));
    OK(dn_prim_new(n, r, pd));
    return dn_reorder_verify(n, *r, from, to, right);
}

static const dnnl_format_tag_t via_tags[] = {dnnl_Acdb16a, dnnl_abcd,  dnnl_acdb, dnnl_aBcd16b,
                                             dnnl_ABcd16b16a, dnnl_abc, dnnl_ab, dnnl_ba, dnnl_a};

st_status dn_add_reorder_two_step(st_net *n, struct oplist *l, dnnl_memory_t from, dnnl_memory_t to, bool *done)
{
    const_dnnl_memory_desc_t a = dn_mem_md(from), b = dn_mem_md(to);
    struct dn_layout la;
    *done = false;
    if (!dn_layout_of(a, &la))
        return ST_OK;
    for (size_t i = 0; i < sizeof via_tags / sizeof *via_tags && !*done; i++) {
        dnnl_memory_desc_t probe;
        if (dnnl_memory_desc_create_with_tag(&probe, la.ndims, la.dims, la.dt, via_tags[i]) != dnnl_success)
            continue;  /* a tag of another number of dimensions */
        dnnl_memory_desc_destroy(probe);
        const_dnnl_memory_desc_t via_md;
        dnnl_primitive_t r1, r2;
        bool right1, right2;
        OK(dn_md_tag(n, &via_md, la.ndims, la.dims, la.dt, via_tags[i]));
        OK(checked_reorder(n, a, via_md, &r1, &right1));
        OK(checked_reorder(n, via_md, b, &r2, &right2));
        if (!right1 || !right2)
            continue;
        dnnl_memory_t via;
        OK(dn_mem_new(n, &via, via_md, NULL));
        OK(dn_add_op(n, l, r1, NODE_KINDS, DNNL_ARG_FROM, from, DNNL_ARG_TO, via, -1));
        OK(dn_add_op(n, l, r2, NODE_KINDS, DNNL_ARG_FROM, via, DNNL_ARG_TO, to, -1));
        *done = true;
    }
    return ST_OK;
}

static void say_reorder(const st_net *n, const char *what, const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to)
{
    char a[256], b[256];
    dn_md_str(a, sizeof a, from);
    dn_md_str(b, sizeof b, to);
    const int node = dn_net(n)->cur;
    fprintf(stderr, "shmtrain: node %d (line %d): %s %s -> %s (%zu bytes)\n", node,
            node >= 0 ? n->x[node].nd->line : 0, what, a, b, dnnl_memory_desc_get_size(to));
}

static bool in_flat_buffers(const st_net *n, dnnl_memory_t m)
{
    const float *p = dn_mem_ptr(m);
    const size_t count = n->model->params;
    return p && ((p >= n->params && p < n->params + count) || (p >= n->grads && p < n->grads + count));
}


/* Marks the reorder just appended at l->v[at] (the first of two when it
 * goes through an intermediate layout: one move, counted once). */
static void count_reorder(const st_net *n, struct oplist *l, int at, dnnl_memory_t from, dnnl_memory_t to)
{
    struct op *o = &l->v[at];
    if (in_flat_buffers(n, from) || in_flat_buffers(n, to)) {
        o->counted = OP_COUNTS_WEIGHT_REORDER;
    } else if (dn_md_type(dn_mem_md(from)) != dn_md_type(dn_mem_md(to))) {
        o->counted = OP_COUNTS_CONVERSION;
        o->counted_bytes = dnnl_memory_desc_get_size(dn_mem_md(from));
    } else {
        o->counted = OP_COUNTS_ACTIVATION_REORDER;
    }
}

st_status dn_add_reorder(st_net *n, struct oplist *l, dnnl_memory_t from, dnnl_memory_t to)
{
    const_dnnl_memory_desc_t a = dn_mem_md(from), b = dn_mem_md(to);
    dnnl_primitive_t r;
    bool right, done;
    const int at = l->n;
    OK(checked_reorder(n, a, b, &r, &right));
    if (dn_net(n)->opt.verbose)  /* which layouts meet where: the cost a profile calls "reorders" */
        say_reorder(n, right ? "reorder" : "reorder (oneDNN's misplaces elements: two steps instead)", a, b);
    if (right) {
        OK(dn_add_op(n, l, r, NODE_KINDS, DNNL_ARG_FROM, from, DNNL_ARG_TO, to, -1));
        count_reorder(n, l, at, from, to);
        return ST_OK;
    }
    OK(dn_add_reorder_two_step(n, l, from, to, &done));
    if (done) {
        count_reorder(n, l, at, from, to);
        return ST_OK;
    }
    char sa[256], sb[256], version[32];
    dn_md_str(sa, sizeof sa, a);
    dn_md_str(sb, sizeof sb, b);
    st_nn_onednn_version(version, sizeof version);
    return st_fail(ST_ERR_BACKEND, "oneDNN %s: its reorder %s -> %s puts elements in the wrong place, and so does "
                                   "every two-step path tried (node %d); use another oneDNN release", version, sa, sb,
                   dn_net(n)->cur);
}
