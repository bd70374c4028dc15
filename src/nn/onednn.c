/* The oneDNN backend.
 *
 * Build time: for every exec node, create its primitives once (forward,
 * backward-data, backward-weights), query the layouts they chose, and record
 * a forward and a backward list of "ops": a primitive with its argument array,
 * a reorder, or a small C step.  Run time: execute the lists.
 *
 * Layout rules (../shared notes, verified here): conv and inner-product
 * layouts are `any` and activations stay in whatever layout their producer
 * chose; a reorder is inserted only where dnnl_memory_desc_equal says two
 * layouts differ.  Parameters stay plain in the flat buffer.  Inner
 * products use them as they are (plain_weights); convolution weights are
 * reordered into the forward and the backward-data layouts each step, and
 * their gradients back into the plain flat gradient buffer.  The plain
 * inner products run oneDNN's gemm:jit kernels, which move rsp into the heap
 * while they run: a signal handler must never run on a compute thread
 * (src/shmtrain.c takes signals with sigwait instead).
 *
 * A convolution feeding a C max-pool runs in batch chunks inside the pool's
 * step when its output would not fit L2 (chunk_the_conv), and so does its
 * backward-weights pass when it is a first layer (chunk_the_conv_bwd).
 * Nothing learns upstream of a first layer, so it runs no backward-data
 * pass.  Switches for comparison: SHMTRAIN_ONEDNN_NO_CHUNKS=1,
 * SHMTRAIN_ONEDNN_NO_BWD_CHUNKS=1, SHMTRAIN_ONEDNN_BRGCONV=1 (see
 * conv_fwd_avoid), SHMTRAIN_ONEDNN_IP_ANY=1 (see plain_weights),
 * SHMTRAIN_ONEDNN_POOL=1 (oneDNN's pooling instead of maxpool2.c).
 *
 * SHMTRAIN_NN_VERBOSE=1 prints every reorder the build inserts (with sizes),
 * every backward pass that had to fall back from the forward's layouts, and
 * the kernel each layer got.
 */
#define _GNU_SOURCE
#include <dnnl_debug.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "maxpool2.h"
#include "net.h"

struct op {
    dnnl_primitive_t prim;
    st_status (*step)(st_net *n, int node);  /* a C step instead of a primitive */
    int node, prof;                       /* prof: node kind, or NODE_KINDS for reorders */
    int nargs;
    dnnl_exec_arg_t args[10];
};

struct oplist {
    struct op *v;
    int n, cap;
};

struct onednn_node {
    struct oplist fwd, fwd_infer, bwd;   /* fwd_infer: batch norm in evaluation mode */
    dnnl_memory_t src;                   /* what the forward reads */
    dnnl_memory_t mean, var;             /* batch norm, training */
    dnnl_primitive_t accum;              /* diff += diff_tmp, when 2+ consumers */
    float *mask_scale;                   /* dropout: 0 or 1/(1-p) per element */
    size_t elems;                        /* floats in dst's buffer (padding included) */
    dnnl_memory_t dropout_diff_src;
    /* 2x2/2 max-pool in C (see build_maxpool2) */
    struct pool_layout pool_src, pool_dst;
    uint8_t *pool_arg;
    dnnl_memory_t pool_target;
    bool pool_relu;                      /* the ReLU after it runs inside it (build_relu) */
    dnnl_memory_t pool_diff;             /* then the gradient comes from the ReLU's diff */
    /* The convolution feeding a C max-pool, run in batch chunks inside the
     * pool's forward step (see chunk_the_conv) */
    dnnl_primitive_t chunk_conv;
    dnnl_exec_arg_t chunk_args[4];
    int chunk_nargs, chunk;
    dnnl_memory_t chunk_src, chunk_full_src;
    long chunk_src_image;                /* floats per image in the convolution's source */
    /* ... and its backward-weights pass in the same chunks inside the pool's
     * backward step, when it is the convolution's only backward pass */
    dnnl_primitive_t chunk_bwd_w;
    dnnl_memory_t chunk_diff;            /* a chunk of the convolution's output gradient */
    dnnl_memory_t chunk_dw, chunk_db;    /* one chunk's weight gradients */
    dnnl_memory_t total_dw, total_db;    /* what the whole-batch pass wrote */
    bool chunk_bwd_moved;
    bool pool_edges_zeroed;              /* the pool's target keeps its zero edges (sole writer) */
};

struct onednn_net {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_memory_t *mems;
    dnnl_primitive_t *prims;
    dnnl_primitive_desc_t *pds;
    int nmems, nprims, npds, cap_mems, cap_prims, cap_pds;
    dnnl_memory_t input_user;            /* plain input; handle set per forward */
    dnnl_memory_t logits_user, dlast_user;
    dnnl_primitive_t to_logits, from_dlast;
    int cur;                             /* node being built, for messages */
};

/* --------------------------------------------------------------- helpers -- */

#define TRY(call)                                                                        \
    do {                                                                                 \
        dnnl_status_t s_ = (call);                                                       \
        if (s_ != dnnl_success)                                                          \
            return dnnl_error(n, #call, s_);                                             \
    } while (0)

#define OK(expr)                                                                         \
    do {                                                                                 \
        st_status t_ = (expr);                                                           \
        if (t_ != ST_OK)                                                                 \
            return t_;                                                                   \
    } while (0)

static st_status dnnl_error(const st_net *n, const char *call, dnnl_status_t s)
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
static st_status mem_new(st_net *n, dnnl_memory_t *out, const dnnl_memory_desc_t *md, void *handle)
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

static void *mem_ptr(dnnl_memory_t m)
{
    void *p = NULL;
    dnnl_memory_get_data_handle(m, &p);
    return p;
}

static const dnnl_memory_desc_t *mem_md(dnnl_memory_t m)
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

static st_status pd_new_avoiding(st_net *n, dnnl_primitive_desc_t *out, const void *op_desc,
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

static st_status pd_new(st_net *n, dnnl_primitive_desc_t *out, const void *op_desc,
                        const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint)
{
    return pd_new_avoiding(n, out, op_desc, attr, hint, NULL);
}

/* oneDNN 2.6 picks its brgemm convolution first for a forward pass in
 * nhwc, but with few input channels its older jit kernel is much faster
 * here (bench/st-kernel-candidates conv, one core: lenet's 1->6 5x5 0.220 ->
 * 0.088 ms per 16-image chunk, its 6->16 5x5 at batch 64 0.44 -> 0.27 ms).
 * SHMTRAIN_ONEDNN_BRGCONV=1 keeps oneDNN's choice for comparison. */
static const char *conv_fwd_avoid(const dnnl_memory_desc_t *src)
{
    const dnnl_blocking_desc_t *b = &src->format_desc.blocking;
    bool nhwc = src->ndims == 4 && src->format_kind == dnnl_blocked && b->inner_nblks == 0 && b->strides[1] == 1;
    return nhwc && src->dims[1] < 16 && !getenv("SHMTRAIN_ONEDNN_BRGCONV") ? "brgconv" : NULL;
}

static st_status prim_new(st_net *n, dnnl_primitive_t *out, const_dnnl_primitive_desc_t pd)
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

static st_status reorder_new(st_net *n, dnnl_primitive_t *out, const dnnl_memory_desc_t *from,
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
    return prim_new(n, out, pd);
}

static const dnnl_memory_desc_t *query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index)
{
    return dnnl_primitive_desc_query_md(pd, what, index);
}

static const dnnl_memory_desc_t *arg_md(const_dnnl_primitive_desc_t pd, int arg)
{
    return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

static bool same(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b)
{
    return dnnl_memory_desc_equal(a, b) != 0;
}

static st_status plain_md(st_net *n, dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
    TRY(dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, tags[ndims]));
    return ST_OK;
}

static st_status any_md(st_net *n, dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims)
{
    TRY(dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, dnnl_format_tag_any));
    return ST_OK;
}

/* Append an op; args are (key, memory) pairs ending with a key of -1. */
static st_status add_op(st_net *n, struct oplist *l, dnnl_primitive_t prim, int prof, ...)
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

static st_status add_step(st_net *n, struct oplist *l, st_status (*step)(st_net *, int), int prof)
{
    OK(add_op(n, l, NULL, prof, -1));
    l->v[l->n - 1].step = step;
    return ST_OK;
}

/* "64x6x28x28 s4704:784:28:1 b8c": dims, strides, inner blocks (verbose builds). */
static void md_str(char *buf, size_t len, const dnnl_memory_desc_t *md)
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
}

static st_status add_reorder(st_net *n, struct oplist *l, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_primitive_t r;
    OK(reorder_new(n, &r, mem_md(from), mem_md(to)));
    if (getenv("SHMTRAIN_NN_VERBOSE")) {  /* which layouts meet where: the cost a profile calls "reorders" */
        char a[256], b[256];
        md_str(a, sizeof a, mem_md(from));
        md_str(b, sizeof b, mem_md(to));
        fprintf(stderr, "shmtrain: node %d (line %d): reorder %s -> %s (%zu bytes)\n", n->dnet->cur,
                n->x[n->dnet->cur].nd->line, a, b, dnnl_memory_desc_get_size(mem_md(to)));
    }
    return add_op(n, l, r, NODE_KINDS, DNNL_ARG_FROM, from, DNNL_ARG_TO, to, -1);
}

static void impl_name(struct xnode *x, const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) {
        size_t len = strlen(x->impl);
        snprintf(x->impl + len, sizeof x->impl - len, "%s%s", len ? " / " : "", impl);
    }
}

/* ---------------------------------------------------------------- tensors -- */

/* The node's output (and gradient) memories, in layout `md`. */
static st_status set_dst(st_net *n, struct xnode *x, const dnnl_memory_desc_t *md)
{
    x->dst.md = *md;
    OK(mem_new(n, &x->dst.mem, md, NULL));
    OK(mem_new(n, &x->diff.mem, md, NULL));
    x->diff.md = *md;
    if (x->consumers > 1) {
        OK(mem_new(n, &x->diff_tmp.mem, md, NULL));
        x->diff_tmp.md = *md;
        dnnl_binary_desc_t bd;
        dnnl_primitive_desc_t pd;
        TRY(dnnl_binary_desc_init(&bd, dnnl_binary_add, md, md, md));
        OK(pd_new(n, &pd, &bd, NULL, NULL));
        OK(prim_new(n, &x->dn->accum, pd));
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
static st_status deliver(st_net *n, int j, int p, const dnnl_memory_desc_t *md, dnnl_memory_t computed,
                         dnnl_memory_t *target)
{
    struct xnode *px = &n->x[p];
    struct oplist *bwd = &n->x[j].dn->bwd;
    *target = NULL;
    if (!px->wants_diff)
        return ST_OK;
    bool first = px->first_writer == j;
    dnnl_memory_t dest = first ? px->diff.mem : px->diff_tmp.mem;
    if (!computed && same(md, &px->dst.md)) {
        *target = dest;
    } else {
        if (!computed)
            OK(mem_new(n, &computed, md, NULL));
        *target = computed;
        OK(add_reorder(n, bwd, computed, dest));
    }
    if (!first)
        OK(add_op(n, bwd, px->dn->accum, NODE_KINDS, DNNL_ARG_SRC_0, px->diff.mem, DNNL_ARG_SRC_1,
                  px->diff_tmp.mem, DNNL_ARG_DST, px->diff.mem, -1));
    return ST_OK;
}

/* Forward input of node x in the layout `want`, reordering if needed. */
static st_status input_as(st_net *n, struct xnode *x, const dnnl_memory_desc_t *want, dnnl_memory_t *out)
{
    struct xnode *px = &n->x[x->in];
    if (same(want, &px->dst.md)) {
        *out = px->dst.mem;
        return ST_OK;
    }
    OK(mem_new(n, out, want, NULL));
    return add_reorder(n, &x->dn->fwd, px->dst.mem, *out);
}

/* --------------------------------------------------- conv and linear -- */

struct weights_layer {
    int ndims;
    dnnl_dims_t src, wei, bias, dst, strides, pad;
};

static void weights_dims(const st_net *n, const struct xnode *x, struct weights_layer *w)
{
    const struct node *nd = x->nd, *s = n->x[x->in].nd;
    memset(w, 0, sizeof *w);
    w->bias[0] = nd->c;
    if (x->kind == NODE_LINEAR) {
        w->ndims = 2;
        w->src[0] = n->batch; w->src[1] = s->c * s->h * s->w;
        w->wei[0] = nd->c; w->wei[1] = w->src[1];
        w->dst[0] = n->batch; w->dst[1] = nd->c;
        return;
    }
    w->ndims = 4;
    dnnl_dim_t src[4] = {n->batch, s->c, s->h, s->w}, wei[4] = {nd->c, s->c, nd->k, nd->k},
               dst[4] = {n->batch, nd->c, nd->h, nd->w};
    memcpy(w->src, src, sizeof src);
    memcpy(w->wei, wei, sizeof wei);
    memcpy(w->dst, dst, sizeof dst);
    w->strides[0] = w->strides[1] = nd->s;
    w->pad[0] = w->pad[1] = nd->p;
}

static st_status weights_fwd_desc(st_net *n, const struct xnode *x, const struct weights_layer *w,
                                  const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei,
                                  const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *dst,
                                  dnnl_primitive_desc_t *pd)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    st_status st = ST_OK;
    if (x->fuse_relu) {
        TRY(dnnl_primitive_attr_create(&attr));
        TRY(dnnl_post_ops_create(&po));
        TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        TRY(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    if (x->kind == NODE_CONV) {
        dnnl_convolution_desc_t cd;
        dnnl_status_t s = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                                             dnnl_convolution_direct, src, wei, bias,
                                                             dst, w->strides, w->pad, w->pad);
        st = s != dnnl_success ? dnnl_error(n, "dnnl_convolution_forward_desc_init", s)
                               : pd_new_avoiding(n, pd, &cd, attr, NULL, conv_fwd_avoid(src));
    } else {
        dnnl_inner_product_desc_t id;
        dnnl_status_t s = dnnl_inner_product_forward_desc_init(&id, dnnl_forward_training, src, wei,
                                                               bias, dst);
        st = s != dnnl_success ? dnnl_error(n, "dnnl_inner_product_forward_desc_init", s)
                               : pd_new(n, pd, &id, attr, NULL);
    }
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return st;
}


static bool is_reference_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    return !impl || !strncmp(impl, "ref", 3);
}

/* Inner products take their weights in the plain layout of the parameter
 * buffer (oneDNN's gemm-based kernels accept it) instead of a blocked one:
 * that drops three weight reorders per layer and step, which for small
 * batches cost more than the blocked kernel saves (mlp, 1 thread: 1.54 ->
 * 1.06 ms a step; bench/st-step-bench).  SHMTRAIN_ONEDNN_IP_ANY=1 restores
 * oneDNN's choice for comparison.  Convolutions keep `any`: their blocked
 * kernels are worth the (small) weight reorders. */
static bool plain_weights(const st_net *n, const struct xnode *x)
{
    (void)n;
    return x->kind == NODE_LINEAR && !getenv("SHMTRAIN_ONEDNN_IP_ANY");
}

/* Small channel counts waste most of a 16-wide block; nhwc avoids that
 * (calibration: lenet's 6-channel conv).  But only if all three passes get
 * a real kernel in nhwc: oneDNN 2.6 gives some nhwc backward passes only
 * its reference implementation, a thousand times slower. */
static bool use_nhwc(st_net *n, const struct xnode *x, const struct weights_layer *w)
{
    if (x->kind != NODE_CONV || x->nd->c > 16 || n->x[x->in].nd->c >= 16)
        return false;
    dnnl_memory_desc_t src, dst, wei, bias;
    dnnl_convolution_desc_t fd, bd, wd;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL, wpd = NULL;
    bool fast = false;
    if (dnnl_memory_desc_init_by_tag(&src, 4, w->src, dnnl_f32, dnnl_nhwc) ||
        dnnl_memory_desc_init_by_tag(&dst, 4, w->dst, dnnl_f32, dnnl_nhwc) ||
        dnnl_memory_desc_init_by_tag(&wei, 4, w->wei, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&bias, 1, w->bias, dnnl_f32, dnnl_a))
        return false;
    const dnnl_memory_desc_t *b = x->nd->bias ? &bias : NULL;
    if (dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src, &wei,
                                           b, &dst, w->strides, w->pad, w->pad) ||
        dnnl_primitive_desc_create(&fpd, &fd, NULL, n->dnet->eng, NULL) || is_reference_impl(fpd))
        goto out;
    if (dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &src, &wei, b, &dst,
                                                    w->strides, w->pad, w->pad) ||
        dnnl_primitive_desc_create(&wpd, &wd, NULL, n->dnet->eng, fpd) || is_reference_impl(wpd))
        goto out;
    fast = true;
    if (n->x[x->in].wants_diff)
        fast = !dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src, &wei, &dst,
                                                         w->strides, w->pad, w->pad) &&
               !dnnl_primitive_desc_create(&bpd, &bd, NULL, n->dnet->eng, fpd) && !is_reference_impl(bpd);
out:
    if (bpd)
        dnnl_primitive_desc_destroy(bpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    return fast;
}


/* The backward pass's own view of a tensor: `have` if its layout is what the
 * primitive wants, else a scratch memory refreshed by a reorder before it. */
static st_status bwd_input(st_net *n, struct oplist *bwd, dnnl_memory_t have, const dnnl_memory_desc_t *want,
                           dnnl_memory_t *out)
{
    if (same(want, mem_md(have))) {
        *out = have;
        return ST_OK;
    }
    OK(mem_new(n, out, want, NULL));
    return add_reorder(n, bwd, have, *out);
}

static st_status conv_or_ip_bwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w,
                                   bool weights_pass, const dnnl_memory_desc_t *src,
                                   const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                   const dnnl_memory_desc_t *dst, const_dnnl_primitive_desc_t hint,
                                   dnnl_primitive_desc_t *pd)
{
    if (x->kind == NODE_CONV) {
        dnnl_convolution_desc_t cd;
        if (weights_pass)
            TRY(dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, src, wei, bias, dst,
                                                            w->strides, w->pad, w->pad));
        else
            TRY(dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, src, wei, dst,
                                                         w->strides, w->pad, w->pad));
        return pd_new(n, pd, &cd, NULL, hint);
    }
    dnnl_inner_product_desc_t id;
    if (weights_pass)
        TRY(dnnl_inner_product_backward_weights_desc_init(&id, src, wei, bias, dst));
    else
        TRY(dnnl_inner_product_backward_data_desc_init(&id, src, wei, dst));
    return pd_new(n, pd, &id, NULL, hint);
}

/* A backward pd that shares the forward's activation layouts when a real
 * kernel exists for them, else lets the primitive choose (`any`): oneDNN
 * 2.6 gives, e.g., backward-weights of a 1-channel nhwc input only its
 * reference implementation. */
static st_status bwd_pd(st_net *n, const struct xnode *x, const struct weights_layer *w, bool weights_pass,
                        const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *bias,
                        const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd)
{
    dnnl_memory_desc_t wei_any, src_any, dst_any, wei_plain;
    OK(any_md(n, &wei_any, w->ndims, w->wei));
    if (plain_weights(n, x)) {
        OK(plain_md(n, &wei_plain, w->ndims, w->wei));
        OK(conv_or_ip_bwd_pd(n, x, w, weights_pass, src, &wei_plain, bias, &x->dst.md, hint, pd));
        if (!is_reference_impl(*pd))
            return ST_OK;
    }
    OK(conv_or_ip_bwd_pd(n, x, w, weights_pass, src, &wei_any, bias, &x->dst.md, hint, pd));
    if (!is_reference_impl(*pd))
        return ST_OK;
    if (getenv("SHMTRAIN_NN_VERBOSE")) {
        char a[256], b[256];
        md_str(a, sizeof a, src);
        md_str(b, sizeof b, &x->dst.md);
        fprintf(stderr, "shmtrain: node %d: backward-%s gets only a reference kernel with src %s, dst %s: "
                        "letting it choose\n", n->dnet->cur, weights_pass ? "weights" : "data", a, b);
    }
    OK(any_md(n, &src_any, w->ndims, w->src));
    OK(any_md(n, &dst_any, w->ndims, w->dst));
    return conv_or_ip_bwd_pd(n, x, w, weights_pass, &src_any, &wei_any, bias, &dst_any, hint, pd);
}

/* What the three passes of one convolution or inner product share while
 * build_weights makes them. */
struct weights_build {
    struct weights_layer w;
    dnnl_memory_desc_t wei_plain, bias_md;   /* the parameter buffer's layouts */
    const_dnnl_primitive_desc_t fwd_pd;      /* owned by the net's pd list */
    dnnl_memory_t w_user, w_fwd;             /* the weights where they live, and as the forward reads them */
};

static st_status build_weights_fwd(st_net *n, int j, struct weights_build *b)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = x->dn;
    const struct node *nd = x->nd;
    const struct weights_layer *w = &b->w;
    dnnl_memory_desc_t src_any, wei_any, dst_any;
    if (use_nhwc(n, x, w)) {
        TRY(dnnl_memory_desc_init_by_tag(&src_any, 4, w->src, dnnl_f32, dnnl_nhwc));
        TRY(dnnl_memory_desc_init_by_tag(&dst_any, 4, w->dst, dnnl_f32, dnnl_nhwc));
    } else {
        OK(any_md(n, &src_any, w->ndims, w->src));
        OK(any_md(n, &dst_any, w->ndims, w->dst));
    }
    OK(any_md(n, &wei_any, w->ndims, w->wei));
    const dnnl_memory_desc_t *bias = nd->bias ? &b->bias_md : NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (plain_weights(n, x)) {
        OK(weights_fwd_desc(n, x, w, &src_any, &b->wei_plain, bias, &dst_any, &pd));
        if (is_reference_impl(pd))
            pd = NULL;  /* owned by the net's pd list, freed with it */
    }
    if (!pd)
        OK(weights_fwd_desc(n, x, w, &src_any, &wei_any, bias, &dst_any, &pd));
    b->fwd_pd = pd;
    impl_name(x, pd);

    dnnl_memory_t b_user = NULL;
    OK(mem_new(n, &b->w_user, &b->wei_plain, n->params + nd->w_off));
    if (nd->bias)
        OK(mem_new(n, &b_user, &b->bias_md, n->params + nd->b_off));
    const dnnl_memory_desc_t *wf = query(pd, dnnl_query_weights_md, 0);
    if (same(wf, &b->wei_plain)) {
        b->w_fwd = b->w_user;
    } else {
        OK(mem_new(n, &b->w_fwd, wf, NULL));
        OK(add_reorder(n, &dn->fwd, b->w_user, b->w_fwd));
    }
    OK(input_as(n, x, query(pd, dnnl_query_src_md, 0), &dn->src));
    OK(set_dst(n, x, query(pd, dnnl_query_dst_md, 0)));
    dnnl_primitive_t fwd;
    OK(prim_new(n, &fwd, pd));
    return add_op(n, &dn->fwd, fwd, x->kind, DNNL_ARG_SRC, dn->src, DNNL_ARG_WEIGHTS, b->w_fwd, DNNL_ARG_BIAS,
                  b_user, DNNL_ARG_DST, x->dst.mem, -1);
}

/* A fused ReLU's backward: the gradient becomes the pre-activation
 * gradient, in place, from the forward output. */
static st_status build_fused_relu_bwd(st_net *n, struct xnode *x)
{
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    TRY(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_relu_use_dst_for_bwd, &x->dst.md, &x->dst.md, 0.0f,
                                        0.0f));
    OK(pd_new(n, &pd, &ed, NULL, NULL));
    OK(prim_new(n, &p, pd));
    return add_op(n, &x->dn->bwd, p, NODE_RELU, DNNL_ARG_DST, x->dst.mem, DNNL_ARG_DIFF_DST, x->diff.mem,
                  DNNL_ARG_DIFF_SRC, x->diff.mem, -1);
}

/* The forward's own description of its source, not the producer's: they
 * are equal to dnnl_memory_desc_equal when they differ only in the strides
 * of size-1 dimensions (1-channel nchw == nhwc), but the backward kernels
 * match layouts by tag, and the producer's tag would get lenet's first
 * convolution only the reference kernel and a 3 MB reorder per step. */
static const dnnl_memory_desc_t *fwd_src_md(const struct weights_build *b)
{
    return query(b->fwd_pd, dnnl_query_src_md, 0);
}

static st_status build_weights_bwd_w(st_net *n, int j, const struct weights_build *b)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = x->dn;
    const struct node *nd = x->nd;
    dnnl_primitive_desc_t pd;
    dnnl_memory_t src, ddst, dw_user, dw, db_user = NULL;
    OK(bwd_pd(n, x, &b->w, true, fwd_src_md(b), nd->bias ? &b->bias_md : NULL, b->fwd_pd, &pd));
    impl_name(x, pd);
    OK(bwd_input(n, &dn->bwd, dn->src, query(pd, dnnl_query_src_md, 0), &src));
    OK(bwd_input(n, &dn->bwd, x->diff.mem, query(pd, dnnl_query_diff_dst_md, 0), &ddst));
    OK(mem_new(n, &dw_user, &b->wei_plain, n->grads + nd->w_off));
    if (nd->bias)
        OK(mem_new(n, &db_user, &b->bias_md, n->grads + nd->b_off));
    const dnnl_memory_desc_t *dwm = query(pd, dnnl_query_diff_weights_md, 0);
    dw = dw_user;
    if (!same(dwm, &b->wei_plain))
        OK(mem_new(n, &dw, dwm, NULL));
    dnnl_primitive_t bw;
    OK(prim_new(n, &bw, pd));
    OK(add_op(n, &dn->bwd, bw, x->kind, DNNL_ARG_SRC, src, DNNL_ARG_DIFF_DST, ddst, DNNL_ARG_DIFF_WEIGHTS, dw,
              DNNL_ARG_DIFF_BIAS, db_user, -1));
    return dw != dw_user ? add_reorder(n, &dn->bwd, dw, dw_user) : ST_OK;
}

static st_status build_weights_bwd_data(st_net *n, int j, const struct weights_build *b)
{
    struct xnode *x = &n->x[j];
    struct onednn_node *dn = x->dn;
    dnnl_primitive_desc_t pd;
    dnnl_memory_t ddst;
    OK(bwd_pd(n, x, &b->w, false, fwd_src_md(b), NULL, b->fwd_pd, &pd));
    OK(bwd_input(n, &dn->bwd, x->diff.mem, query(pd, dnnl_query_diff_dst_md, 0), &ddst));
    impl_name(x, pd);
    /* The weights change every step, so they are reordered into this
     * layout every backward pass (after the optimizer ran). */
    const dnnl_memory_desc_t *wb = query(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t w_bwd = same(wb, mem_md(b->w_fwd)) ? b->w_fwd : same(wb, &b->wei_plain) ? b->w_user : NULL;
    if (!w_bwd) {
        OK(mem_new(n, &w_bwd, wb, NULL));
        OK(add_reorder(n, &dn->bwd, b->w_user, w_bwd));
    }
    /* Arguments are filled in after deliver() decided where diff_src goes;
     * the reorder it may add must run after this primitive. */
    dnnl_primitive_t bd;
    OK(prim_new(n, &bd, pd));
    OK(add_op(n, &dn->bwd, bd, x->kind, -1));
    int at = dn->bwd.n - 1;
    dnnl_memory_t diff_src;
    OK(deliver(n, j, x->in, query(pd, dnnl_query_diff_src_md, 0), NULL, &diff_src));
    struct op *o = &dn->bwd.v[at];
    o->args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, ddst};
    o->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, w_bwd};
    o->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, diff_src};
    o->nargs = 3;
    return ST_OK;
}

/* A convolution or inner product: forward; backward (a fused ReLU's first,
 * then backward-weights, then backward-data unless nothing learns upstream). */
static st_status build_weights(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct weights_build b;
    weights_dims(n, x, &b.w);
    OK(plain_md(n, &b.bias_md, 1, b.w.bias));
    OK(plain_md(n, &b.wei_plain, b.w.ndims, b.w.wei));
    OK(build_weights_fwd(n, j, &b));
    if (x->fuse_relu)
        OK(build_fused_relu_bwd(n, x));
    OK(build_weights_bwd_w(n, j, &b));
    if (!n->x[x->in].wants_diff)
        return ST_OK;  /* the first layer: nobody needs d/d(input) */
    return build_weights_bwd_data(n, j, &b);
}

/* ------------------------------------------------------ element-wise -- */

/* A ReLU whose only input is a C max-pool (the pool/ReLU swap makes that
 * the usual case) runs inside the pool: max(window, 0) forward, and the
 * pool's backward, which reads the ReLU's gradient, passes nothing back to a
 * window it clipped.  That saves a pass over the pooled tensor each way. */
static bool relu_fits_pool(const st_net *n, const struct xnode *x)
{
    const struct xnode *px = &n->x[x->in];
    return px->kind == NODE_MAXPOOL && px->dn->pool_arg && px->consumers == 1;
}

static st_status build_relu_in_pool(st_net *n, struct xnode *x)
{
    struct xnode *px = &n->x[x->in];
    OK(set_dst(n, x, &px->dst.md));  /* the gradient memories; dst is then the pool's own */
    x->dst.mem = px->dst.mem;
    px->dn->pool_relu = true;
    px->dn->pool_diff = x->diff.mem;
    snprintf(x->impl, sizeof x->impl, "in the max-pool before it");
    return ST_OK;
}

static st_status build_relu(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    if (relu_fits_pool(n, x))
        return build_relu_in_pool(n, x);
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t f, b;
    TRY(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_training, dnnl_eltwise_relu, &px->dst.md, 0, 0));
    OK(pd_new(n, &fpd, &ed, NULL, NULL));
    impl_name(x, fpd);
    OK(set_dst(n, x, query(fpd, dnnl_query_dst_md, 0)));
    OK(prim_new(n, &f, fpd));
    OK(add_op(n, &x->dn->fwd, f, NODE_RELU, DNNL_ARG_SRC, px->dst.mem, DNNL_ARG_DST, x->dst.mem, -1));
    if (!px->wants_diff)
        return ST_OK;
    TRY(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_relu, &px->dst.md, &px->dst.md, 0, 0));
    OK(pd_new(n, &bpd, &ed, NULL, fpd));
    OK(prim_new(n, &b, bpd));
    OK(add_op(n, &x->dn->bwd, b, NODE_RELU, -1));
    int at = x->dn->bwd.n - 1;
    dnnl_memory_t target;
    OK(deliver(n, j, x->in, query(bpd, dnnl_query_diff_src_md, 0), NULL, &target));
    struct op *o = &x->dn->bwd.v[at];
    o->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, px->dst.mem};
    o->args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, x->diff.mem};
    o->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, target};
    o->nargs = 3;
    return ST_OK;
}

/* 2x2, stride 2 max-pooling without padding (every pool in lenet and cnn)
 * runs in C (maxpool2.c) on the producer's layout when its channels are
 * innermost: in blocks (aBcd16b, aBcd8b) or all together (nhwc). */
static bool channel_innermost(const dnnl_memory_desc_t *md, struct pool_layout *l, dnnl_format_tag_t *tag)
{
    if (md->ndims != 4 || md->format_kind != dnnl_blocked || md->offset0 != 0)
        return false;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (b->inner_nblks == 0 && b->strides[1] == 1 && b->strides[3] == md->padded_dims[1]) {
        l->block = (int)md->padded_dims[1];
        l->nblocks = 1;
        l->sc = 0;
        *tag = dnnl_nhwc;
    } else if (b->inner_nblks == 1 && b->inner_idxs[0] == 1 && (b->inner_blks[0] == 16 || b->inner_blks[0] == 8)) {
        l->block = (int)b->inner_blks[0];
        l->nblocks = (int)(md->padded_dims[1] / l->block);
        l->sc = b->strides[1];
        *tag = l->block == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
    } else {
        return false;
    }
    l->sn = b->strides[0];
    l->sh = b->strides[2];
    l->sw = b->strides[3];
    return true;
}

static st_status maxpool2_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool_src, dn->pool_dst, n->batch, x->nd->h, x->nd->w};
    maxpool2_forward(&shape, mem_ptr(n->x[x->in].dst.mem), mem_ptr(x->dst.mem), dn->pool_arg, dn->pool_relu);
    return ST_OK;
}

static st_status maxpool2_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct xnode *px = &n->x[x->in];
    const struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool_src, dn->pool_dst, n->batch, x->nd->h, x->nd->w};
    float *dx = mem_ptr(dn->pool_target);
    if (!dn->pool_edges_zeroed && (px->nd->h != 2 * x->nd->h || px->nd->w != 2 * x->nd->w))
        memset(dx, 0, dnnl_memory_desc_get_size(&px->dst.md));  /* an odd edge row/column gets no gradient */
    maxpool2_backward(&shape, mem_ptr(dn->pool_relu ? dn->pool_diff : x->diff.mem), dn->pool_arg, dx);
    return ST_OK;
}

/* A convolution whose only consumer is a C max-pool writes an activation
 * the pool reads once and nobody else needs (the backward passes use the
 * pool's argmax and the convolution's input).  For cnn's first layer that
 * is 5.5 MB a step, written and read back through memory.  Run in chunks of
 * a few images, the chunk's output stays in L2 for the pool: forward of
 * that pair, one thread, caches cold, 1.56 -> 0.81 ms. */
#define CHUNK_BYTES (512 * 1024)

static st_status conv_maxpool2_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool_src, dn->pool_dst, dn->chunk, x->nd->h, x->nd->w};
    const float *src = mem_ptr(dn->chunk_full_src);
    const float *out = mem_ptr(dn->chunk_args[dn->chunk_nargs - 1].memory);
    float *dst = mem_ptr(x->dst.mem);
    for (int i = 0; i < n->batch; i += dn->chunk) {
        dnnl_status_t s = dnnl_memory_set_data_handle(dn->chunk_src, (void *)(src + i * dn->chunk_src_image));
        if (s == dnnl_success)
            s = dnnl_primitive_execute(dn->chunk_conv, n->dnet->strm, dn->chunk_nargs, dn->chunk_args);
        if (s != dnnl_success) {
            n->dnet->cur = x->in;
            return dnnl_error(n, "dnnl_primitive_execute (convolution chunk)", s);
        }
        maxpool2_forward(&shape, out, dst + i * dn->pool_dst.sn, dn->pool_arg + i * dn->pool_dst.sn, dn->pool_relu);
    }
    return ST_OK;
}

static void add_into(dnnl_memory_t total, dnnl_memory_t part)
{
    float *t = mem_ptr(total);
    const float *p = mem_ptr(part);
    const size_t count = dnnl_memory_desc_get_size(mem_md(total)) / sizeof(float);
    for (size_t i = 0; i < count; i++)
        t[i] += p[i];
}

/* The pool's backward and the convolution's backward-weights, chunk by
 * chunk: the gradient of the convolution's output (5.5 MB for cnn) then
 * never leaves L2.  The first chunk's weight gradients go straight to the
 * totals, the others are added in order (deterministic). */
static st_status maxpool2_conv_bwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct onednn_node *dn = x->dn;
    const struct maxpool2_shape shape = {dn->pool_src, dn->pool_dst, dn->chunk, x->nd->h, x->nd->w};
    const float *src = mem_ptr(dn->chunk_full_src), *dy = mem_ptr(dn->pool_relu ? dn->pool_diff : x->diff.mem);
    float *dx = mem_ptr(dn->chunk_diff);
    for (int i = 0; i < n->batch; i += dn->chunk) {
        maxpool2_backward(&shape, dy + i * dn->pool_dst.sn, dn->pool_arg + i * dn->pool_dst.sn, dx);
        const bool first = i == 0;
        dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, dn->chunk_src},
                                  {DNNL_ARG_DIFF_DST, dn->chunk_diff},
                                  {DNNL_ARG_DIFF_WEIGHTS, first ? dn->total_dw : dn->chunk_dw},
                                  {DNNL_ARG_DIFF_BIAS, first ? dn->total_db : dn->chunk_db}};
        dnnl_status_t s = dnnl_memory_set_data_handle(dn->chunk_src, (void *)(src + i * dn->chunk_src_image));
        if (s == dnnl_success)
            s = dnnl_primitive_execute(dn->chunk_bwd_w, n->dnet->strm, dn->total_db ? 4 : 3, args);
        if (s == dnnl_success)
            s = dnnl_stream_wait(n->dnet->strm);
        if (s != dnnl_success) {
            n->dnet->cur = x->in;
            return dnnl_error(n, "dnnl_primitive_execute (convolution backward chunk)", s);
        }
        if (!first) {
            add_into(dn->total_dw, dn->chunk_dw);
            if (dn->total_db)
                add_into(dn->total_db, dn->chunk_db);
        }
    }
    return ST_OK;
}

static dnnl_memory_t arg_of(const struct op *o, int key)
{
    for (int i = 0; i < o->nargs; i++)
        if (o->args[i].arg == key)
            return o->args[i].memory;
    return NULL;
}

/* After chunk_the_conv: moves the convolution's backward-weights pass into
 * the pool's backward step, in the same chunks, when that is the
 * convolution's only backward pass (a first layer: no gradient to its
 * input) and reads its operands where they are.  Sets *moved. */
static st_status chunk_the_conv_bwd(st_net *n, int j, const_dnnl_primitive_desc_t chunk_fwd_pd, bool *moved)
{
    struct xnode *x = &n->x[j], *px = &n->x[x->in];
    struct onednn_node *dn = x->dn;
    struct oplist *pb = &px->dn->bwd;
    *moved = false;
    if (n->x[px->in].wants_diff || !pb->n || pb->v[0].step || pb->v[0].prof != NODE_CONV ||
        (pb->n == 2 && pb->v[1].prim && pb->v[1].prof != NODE_KINDS) || pb->n > 2 ||
        arg_of(&pb->v[0], DNNL_ARG_SRC) != dn->chunk_full_src || arg_of(&pb->v[0], DNNL_ARG_DIFF_DST) != px->diff.mem)
        return ST_OK;
    const struct op *bw = &pb->v[0];
    dnnl_memory_t dw = arg_of(bw, DNNL_ARG_DIFF_WEIGHTS), db = arg_of(bw, DNNL_ARG_DIFF_BIAS);
    if (!dw)
        return ST_OK;
    dnnl_memory_desc_t diff_md = *query(chunk_fwd_pd, dnnl_query_dst_md, 0);
    struct weights_layer w;
    weights_dims(n, px, &w);
    dnnl_primitive_desc_t pd;
    OK(conv_or_ip_bwd_pd(n, px, &w, true, mem_md(dn->chunk_src), mem_md(dw), db ? mem_md(db) : NULL, &diff_md,
                         chunk_fwd_pd, &pd));
    if (is_reference_impl(pd) || !same(query(pd, dnnl_query_src_md, 0), mem_md(dn->chunk_src)) ||
        !same(query(pd, dnnl_query_diff_dst_md, 0), &diff_md) ||
        !same(query(pd, dnnl_query_diff_weights_md, 0), mem_md(dw)))
        return ST_OK;
    OK(prim_new(n, &dn->chunk_bwd_w, pd));
    OK(mem_new(n, &dn->chunk_diff, &diff_md, NULL));
    /* an odd edge row or column gets no gradient: nothing else writes here */
    memset(mem_ptr(dn->chunk_diff), 0, dnnl_memory_desc_get_size(&diff_md));
    OK(mem_new(n, &dn->chunk_dw, mem_md(dw), NULL));
    if (db)
        OK(mem_new(n, &dn->chunk_db, mem_md(db), NULL));
    dn->total_dw = dw;
    dn->total_db = db;
    memmove(&pb->v[0], &pb->v[1], (size_t)(pb->n - 1) * sizeof *pb->v);  /* the reorder to plain, if any, stays */
    pb->n--;
    *moved = true;
    return ST_OK;
}

/* Moves the convolution before max-pool j into the pool's forward step, in
 * chunks, when its output is bigger than CHUNK_BYTES and a chunk-sized
 * primitive gets a real kernel with the same layouts.  Sets *chunk to the
 * images per chunk, or 0 when the pair stays as it is. */
static st_status chunk_the_conv(st_net *n, int j, int *chunk)
{
    struct xnode *x = &n->x[j], *px = &n->x[x->in];
    struct onednn_node *dn = x->dn;
    struct oplist *pf = &px->dn->fwd;
    *chunk = 0;
    if (px->kind != NODE_CONV || px->consumers != 1 || px->fuse_relu || !pf->n || pf->v[pf->n - 1].step ||
        pf->v[pf->n - 1].prof != NODE_CONV || getenv("SHMTRAIN_ONEDNN_NO_CHUNKS"))
        return ST_OK;
    const size_t image = dnnl_memory_desc_get_size(&px->dst.md) / (size_t)n->batch;
    int c = 0;
    for (int k = 1; k < n->batch && image * (size_t)n->batch > CHUNK_BYTES; k++)
        if (n->batch % k == 0 && image * (size_t)k <= CHUNK_BYTES)
            c = k;
    const struct op *conv = &pf->v[pf->n - 1];
    dnnl_memory_t src = arg_of(conv, DNNL_ARG_SRC), wei = arg_of(conv, DNNL_ARG_WEIGHTS),
                  bias = arg_of(conv, DNNL_ARG_BIAS);
    if (!c || !src || !wei)
        return ST_OK;
    const_dnnl_primitive_desc_t full;
    TRY(dnnl_primitive_get_primitive_desc(conv->prim, &full));
    /* The primitive's own source description: the memory's may differ in
     * the strides of size-1 dimensions, which kernels match by tag. */
    dnnl_memory_desc_t src_md = *query(full, dnnl_query_src_md, 0), dst_md = px->dst.md;
    src_md.dims[0] = src_md.padded_dims[0] = c;  /* the batch is the outermost dimension */
    dst_md.dims[0] = dst_md.padded_dims[0] = c;
    struct weights_layer w;
    weights_dims(n, px, &w);
    dnnl_primitive_desc_t pd;
    OK(weights_fwd_desc(n, px, &w, &src_md, mem_md(wei), bias ? mem_md(bias) : NULL, &dst_md, &pd));
    if (is_reference_impl(pd) || !same(query(pd, dnnl_query_src_md, 0), &src_md) ||
        !same(query(pd, dnnl_query_weights_md, 0), mem_md(wei)) || !same(query(pd, dnnl_query_dst_md, 0), &dst_md))
        return ST_OK;
    dnnl_memory_t out;
    OK(prim_new(n, &dn->chunk_conv, pd));
    OK(mem_new(n, &dn->chunk_src, &src_md, mem_ptr(src)));
    OK(mem_new(n, &out, &dst_md, NULL));
    dn->chunk_full_src = src;
    dn->chunk_src_image = src_md.format_desc.blocking.strides[0];
    int k = 0;
    dn->chunk_args[k++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, dn->chunk_src};
    dn->chunk_args[k++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wei};
    if (bias)
        dn->chunk_args[k++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias};
    dn->chunk_args[k++] = (dnnl_exec_arg_t){DNNL_ARG_DST, out};  /* last: conv_maxpool2_fwd reads it there */
    dn->chunk_nargs = k;
    dn->chunk = c;
    pf->n--;  /* the whole-batch convolution no longer runs; its primitive stays owned by the net */
    *chunk = c;
    return getenv("SHMTRAIN_ONEDNN_NO_BWD_CHUNKS") ? ST_OK : chunk_the_conv_bwd(n, j, pd, &dn->chunk_bwd_moved);
}

static st_status build_maxpool2(st_net *n, int j, dnnl_format_tag_t tag)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    struct onednn_node *dn = x->dn;
    dnnl_dims_t dd = {n->batch, x->nd->c, x->nd->h, x->nd->w};
    dnnl_memory_desc_t md;
    dnnl_format_tag_t dtag;
    TRY(dnnl_memory_desc_init_by_tag(&md, 4, dd, dnnl_f32, tag));
    OK(set_dst(n, x, &md));
    if (!channel_innermost(&x->dst.md, &dn->pool_dst, &dtag) || dn->pool_dst.block != dn->pool_src.block)
        return st_fail(ST_ERR_BACKEND, "max-pool: unexpected output layout (model line %d)", x->nd->line);
    if (!(dn->pool_arg = calloc(dn->elems, 1)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    int chunk;
    OK(chunk_the_conv(n, j, &chunk));
    int at = snprintf(x->impl, sizeof x->impl, "C 2x2/2 max, %s", tag == dnnl_nhwc ? "nhwc" : "blocked");
    if (chunk && at > 0 && (size_t)at < sizeof x->impl)
        snprintf(x->impl + at, sizeof x->impl - (size_t)at, ", with the conv%s in %d-image chunks",
                 dn->chunk_bwd_moved ? " (forward and backward-weights)" : "", chunk);
    if (chunk)
        OK(add_step(n, &dn->fwd, conv_maxpool2_fwd, NODE_CONV));  /* mostly convolution time */
    else
        OK(add_step(n, &dn->fwd, maxpool2_fwd, NODE_MAXPOOL));
    if (dn->chunk_bwd_moved)
        return add_step(n, &dn->bwd, maxpool2_conv_bwd, NODE_CONV);  /* mostly convolution time */
    if (!px->wants_diff)
        return ST_OK;
    OK(add_step(n, &dn->bwd, maxpool2_bwd, NODE_MAXPOOL));
    OK(deliver(n, j, x->in, &px->dst.md, NULL, &dn->pool_target));
    if (px->consumers == 1 && dn->pool_target == px->diff.mem) {
        /* Only this pool writes there, never to an odd edge: zero it once
         * instead of every step (2 MB for cnn's second pool). */
        memset(mem_ptr(dn->pool_target), 0, dnnl_memory_desc_get_size(&px->dst.md));
        dn->pool_edges_zeroed = true;
    }
    return ST_OK;
}

static st_status build_pool(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *nd = x->nd, *s = px->nd;
    dnnl_format_tag_t tag;
    if (x->kind == NODE_MAXPOOL && nd->k == 2 && nd->s == 2 && nd->p == 0 && !getenv("SHMTRAIN_ONEDNN_POOL") &&
        channel_innermost(&px->dst.md, &x->dn->pool_src, &tag))
        return build_maxpool2(n, j, tag);
    dnnl_alg_kind_t alg = x->kind == NODE_MAXPOOL ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    dnnl_dims_t kernel = {nd->k, nd->k}, strides = {nd->s, nd->s}, pad = {nd->p, nd->p}, dil = {0, 0};
    if (nd->global) {
        kernel[0] = s->h;
        kernel[1] = s->w;
    }
    dnnl_dims_t dst_dims = {n->batch, nd->c, nd->h, nd->w};
    dnnl_memory_desc_t dst_any;
    OK(any_md(n, &dst_any, 4, dst_dims));
    dnnl_pooling_v2_desc_t pdsc;
    dnnl_primitive_desc_t fpd, bpd;
    dnnl_primitive_t f, b;
    TRY(dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_training, alg, &px->dst.md, &dst_any,
                                          strides, kernel, dil, pad, pad));
    OK(pd_new(n, &fpd, &pdsc, NULL, NULL));
    impl_name(x, fpd);
    OK(set_dst(n, x, query(fpd, dnnl_query_dst_md, 0)));
    dnnl_memory_t ws = NULL;
    const dnnl_memory_desc_t *wsmd = query(fpd, dnnl_query_workspace_md, 0);
    if (wsmd && wsmd->ndims > 0)
        OK(mem_new(n, &ws, wsmd, NULL));
    OK(prim_new(n, &f, fpd));
    OK(add_op(n, &x->dn->fwd, f, x->kind, DNNL_ARG_SRC, px->dst.mem, DNNL_ARG_DST, x->dst.mem,
              DNNL_ARG_WORKSPACE, ws, -1));
    if (!px->wants_diff)
        return ST_OK;
    TRY(dnnl_pooling_v2_backward_desc_init(&pdsc, alg, &px->dst.md, &x->dst.md, strides, kernel, dil,
                                           pad, pad));
    OK(pd_new(n, &bpd, &pdsc, NULL, fpd));
    OK(prim_new(n, &b, bpd));
    OK(add_op(n, &x->dn->bwd, b, x->kind, -1));
    int at = x->dn->bwd.n - 1;
    dnnl_memory_t target;
    OK(deliver(n, j, x->in, query(bpd, dnnl_query_diff_src_md, 0), NULL, &target));
    struct op *o = &x->dn->bwd.v[at];
    o->args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, x->diff.mem};
    o->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, ws};
    o->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, target};
    o->nargs = 3;
    return ST_OK;
}

/* ----------------------------------------------------- batch norm -- */

static st_status bn_running_stats(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const float *mean = mem_ptr(x->dn->mean), *var = mem_ptr(x->dn->var);
    const double m = (double)n->batch * nd->h * nd->w;
    float *rm = n->buffers + nd->buf_off, *rv = rm + nd->c;
    for (int c = 0; c < nd->c; c++) {
        rm[c] = 0.9f * rm[c] + 0.1f * mean[c];
        rv[c] = 0.9f * rv[c] + 0.1f * (float)(var[c] * (m > 1 ? m / (m - 1) : 1.0));
    }
    return ST_OK;
}

static st_status build_bn(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *nd = x->nd;
    const unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_batch_normalization_desc_t bd;
    dnnl_primitive_desc_t tpd, ipd, bpd;
    dnnl_primitive_t tp, ip, bp;
    TRY(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_training, &px->dst.md, 1e-5f, flags));
    OK(pd_new(n, &tpd, &bd, NULL, NULL));
    TRY(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_inference, &px->dst.md, 1e-5f,
                                                   flags | dnnl_use_global_stats));
    OK(pd_new(n, &ipd, &bd, NULL, NULL));
    impl_name(x, tpd);
    OK(set_dst(n, x, query(tpd, dnnl_query_dst_md, 0)));
    dnnl_memory_t scale, shift, dscale, dshift, rmean, rvar;
    OK(mem_new(n, &scale, arg_md(tpd, DNNL_ARG_SCALE), n->params + nd->w_off));
    OK(mem_new(n, &shift, arg_md(tpd, DNNL_ARG_SHIFT), n->params + nd->b_off));
    OK(mem_new(n, &x->dn->mean, arg_md(tpd, DNNL_ARG_MEAN), NULL));
    OK(mem_new(n, &x->dn->var, arg_md(tpd, DNNL_ARG_VARIANCE), NULL));
    OK(mem_new(n, &rmean, arg_md(ipd, DNNL_ARG_MEAN), n->buffers + nd->buf_off));
    OK(mem_new(n, &rvar, arg_md(ipd, DNNL_ARG_VARIANCE), n->buffers + nd->buf_off + nd->c));
    OK(prim_new(n, &tp, tpd));
    OK(prim_new(n, &ip, ipd));
    OK(add_op(n, &x->dn->fwd, tp, NODE_BATCHNORM, DNNL_ARG_SRC, px->dst.mem, DNNL_ARG_SCALE, scale,
              DNNL_ARG_SHIFT, shift, DNNL_ARG_DST, x->dst.mem, DNNL_ARG_MEAN, x->dn->mean,
              DNNL_ARG_VARIANCE, x->dn->var, -1));
    OK(add_step(n, &x->dn->fwd, bn_running_stats, NODE_BATCHNORM));
    OK(add_op(n, &x->dn->fwd_infer, ip, NODE_BATCHNORM, DNNL_ARG_SRC, px->dst.mem, DNNL_ARG_SCALE, scale,
              DNNL_ARG_SHIFT, shift, DNNL_ARG_DST, x->dst.mem, DNNL_ARG_MEAN, rmean, DNNL_ARG_VARIANCE,
              rvar, -1));
    TRY(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &px->dst.md, &px->dst.md, 1e-5f,
                                                    flags));
    OK(pd_new(n, &bpd, &bd, NULL, tpd));
    OK(prim_new(n, &bp, bpd));
    OK(mem_new(n, &dscale, arg_md(bpd, DNNL_ARG_DIFF_SCALE), n->grads + nd->w_off));
    OK(mem_new(n, &dshift, arg_md(bpd, DNNL_ARG_DIFF_SHIFT), n->grads + nd->b_off));
    OK(add_op(n, &x->dn->bwd, bp, NODE_BATCHNORM, -1));
    int at = x->dn->bwd.n - 1;
    dnnl_memory_t target = NULL;
    if (px->wants_diff)
        OK(deliver(n, j, x->in, query(bpd, dnnl_query_diff_src_md, 0), NULL, &target));
    else
        OK(mem_new(n, &target, &px->dst.md, NULL));  /* computed anyway, then dropped */
    struct op *o = &x->dn->bwd.v[at];
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, px->dst.mem}, {DNNL_ARG_MEAN, x->dn->mean},
                              {DNNL_ARG_VARIANCE, x->dn->var}, {DNNL_ARG_DIFF_DST, x->diff.mem},
                              {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift},
                              {DNNL_ARG_DIFF_SRC, target}, {DNNL_ARG_DIFF_SCALE, dscale},
                              {DNNL_ARG_DIFF_SHIFT, dshift}};
    memcpy(o->args, args, sizeof args);
    o->nargs = 9;
    return ST_OK;
}

/* --------------------------------------------- dropout, flatten, add -- */

/* Dropout works on the whole buffer, padding included (0 stays 0), so it
 * runs on any layout; the mask differs from the reference backend's, which
 * indexes plain NCHW. */
static st_status dropout_fwd(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const float *src = mem_ptr(n->x[x->in].dst.mem);
    float *dst = mem_ptr(x->dst.mem), *ms = x->dn->mask_scale;
    const float p = x->nd->drop, scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < x->dn->elems; i++) {
        ms[i] = !n->training ? 1.0f : dropout_keep(n->dropout_seed, j, i, p) ? scale : 0.0f;
        dst[i] = src[i] * ms[i];
    }
    return ST_OK;
}

static st_status dropout_bwd(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const float *dy = mem_ptr(x->diff.mem), *ms = x->dn->mask_scale;
    float *dx = mem_ptr(x->dn->dropout_diff_src);
    for (size_t i = 0; i < x->dn->elems; i++)
        dx[i] = dy[i] * ms[i];
    return ST_OK;
}

static st_status build_dropout(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    snprintf(x->impl, sizeof x->impl, "C loop");
    OK(set_dst(n, x, &px->dst.md));
    if (!(x->dn->mask_scale = calloc(x->dn->elems, sizeof(float))))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    OK(add_step(n, &x->dn->fwd, dropout_fwd, NODE_DROPOUT));
    if (!px->wants_diff)
        return ST_OK;
    OK(mem_new(n, &x->dn->dropout_diff_src, &px->dst.md, NULL));
    OK(add_step(n, &x->dn->bwd, dropout_bwd, NODE_DROPOUT));
    dnnl_memory_t target;
    return deliver(n, j, x->in, &px->dst.md, x->dn->dropout_diff_src, &target);
}

/* An input already in plain NCHW (mlp's) is read where it is: the input's
 * buffer changes every forward, hence a step rather than a fixed view. */
static st_status flatten_alias(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    TRY(dnnl_memory_set_data_handle(x->dst.mem, mem_ptr(n->x[x->in].dst.mem)));
    return ST_OK;
}

/* Flatten = reorder to plain NCHW, then read the same buffer as (N, CHW).
 * The 2-D inner product after it then runs as a GEMM with plain weights. */
static st_status build_flatten(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *px = &n->x[x->in];
    const struct node *s = px->nd;
    dnnl_dims_t d4 = {n->batch, s->c, s->h, s->w}, d2 = {n->batch, (dnnl_dim_t)s->c * s->h * s->w};
    dnnl_memory_desc_t md4, md2;
    OK(plain_md(n, &md4, 4, d4));
    OK(plain_md(n, &md2, 2, d2));
    snprintf(x->impl, sizeof x->impl, "reorder to nchw");
    OK(set_dst(n, x, &md2));
    dnnl_memory_t view, dview, target;
    if (same(&px->dst.md, &md4)) {
        snprintf(x->impl, sizeof x->impl, "a view of its input");
        OK(add_step(n, &x->dn->fwd, flatten_alias, NODE_FLATTEN));
    } else {
        OK(mem_new(n, &view, &md4, mem_ptr(x->dst.mem)));
        OK(add_reorder(n, &x->dn->fwd, px->dst.mem, view));
    }
    if (!px->wants_diff)
        return ST_OK;
    OK(mem_new(n, &dview, &md4, mem_ptr(x->diff.mem)));
    return deliver(n, j, x->in, &md4, dview, &target);
}

static st_status build_add(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct xnode *a = &n->x[x->in], *b = &n->x[x->in2];
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    dnnl_memory_t src1 = b->dst.mem, target;
    if (!same(&b->dst.md, &a->dst.md)) {
        OK(mem_new(n, &src1, &a->dst.md, NULL));
        OK(add_reorder(n, &x->dn->fwd, b->dst.mem, src1));
    }
    TRY(dnnl_binary_desc_init(&bd, dnnl_binary_add, &a->dst.md, &a->dst.md, &a->dst.md));
    OK(pd_new(n, &pd, &bd, NULL, NULL));
    impl_name(x, pd);
    OK(set_dst(n, x, &a->dst.md));
    OK(prim_new(n, &p, pd));
    OK(add_op(n, &x->dn->fwd, p, NODE_ADD, DNNL_ARG_SRC_0, a->dst.mem, DNNL_ARG_SRC_1, src1, DNNL_ARG_DST,
              x->dst.mem, -1));
    /* The gradient passes unchanged to both inputs; copies, because either
     * producer's diff may be added to later. */
    OK(deliver(n, j, x->in, &x->dst.md, x->diff.mem, &target));
    return deliver(n, j, x->in2, &x->dst.md, x->diff.mem, &target);
}

static st_status build_input(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    dnnl_dims_t d = {n->batch, nd->c, nd->h, nd->w};
    dnnl_memory_desc_t md;
    OK(plain_md(n, &md, 4, d));
    snprintf(x->impl, sizeof x->impl, "user nchw");
    x->dst.md = md;
    x->diff.md = md;
    OK(mem_new(n, &n->dnet->input_user, &md, n->logits /* replaced each forward */));
    x->dst.mem = n->dnet->input_user;
    OK(mem_new(n, &x->diff.mem, &md, NULL));
    if (x->consumers > 1) {
        OK(mem_new(n, &x->diff_tmp.mem, &md, NULL));
        x->diff_tmp.md = md;
        dnnl_binary_desc_t bd;
        dnnl_primitive_desc_t pd;
        TRY(dnnl_binary_desc_init(&bd, dnnl_binary_add, &md, &md, &md));
        OK(pd_new(n, &pd, &bd, NULL, NULL));
        OK(prim_new(n, &x->dn->accum, pd));
    }
    return ST_OK;
}

/* The last node's output as plain (batch, outputs) logits, and back. */
static st_status build_loss_io(st_net *n)
{
    struct xnode *last = &n->x[n->nx - 1];
    const struct node *nd = last->nd;
    dnnl_memory_desc_t md;
    dnnl_dims_t d4 = {n->batch, nd->c, nd->h, nd->w}, d2 = {n->batch, nd->c};
    OK(plain_md(n, &md, nd->flat ? 2 : 4, nd->flat ? d2 : d4));
    OK(mem_new(n, &n->dnet->logits_user, &md, n->logits));
    OK(mem_new(n, &n->dnet->dlast_user, &md, n->dlogits));
    OK(reorder_new(n, &n->dnet->to_logits, &last->dst.md, &md));
    OK(reorder_new(n, &n->dnet->from_dlast, &md, &last->dst.md));
    return ST_OK;
}

/* ----------------------------------------------------------------- API -- */

st_status onednn_build(st_net *n)
{
    n->dnet = calloc(1, sizeof *n->dnet);
    if (!n->dnet)
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    n->dnet->cur = -1;
    TRY(dnnl_engine_create(&n->dnet->eng, dnnl_cpu, 0));
    TRY(dnnl_stream_create(&n->dnet->strm, n->dnet->eng, dnnl_stream_default_flags));
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        n->dnet->cur = j;
        if (!(x->dn = calloc(1, sizeof *x->dn)))
            return st_fail(ST_ERR_NOMEM, "net: out of memory");
        switch (x->kind) {
        case NODE_INPUT: OK(build_input(n, j)); break;
        case NODE_CONV:
        case NODE_LINEAR: OK(build_weights(n, j)); break;
        case NODE_RELU: OK(build_relu(n, j)); break;
        case NODE_MAXPOOL:
        case NODE_AVGPOOL: OK(build_pool(n, j)); break;
        case NODE_BATCHNORM: OK(build_bn(n, j)); break;
        case NODE_DROPOUT: OK(build_dropout(n, j)); break;
        case NODE_FLATTEN: OK(build_flatten(n, j)); break;
        case NODE_ADD: OK(build_add(n, j)); break;
        default: return st_fail(ST_ERR_INVALID, "net: unknown layer kind %d", (int)x->kind);
        }
    }
    n->dnet->cur = -1;
    if (getenv("SHMTRAIN_NN_VERBOSE"))
        st_net_describe(n, stderr);
    return build_loss_io(n);
}

static st_status run(st_net *n, const struct oplist *l)
{
    for (int i = 0; i < l->n; i++) {
        const struct op *o = &l->v[i];
        double t0 = n->profiling ? nn_now() : 0;
        if (o->step) {
            st_status st = o->step(n, o->node);
            if (st != ST_OK)
                return st;
        } else {
            dnnl_status_t s = dnnl_primitive_execute(o->prim, n->dnet->strm, o->nargs, o->args);
            if (s != dnnl_success) {
                n->dnet->cur = o->node;
                return dnnl_error(n, "dnnl_primitive_execute", s);
            }
        }
        if (n->profiling)
            n->prof[o->prof] += nn_now() - t0;
    }
    return ST_OK;
}

st_status onednn_forward(st_net *n, const float *input)
{
    struct onednn_net *d = n->dnet;
    TRY(dnnl_memory_set_data_handle(d->input_user, (void *)input));
    for (int j = 1; j < n->nx; j++) {
        const struct onednn_node *dn = n->x[j].dn;
        bool infer = !n->training && dn->fwd_infer.n > 0;
        OK(run(n, infer ? &dn->fwd_infer : &dn->fwd));
    }
    TRY(dnnl_primitive_execute(d->to_logits, d->strm, 2,
                               (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, n->x[n->nx - 1].dst.mem},
                                                   {DNNL_ARG_TO, d->logits_user}}));
    TRY(dnnl_stream_wait(d->strm));
    return ST_OK;
}

st_status onednn_set_last_diff(st_net *n, const float *plain)
{
    struct onednn_net *d = n->dnet;
    TRY(dnnl_memory_set_data_handle(d->dlast_user, (void *)plain));
    TRY(dnnl_primitive_execute(d->from_dlast, d->strm, 2,
                               (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, d->dlast_user},
                                                   {DNNL_ARG_TO, n->x[n->nx - 1].diff.mem}}));
    return ST_OK;
}

st_status onednn_backward(st_net *n)
{
    for (int j = n->nx - 1; j >= 1; j--)
        OK(run(n, &n->x[j].dn->bwd));
    TRY(dnnl_stream_wait(n->dnet->strm));
    return ST_OK;
}

st_status onednn_input_grad(st_net *n, float *out)
{
    const struct xnode *x = &n->x[0];
    memcpy(out, mem_ptr(x->diff.mem), dnnl_memory_desc_get_size(&x->diff.md));
    return ST_OK;
}

void onednn_destroy(st_net *n)
{
    struct onednn_net *d = n->dnet;
    for (int j = 0; n->x && j < n->nx; j++) {
        struct onednn_node *dn = n->x[j].dn;
        if (!dn)
            continue;
        free(dn->fwd.v);
        free(dn->fwd_infer.v);
        free(dn->bwd.v);
        free(dn->mask_scale);
        free(dn->pool_arg);
        free(dn);
    }
    if (!d)
        return;
    for (int i = 0; i < d->nprims; i++)
        dnnl_primitive_destroy(d->prims[i]);
    for (int i = 0; i < d->npds; i++)
        dnnl_primitive_desc_destroy(d->pds[i]);
    for (int i = 0; i < d->nmems; i++)
        dnnl_memory_destroy(d->mems[i]);
    if (d->strm)
        dnnl_stream_destroy(d->strm);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    free(d->mems);
    free(d->prims);
    free(d->pds);
    free(d);
}

/* -------------------------------------------------------------- report -- */

void st_nn_onednn_version(char *buf, size_t len)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, len, "%d.%d.%d", v->major, v->minor, v->patch);
}

const char *st_nn_onednn_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "generic";
    }
}
