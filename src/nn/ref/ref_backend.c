/* The reference backend: every layer in plain C on NCHW / (N, C) arrays,
 * through the kernels of ref.c.  It is the definition every fast path is
 * tested against, and it runs the same exec graph as oneDNN does.
 *
 * In a net of a low precision (bf16, fp16) it runs the plan precision.c
 * makes for every backend and defines what it computes: values are floats
 * holding the low type's values exactly.  A layer computing low reads its
 * weights from a low copy the optimizer writes, its input and its output's
 * gradient rounded (a conversion, counted, where that edge is kept in
 * fp32), and sums in double as in fp32; attention rounds its products'
 * operands (ref_seq.c); an edge kept low is rounded once when written, and
 * its gradient once every consumer has delivered. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "net.h"
#include "ref/ref.h"

static struct conv_shape window_shape(const st_net *n, const struct xnode *x, const struct node *src)
{
    const struct node *nd = x->nd;
    struct conv_shape cs = {.n = n->batch, .c = src->c, .h = src->h, .w = src->w, .o = nd->c,
                            .oh = nd->h, .ow = nd->w, .kh = nd->k, .kw = nd->k, .s = nd->s, .p = nd->p};
    if (nd->global) {
        cs.kh = src->h;
        cs.kw = src->w;
    }
    return cs;
}

/* PyTorch's running statistics: momentum 0.1, the unbiased variance. */
static void update_running_stats(st_net *n, const struct node *nd, const float *mean, const float *var)
{
    const float momentum = 0.1f;
    const double m = (double)n->batch * nd->h * nd->w;
    float *rm = n->buffers + nd->buf_off, *rv = rm + nd->c;
    for (int c = 0; c < nd->c; c++) {
        rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
        rv[c] = (1 - momentum) * rv[c] + momentum * (float)(var[c] * (m > 1 ? m / (m - 1) : 1.0));
    }
}

/* The reference backend's state of one exec node: plain NCHW / (N, C). */
struct ref_node {
    float *dst, *diff;       /* its output and the gradient w.r.t. it */
    float *diff_src;         /* the gradient w.r.t. its input, before delivery */
    int *argmax;             /* max-pool: the winner of each output */
    float *mean, *var;       /* batch norm: this batch's statistics */
    uint8_t *mask;           /* dropout: kept or not */
    float *rstd;             /* layer norm: per row, with mean */
    float *att;              /* attention: the softmax weights */
    uint16_t *low_weights;   /* a layer computing low: its weights in that type (a weight copy) */
    float *wide;             /* those widened, what its kernels read */
    float *src_low;          /* its input rounded, when the input is kept in fp32 */
    float *dy_low;           /* its output's gradient rounded, when the output is kept in fp32 */
};

/* The state behind a node's `be`, as the reference's. */
static inline struct ref_node *ref_state(const struct xnode *x) { return x->be; }

/* What one layer's reference step reads and writes. */
struct ref_step {
    st_net *n;
    struct xnode *x;
    int j;                       /* its exec index */
    const struct node *nd, *s;   /* this node; its input's (NULL for the input) */
    const float *src;            /* its input's activation */
    const float *w;              /* the weights its kernels read (a low copy widened, in a layer computing low) */
    st_dtype low;                /* what it computes in: fp32, or the net's low precision */
    float *y;                    /* forward: its output */
    float *dy, *dx;              /* backward: its output's gradient; its input's, or NULL if unwanted */
    size_t sz;                   /* floats in its output */
};

/* ------------------------------------------------------------- scratch -- */

static bool scratch_none(struct xnode *x, size_t sz)
{
    (void)x, (void)sz;
    return true;
}

static bool scratch_argmax(struct xnode *x, size_t sz) { return (ref_state(x)->argmax = calloc(sz, sizeof(int))) != NULL; }
static bool scratch_mask(struct xnode *x, size_t sz) { return (ref_state(x)->mask = calloc(sz, 1)) != NULL; }

/* Layer norm's mean and 1/sigma per row (sz / c rows). */
static bool scratch_ln_stats(struct xnode *x, size_t sz)
{
    const size_t rows = sz / (size_t)x->nd->c;
    return (ref_state(x)->mean = calloc(rows, sizeof(float))) && (ref_state(x)->rstd = calloc(rows, sizeof(float)));
}

/* Attention's weights: heads x T x T per sample (sz / (T c) samples). */
static bool scratch_att(struct xnode *x, size_t sz)
{
    const struct node *nd = x->nd;
    const size_t samples = sz / ((size_t)nd->t * nd->c);
    return (ref_state(x)->att = calloc(samples * nd->heads * nd->t * nd->t, sizeof(float))) != NULL;
}

static bool scratch_bn_stats(struct xnode *x, size_t sz)
{
    (void)sz;
    return (ref_state(x)->mean = calloc((size_t)x->nd->c, sizeof(float))) && (ref_state(x)->var = calloc((size_t)x->nd->c, sizeof(float)));
}

/* ------------------------------------------------------- forward steps -- */

static void input_ref_forward(const struct ref_step *t) { memcpy(t->y, t->n->input, t->sz * sizeof(float)); }

static void conv_ref_forward(const struct ref_step *t)
{
    struct conv_shape cs = window_shape(t->n, t->x, t->s);
    const float *p = t->n->params;
    ref_conv_fwd(t->y, t->src, t->w, t->nd->bias ? p + t->nd->b_off : NULL, &cs);
}

static void linear_ref_forward(const struct ref_step *t)
{
    const float *p = t->n->params;
    ref_linear_fwd(t->y, t->src, t->w, t->nd->bias ? p + t->nd->b_off : NULL, (int)nn_rows(t->n, t->nd),
                   t->s->c * t->s->h * t->s->w, t->nd->c);
}

static void relu_ref_forward(const struct ref_step *t) { ref_relu_fwd(t->y, t->src, t->sz); }

static void maxpool_ref_forward(const struct ref_step *t)
{
    struct conv_shape cs = window_shape(t->n, t->x, t->s);
    ref_maxpool_fwd(t->y, ref_state(t->x)->argmax, t->src, &cs);
}

static void avgpool_ref_forward(const struct ref_step *t)
{
    struct conv_shape cs = window_shape(t->n, t->x, t->s);
    ref_avgpool_fwd(t->y, t->src, &cs);
}

static void bn_ref_forward(const struct ref_step *t)
{
    st_net *n = t->n;
    const struct node *nd = t->nd;
    const float *g = n->params + nd->w_off, *b = n->params + nd->b_off;
    if (n->training) {
        ref_bn_fwd_train(t->y, ref_state(t->x)->mean, ref_state(t->x)->var, t->src, g, b, n->batch, nd->c, nd->h * nd->w, 1e-5f);
        update_running_stats(n, nd, ref_state(t->x)->mean, ref_state(t->x)->var);
    } else {
        const float *rm = n->buffers + nd->buf_off;
        ref_bn_fwd_infer(t->y, t->src, g, b, rm, rm + nd->c, n->batch, nd->c, nd->h * nd->w, 1e-5f);
    }
}

static void dropout_ref_forward(const struct ref_step *t)
{
    const st_net *n = t->n;
    const float drop = t->nd->drop, scale = 1.0f / (1.0f - drop);
    for (size_t i = 0; i < t->sz; i++) {
        ref_state(t->x)->mask[i] = !n->training || dropout_keep(n->dropout_seed, t->j, i, drop);
        t->y[i] = n->training ? (ref_state(t->x)->mask[i] ? t->src[i] * scale : 0.0f) : t->src[i];
    }
}

static void flatten_ref_forward(const struct ref_step *t) { memcpy(t->y, t->src, t->sz * sizeof(float)); }

static void add_ref_forward(const struct ref_step *t)
{
    const float *b = ref_state(&t->n->x[t->x->in2])->dst;
    for (size_t i = 0; i < t->sz; i++)
        t->y[i] = t->src[i] + b[i];
}

static void embed_ref_forward(const struct ref_step *t)
{
    const float *p = t->n->params;
    ref_embed_fwd(t->y, t->n->input, p + t->nd->w_off, p + t->nd->b_off, t->n->batch, t->nd->t, t->nd->c);
}

static void ln_ref_forward(const struct ref_step *t)
{
    const float *p = t->n->params;
    ref_ln_fwd(t->y, ref_state(t->x)->mean, ref_state(t->x)->rstd, t->src, p + t->nd->w_off, p + t->nd->b_off,
               (int)nn_rows(t->n, t->nd), t->nd->c, 1e-5f);
}

static void att_ref_forward(const struct ref_step *t)
{
    ref_attention_fwd(t->y, ref_state(t->x)->att, t->src, t->n->batch, t->nd->t, t->nd->c, t->nd->heads, t->low);
}

static void gelu_ref_forward(const struct ref_step *t) { ref_gelu_fwd(t->y, t->src, t->sz); }

/* The head is a linear map through the embed's token table, no bias. */
static void head_ref_forward(const struct ref_step *t)
{
    const struct node *e = &t->n->model->nodes[t->nd->embed];
    ref_linear_fwd(t->y, t->src, t->w, NULL, (int)nn_rows(t->n, t->nd), e->c, e->vocab);
}

/* ------------------------------------------------------ backward steps -- */

/* Hand `grad` (the gradient w.r.t. node p's output, from consumer j) to p. */
static void ref_deliver(st_net *n, int p, int j, const float *grad)
{
    struct xnode *px = &n->x[p];
    if (!px->wants_diff)
        return;
    const size_t sz = nn_node_size(n, px->nd);
    if (px->first_writer == j) {
        memcpy(ref_state(px)->diff, grad, sz * sizeof(float));
    } else {
        for (size_t i = 0; i < sz; i++)
            ref_state(px)->diff[i] += grad[i];
    }
}

/* Each writes t->dx (when wanted) and any parameter gradients, and says
 * whether dx now holds a gradient for the caller to deliver to the input. */
static bool input_ref_backward(const struct ref_step *t)
{
    (void)t;
    return false;
}

static bool conv_ref_backward(const struct ref_step *t)
{
    st_net *n = t->n;
    struct conv_shape cs = window_shape(n, t->x, t->s);
    ref_conv_bwd(t->dx, n->grads + t->nd->w_off, t->nd->bias ? n->grads + t->nd->b_off : NULL, t->dy, t->src, t->w,
                 &cs);
    return t->dx != NULL;
}

static bool linear_ref_backward(const struct ref_step *t)
{
    st_net *n = t->n;
    ref_linear_bwd(t->dx, n->grads + t->nd->w_off, t->nd->bias ? n->grads + t->nd->b_off : NULL, t->dy, t->src, t->w,
                   (int)nn_rows(n, t->nd), t->s->c * t->s->h * t->s->w, t->nd->c);
    return t->dx != NULL;
}

static bool relu_ref_backward(const struct ref_step *t)
{
    if (t->dx)
        ref_relu_bwd(t->dx, t->dy, t->src, t->sz);
    return t->dx != NULL;
}

static bool maxpool_ref_backward(const struct ref_step *t)
{
    struct conv_shape cs = window_shape(t->n, t->x, t->s);
    if (t->dx)
        ref_maxpool_bwd(t->dx, t->dy, ref_state(t->x)->argmax, &cs);
    return t->dx != NULL;
}

static bool avgpool_ref_backward(const struct ref_step *t)
{
    struct conv_shape cs = window_shape(t->n, t->x, t->s);
    if (t->dx)
        ref_avgpool_bwd(t->dx, t->dy, &cs);
    return t->dx != NULL;
}

static bool bn_ref_backward(const struct ref_step *t)
{
    st_net *n = t->n;
    const struct node *nd = t->nd;
    ref_bn_bwd(t->dx, n->grads + nd->w_off, n->grads + nd->b_off, t->dy, t->src, ref_state(t->x)->mean, ref_state(t->x)->var,
               n->params + nd->w_off, n->batch, nd->c, nd->h * nd->w, 1e-5f);
    return t->dx != NULL;
}

static bool dropout_ref_backward(const struct ref_step *t)
{
    const float scale = t->n->training ? 1.0f / (1.0f - t->nd->drop) : 1.0f;
    for (size_t i = 0; t->dx && i < t->sz; i++)
        t->dx[i] = ref_state(t->x)->mask[i] ? t->dy[i] * scale : 0.0f;
    return t->dx != NULL;
}

static bool flatten_ref_backward(const struct ref_step *t)
{
    if (t->dx)
        memcpy(t->dx, t->dy, t->sz * sizeof(float));
    return t->dx != NULL;
}

/* Token ids have no gradient; the tables do.  A tied head ran first and
 * wrote the token table's gradient, which this adds to. */
static bool embed_ref_backward(const struct ref_step *t)
{
    st_net *n = t->n;
    float *dwte = n->grads + t->nd->w_off;
    if (!t->nd->tied)
        memset(dwte, 0, t->nd->w_count * sizeof(float));
    ref_embed_bwd(dwte, n->grads + t->nd->b_off, t->dy, n->input, n->batch, t->nd->t, t->nd->c);
    return false;
}

static bool ln_ref_backward(const struct ref_step *t)
{
    st_net *n = t->n;
    ref_ln_bwd(t->dx, n->grads + t->nd->w_off, n->grads + t->nd->b_off, t->dy, t->src, ref_state(t->x)->mean,
               ref_state(t->x)->rstd, n->params + t->nd->w_off, (int)nn_rows(n, t->nd), t->nd->c);
    return t->dx != NULL;
}

static bool att_ref_backward(const struct ref_step *t)
{
    if (t->dx)
        ref_attention_bwd(t->dx, t->dy, t->src, ref_state(t->x)->att, t->n->batch, t->nd->t, t->nd->c, t->nd->heads,
                          t->low);
    return t->dx != NULL;
}

static bool gelu_ref_backward(const struct ref_step *t)
{
    if (t->dx)
        ref_gelu_bwd(t->dx, t->dy, t->src, t->sz);
    return t->dx != NULL;
}

/* Writes the token table's gradient (the embed's backward, later, adds). */
static bool head_ref_backward(const struct ref_step *t)
{
    st_net *n = t->n;
    const struct node *e = &n->model->nodes[t->nd->embed];
    ref_linear_bwd(t->dx, n->grads + e->w_off, NULL, t->dy, t->src, t->w, (int)nn_rows(n, t->nd), e->c, e->vocab);
    return t->dx != NULL;
}

/* Both inputs get the output's gradient as it is; nothing is left to deliver. */
static bool add_ref_backward(const struct ref_step *t)
{
    ref_deliver(t->n, t->x->in, t->j, t->dy);
    ref_deliver(t->n, t->x->in2, t->j, t->dy);
    return false;
}

/* ----------------------------------------------------------- the table -- */

static const struct {
    bool (*scratch)(struct xnode *x, size_t sz);
    void (*forward)(const struct ref_step *t);
    bool (*backward)(const struct ref_step *t);
} ref_layers[] = {
#define REF_LAYER(KIND, keyword, parse, init, scratch, fwd, bwd, ...) [NODE_##KIND] = {scratch, fwd, bwd},
    NN_LAYER_TABLE(REF_LAYER)
#undef REF_LAYER
};
_Static_assert(sizeof ref_layers / sizeof *ref_layers == NODE_KINDS, "a reference step per layer kind");

/* -------------------------------------------------------------- backend -- */

/* The weights a layer computing low reads: a conv's or linear layer's own,
 * the tied head's token table.  Their bias stays fp32. */
static const struct node *weights_of(const st_net *n, const struct xnode *x)
{
    return x->kind == NODE_HEAD ? &n->model->nodes[x->nd->embed] : x->nd;
}

static bool computes_low(const struct xnode *x) { return x->lowp && x->lowp_role == LOWP_COMPUTES; }

/* It rounds where the plan says, in any rounding type, on any CPU: every
 * layer computes in any of them, and no precision is refused. */
static st_status ref_takes(st_dtype precision, const st_nn_tuning *t)
{
    (void)precision, (void)t;
    return ST_OK;
}

static bool ref_computes(const st_net *n, const struct xnode *x, st_dtype type)
{
    (void)n, (void)x, (void)type;
    return true;
}

/* A layer computing low: its weight copy (the net registers it with the
 * optimizer; attention has none), the widened floats, and the rounded input
 * and gradient where those edges are kept in fp32. */
static st_status low_buffers(st_net *n, struct xnode *x, size_t sz, size_t in_sz)
{
    const struct node *w = weights_of(n, x);
    struct ref_node *r = ref_state(x);
    const bool weights = w->w_count > 0;
    r->low_weights = weights ? malloc(w->w_count * sizeof(uint16_t)) : NULL;
    r->wide = weights ? malloc(w->w_count * sizeof(float)) : NULL;
    r->src_low = n->x[x->in].stored == ST_DTYPE_F32 ? malloc(in_sz * sizeof(float)) : NULL;
    r->dy_low = x->stored == ST_DTYPE_F32 ? malloc(sz * sizeof(float)) : NULL;
    if ((weights && (!r->low_weights || !r->wide)) || (n->x[x->in].stored == ST_DTYPE_F32 && !r->src_low) ||
        (x->stored == ST_DTYPE_F32 && !r->dy_low))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    return weights ? nn_copy_add(n, w->w_off, w->w_count, r->low_weights, n->cfg.precision, NULL) : ST_OK;
}

static st_status ref_build(st_net *n)
{
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        const size_t sz = nn_node_size(n, x->nd);
        const size_t in_sz = x->in >= 0 ? nn_node_size(n, n->x[x->in].nd) : 0;
        snprintf(x->impl, sizeof x->impl, x->compute == ST_DTYPE_F32 ? "reference" : "reference, %s",
                 st_dtype_name(x->compute));
        if (!(x->be = calloc(1, sizeof(struct ref_node))))
            return st_fail(ST_ERR_NOMEM, "net: out of memory for layer %d", j);
        ref_state(x)->dst = calloc(sz, sizeof(float));
        ref_state(x)->diff = calloc(sz, sizeof(float));
        ref_state(x)->diff_src = in_sz ? calloc(in_sz, sizeof(float)) : NULL;
        bool ok = ref_state(x)->dst && ref_state(x)->diff && (!in_sz || ref_state(x)->diff_src);
        if (!ok || !ref_layers[x->kind].scratch(x, sz))
            return st_fail(ST_ERR_NOMEM, "net: out of memory for layer %d", j);
        st_status st = computes_low(x) ? low_buffers(n, x, sz, in_sz) : ST_OK;
        if (st != ST_OK)
            return st;
    }
    return ST_OK;
}

static void ref_destroy(st_net *n)
{
    for (int j = 0; n->x && j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        if (!ref_state(x))
            continue;
        void *owned[] = {ref_state(x)->dst, ref_state(x)->diff, ref_state(x)->diff_src, ref_state(x)->argmax, ref_state(x)->mean, ref_state(x)->var,
                         ref_state(x)->mask, ref_state(x)->rstd, ref_state(x)->att, ref_state(x)->low_weights, ref_state(x)->wide,
                         ref_state(x)->src_low, ref_state(x)->dy_low};
        for (size_t k = 0; k < sizeof owned / sizeof *owned; k++)
            free(owned[k]);
        free(x->be);
        x->be = NULL;
    }
}

static struct ref_step step_of(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct xnode *px = x->in >= 0 ? &n->x[x->in] : NULL;
    struct ref_step t = {.n = n, .x = x, .j = j, .nd = x->nd, .s = px ? px->nd : NULL,
                         .src = px ? ref_state(px)->dst : NULL, .y = ref_state(x)->dst, .dy = ref_state(x)->diff,
                         .dx = px && px->wants_diff ? ref_state(x)->diff_src : NULL, .sz = nn_node_size(n, x->nd),
                         .low = x->lowp ? n->cfg.precision : ST_DTYPE_F32};
    t.w = n->params + weights_of(n, x)->w_off;
    if (computes_low(x)) {
        t.w = ref_state(x)->wide ? ref_state(x)->wide : t.w;
        t.src = ref_state(x)->src_low ? ref_state(x)->src_low : t.src;
        t.dy = ref_state(x)->dy_low ? ref_state(x)->dy_low : t.dy;
    }
    return t;
}

/* An fp32 edge rounded for a layer computing low, as a fast backend's
 * conversion of it: counted. */
static void convert(st_net *n, float *dst, const float *src, size_t count)
{
    memcpy(dst, src, count * sizeof(float));
    st_dtype_round_n(dst, n->cfg.precision, count);
    n->counters.conversions++;
    n->counters.converted_bytes += count * sizeof(float);
}

/* A layer computing low reads its weight copy and its input in that type. */
static void forward_inputs_low(st_net *n, const struct xnode *x)
{
    const struct node *w = weights_of(n, x);
    if (ref_state(x)->wide)
        st_dtype_convert_n(ref_state(x)->wide, ST_DTYPE_F32, ref_state(x)->low_weights, n->cfg.precision, w->w_count);
    if (ref_state(x)->src_low)
        convert(n, ref_state(x)->src_low, ref_state(&n->x[x->in])->dst, nn_node_size(n, n->x[x->in].nd));
}

static st_status ref_forward(st_net *n, const void *input)
{
    n->input = input;
    for (int j = 0; j < n->nx; j++) {
        double t0 = n->profiling ? st_now_s() : 0;
        if (computes_low(&n->x[j]))
            forward_inputs_low(n, &n->x[j]);
        struct ref_step t = step_of(n, j);
        ref_layers[t.x->kind].forward(&t);
        if (t.x->fuse_relu)
            ref_relu_fwd(t.y, t.y, t.sz);
        st_dtype_round_n(t.y, t.x->stored, t.sz);  /* an edge kept low */
        if (n->profiling)
            n->prof[n->x[j].kind] += st_now_s() - t0;
    }
    memcpy(n->logits, ref_state(&n->x[n->nx - 1])->dst, st_net_output_size(n) * sizeof(float));
    return ST_OK;
}

/* Node j's output gradient, every consumer's delivered: in the type its
 * output is kept in, and rounded (counted) for a layer computing low whose
 * output is kept in fp32. */
static void output_gradient_low(st_net *n, const struct xnode *x)
{
    const size_t sz = nn_node_size(n, x->nd);
    st_dtype_round_n(ref_state(x)->diff, x->stored, sz);
    if (computes_low(x) && ref_state(x)->dy_low)
        convert(n, ref_state(x)->dy_low, ref_state(x)->diff, sz);
}

static st_status ref_backward(st_net *n)
{
    for (int j = n->nx - 1; j >= 0; j--) {
        double t0 = n->profiling ? st_now_s() : 0;
        struct ref_step t = step_of(n, j);
        if (t.x->in >= 0) {  /* the input node has nothing to pass back */
            if (t.x->fuse_relu)
                ref_relu_bwd(ref_state(t.x)->diff, ref_state(t.x)->diff, t.y, t.sz);
            output_gradient_low(n, t.x);
            if (ref_layers[t.x->kind].backward(&t))
                ref_deliver(n, t.x->in, j, t.dx);
            nn_grads_ready(n, j);
        }
        if (n->profiling)
            n->prof[n->x[j].kind] += st_now_s() - t0;
    }
    if (n->cfg.input_grad)
        memcpy(n->input_grad, ref_state(&n->x[0])->diff, nn_node_size(n, n->x[0].nd) * sizeof(float));
    return ST_OK;
}

static st_status ref_backward_from(st_net *n, const float *d_output)
{
    memcpy(ref_state(&n->x[n->nx - 1])->diff, d_output, st_net_output_size(n) * sizeof(float));
    return ref_backward(n);
}

static st_status ref_input_grad(st_net *n, float *out)
{
    memcpy(out, ref_state(&n->x[0])->diff, nn_node_size(n, n->x[0].nd) * sizeof(float));
    return ST_OK;
}

const struct nn_backend nn_reference_backend = {
    .name = "reference",
    .computes = ref_computes,
    .takes = ref_takes,
    .build = ref_build,
    .forward = ref_forward,
    .backward_from = ref_backward_from,
    .input_grad = ref_input_grad,
    .destroy = ref_destroy,
};
