/* Networks: the exec graph, parameters, initialisation, the loss, and the
 * reference (plain C) backend.  The oneDNN backend is in onednn.c. */
#define _GNU_SOURCE
#include "net.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double nn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t node_size(const st_net *n, const struct node *nd)
{
    return (size_t)n->batch * (size_t)nd->c * (size_t)nd->h * (size_t)nd->w;
}

/* ---------------------------------------------------------- denormals -- */

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FTZ_DAZ 0x8040u /* MXCSR flush-to-zero | denormals-are-zero */
static void set_mxcsr(bool on)
{
    unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? csr | FTZ_DAZ : csr & ~FTZ_DAZ);
}
#endif

bool st_nn_flush_denormals(bool on)
{
#if defined(__x86_64__) || defined(__i386__)
    set_mxcsr(on);
    /* The workers of every later parallel region are these threads. */
#pragma omp parallel
    set_mxcsr(on);
    return true;
#else
    (void)on;
    return false;
#endif
}

/* ------------------------------------------------------------ exec graph -- */

static int count_consumers(const st_model *m, int i)
{
    int c = 0;
    for (int j = 0; j < m->n; j++)
        c += (m->nodes[j].in == i) + (m->nodes[j].in2 == i);
    return c;
}

static struct xnode *emit(st_net *n, const struct node *nd, int in, int in2)
{
    struct xnode *x = &n->x[n->nx];
    memset(x, 0, sizeof *x);
    x->nd = nd;
    x->kind = nd->kind;
    x->in = in;
    x->in2 = in2;
    x->first_writer = -1;
    n->nx++;
    return x;
}

/* Model nodes -> exec nodes, with ReLU fusion and the pool/ReLU swap. */
static st_status build_graph(st_net *n)
{
    const st_model *m = n->model;
    int *map = calloc((size_t)m->n, sizeof *map);
    n->x = calloc((size_t)m->n, sizeof *n->x);
    if (!map || !n->x) {
        free(map);
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    }
    for (int i = 0; i < m->n; i++) {
        const struct node *nd = &m->nodes[i];
        int in = nd->in >= 0 ? map[nd->in] : -1, in2 = nd->in2 >= 0 ? map[nd->in2] : -1;
        const struct node *src = nd->in >= 0 ? &m->nodes[nd->in] : NULL;
        bool relu_after_weights = nd->kind == NODE_RELU && src &&
                                  (src->kind == NODE_CONV || src->kind == NODE_LINEAR) &&
                                  count_consumers(m, nd->in) == 1 && !n->x[in].fuse_relu;
        const struct node *next = i + 1 < m->n ? &m->nodes[i + 1] : NULL;
        bool pool_next = next && next->kind == NODE_MAXPOOL && next->in == i && count_consumers(m, i) == 1;
        if (relu_after_weights && pool_next) {
            int pool = n->nx;
            emit(n, next, in, -1);
            map[i] = pool;                       /* nothing else reads the ReLU */
            map[i + 1] = n->nx;
            emit(n, next, pool, -1)->kind = NODE_RELU;  /* a ReLU of the pool's shape */
            i++;
            continue;
        }
        if (relu_after_weights) {
            n->x[in].fuse_relu = true;
            map[i] = in;
            continue;
        }
        map[i] = n->nx;
        emit(n, nd, in, in2);
    }
    free(map);
    /* A gradient is wanted only where something learns upstream: mlp's
     * flatten of the input needs none, and without this its inner product
     * ran a backward-data pass (18% of mlp's step) for nobody. */
    bool *learns = calloc((size_t)n->nx, sizeof *learns);
    if (!learns)
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    for (int j = 0; j < n->nx; j++) {
        const struct xnode *x = &n->x[j];
        learns[j] = x->kind == NODE_INPUT ? n->cfg.input_grad
                                           : x->nd->w_count > 0 || x->nd->b_count > 0 || learns[x->in] ||
                                                 (x->in2 >= 0 && learns[x->in2]);
        int ins[2] = {x->in, x->in2};
        for (int k = 0; k < 2; k++) {
            if (ins[k] < 0)
                continue;
            struct xnode *p = &n->x[ins[k]];
            p->consumers++;
            p->first_writer = j;  /* highest index wins: it runs first backward */
            p->wants_diff = learns[ins[k]];
        }
    }
    free(learns);
    return ST_OK;
}

/* ------------------------------------------------------------ lifecycle -- */

st_status st_net_create(st_net **out, const st_model *m, const st_net_config *cfg)
{
    *out = NULL;
    if (!m || !cfg || cfg->batch < 1)
        return st_fail(ST_ERR_INVALID, "net: batch size must be at least 1");
    st_net *n = calloc(1, sizeof *n);
    if (!n)
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    n->model = m;
    n->cfg = *cfg;
    n->batch = cfg->batch;
    n->training = true;
    const size_t P = m->params ? m->params : 1, B = m->buffers ? m->buffers : 1;
    const size_t outs = (size_t)n->batch * (size_t)st_model_classes(m);
    n->params = aligned_alloc(64, (P * sizeof(float) + 63) / 64 * 64);
    n->buffers = calloc(B, sizeof(float));
    n->logits = calloc(outs, sizeof(float));
    n->dlogits = calloc(outs, sizeof(float));
    n->grads = cfg->grad_buffer;
    n->own_grads = !cfg->grad_buffer;
    if (n->own_grads)
        n->grads = calloc(P, sizeof(float));
    st_status st = ST_OK;
    if (!n->params || !n->buffers || !n->grads || !n->logits || !n->dlogits) {
        st = st_fail(ST_ERR_NOMEM, "net: out of memory for %zu parameters", m->params);
        goto fail;
    }
    memset(n->params, 0, P * sizeof(float));
    if (cfg->input_grad && !(n->input_grad = calloc(node_size(n, &m->nodes[0]), sizeof(float)))) {
        st = st_fail(ST_ERR_NOMEM, "net: out of memory");
        goto fail;
    }
    if ((st = build_graph(n)) != ST_OK)
        goto fail;
    st = cfg->backend == ST_BACKEND_REFERENCE ? ref_build(n) : onednn_build(n);
    if (st != ST_OK)
        goto fail;
    st_net_init(n, 0);
    *out = n;
    return ST_OK;
fail:
    st_net_destroy(n);
    return st;
}

void st_net_destroy(st_net *n)
{
    if (!n)
        return;
    if (n->cfg.backend == ST_BACKEND_REFERENCE)
        ref_destroy(n);
    else
        onednn_destroy(n);
    free(n->x);
    free(n->params);
    free(n->buffers);
    if (n->own_grads)
        free(n->grads);
    free(n->logits);
    free(n->dlogits);
    free(n->input_grad);
    free(n);
}

float *st_net_params(st_net *n, size_t *count)
{
    if (count)
        *count = n->model->params;
    return n->params;
}

float *st_net_grads(st_net *n, size_t *count)
{
    if (count)
        *count = n->model->params;
    return n->grads;
}

float *st_net_buffers(st_net *n, size_t *count)
{
    if (count)
        *count = n->model->buffers;
    return n->buffers;
}

void st_net_set_training(st_net *n, bool training) { n->training = training; }
void st_net_set_dropout_seed(st_net *n, uint64_t seed) { n->dropout_seed = seed; }

/* --------------------------------------------------------------- init -- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s, float bound)
{
    double u = (double)(splitmix64(s) >> 11) / (double)(1ull << 53);
    return (float)((2.0 * u - 1.0) * bound);
}

void st_net_init(st_net *n, uint64_t seed)
{
    const st_model *m = n->model;
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    for (int i = 0; i < m->n; i++) {
        const struct node *nd = &m->nodes[i];
        if (nd->kind == NODE_BATCHNORM) {
            for (size_t k = 0; k < nd->w_count; k++) {
                n->params[nd->w_off + k] = 1.0f;
                n->params[nd->b_off + k] = 0.0f;
                n->buffers[nd->buf_off + k] = 0.0f;
                n->buffers[nd->buf_off + nd->w_count + k] = 1.0f;
            }
        } else if (nd->w_count) {
            /* kaiming_uniform_(a=sqrt(5)) reduces to U(-1/sqrt(fan_in), +) */
            float bound = 1.0f / sqrtf((float)nd->fan_in);
            for (size_t k = 0; k < nd->w_count; k++)
                n->params[nd->w_off + k] = uniform(&s, bound);
            for (size_t k = 0; k < nd->b_count; k++)
                n->params[nd->b_off + k] = uniform(&s, bound);
        }
    }
}

bool dropout_keep(uint64_t seed, int node, size_t i, float p)
{
    uint64_t s = seed ^ ((uint64_t)node << 48) ^ (i * 0x9e3779b97f4a7c15ull);
    double u = (double)(splitmix64(&s) >> 40) / (double)(1ull << 24);
    return u >= p;
}

/* ------------------------------------------------------------- running -- */

st_status st_net_forward(st_net *n, const float *input)
{
    if (!input)
        return st_fail(ST_ERR_INVALID, "net: forward: NULL input");
    return n->cfg.backend == ST_BACKEND_REFERENCE ? ref_forward(n, input) : onednn_forward(n, input);
}

size_t st_net_output_size(const st_net *n)
{
    return (size_t)n->batch * (size_t)st_model_classes(n->model);
}

st_status st_net_output(st_net *n, float *out)
{
    memcpy(out, n->logits, st_net_output_size(n) * sizeof(float));
    return ST_OK;
}

st_status st_net_loss(st_net *n, const int *labels, float *loss, int *correct)
{
    const double t0 = n->profiling ? nn_now() : 0;
    const int k = st_model_classes(n->model);
    double total = 0;
    int right = 0;
    for (int i = 0; i < n->batch; i++) {
        if (labels[i] < 0 || labels[i] >= k)
            return st_fail(ST_ERR_INVALID, "loss: label %d of sample %d is not a class of this model "
                                           "(0..%d)", labels[i], i, k - 1);
        const float *z = n->logits + (size_t)i * k;
        float *dz = n->dlogits + (size_t)i * k;
        int best = 0;
        float zmax = z[0];
        for (int j = 1; j < k; j++)
            if (z[j] > zmax)
                zmax = z[j], best = j;
        /* One exp per logit (they were half of this function's time): the
         * softmax is e_j / sum, and e_j waits in dz. */
        double sum = 0;
        for (int j = 0; j < k; j++) {
            const double e = exp((double)z[j] - zmax);
            dz[j] = (float)e;
            sum += e;
        }
        total += zmax + log(sum) - z[labels[i]];
        right += best == labels[i];
        for (int j = 0; j < k; j++)
            dz[j] = (float)(((double)dz[j] / sum - (j == labels[i])) / n->batch);
    }
    if (loss)
        *loss = (float)(total / n->batch);
    if (correct)
        *correct = right;
    if (n->profiling)
        n->prof[NODE_KINDS + 1] += nn_now() - t0;
    return ST_OK;
}

st_status st_net_backward_from(st_net *n, const float *d_output)
{
    if (n->cfg.backend == ST_BACKEND_REFERENCE) {
        memcpy(n->x[n->nx - 1].diff.plain, d_output, st_net_output_size(n) * sizeof(float));
        return ref_backward(n);
    }
    st_status st = onednn_set_last_diff(n, d_output);
    return st != ST_OK ? st : onednn_backward(n);
}

st_status st_net_backward(st_net *n) { return st_net_backward_from(n, n->dlogits); }

st_status st_net_input_grad(st_net *n, float *d_input)
{
    if (!n->cfg.input_grad)
        return st_fail(ST_ERR_INVALID, "net: created without input_grad");
    if (n->cfg.backend != ST_BACKEND_REFERENCE)
        return onednn_input_grad(n, d_input);
    memcpy(d_input, n->x[0].diff.plain, node_size(n, n->x[0].nd) * sizeof(float));
    return ST_OK;
}

void st_net_describe(const st_net *n, FILE *f)
{
    for (int j = 0; j < n->nx; j++) {
        const struct xnode *x = &n->x[j];
        fprintf(f, "%3d %-10s line %-3d %s%s%s\n", j, node_kind_name(x->kind), x->nd->line, x->impl,
                x->fuse_relu ? " +relu" : "",
                x->in >= 0 && !n->x[x->in].wants_diff ? " (no gradient to its input)" : "");
    }
}

void st_net_profile_enable(st_net *n, bool on)
{
    n->profiling = on;
    memset(n->prof, 0, sizeof n->prof);
}

void st_net_profile_get(const st_net *n, st_net_profile *p)
{
    memset(p, 0, sizeof *p);
    for (int k = 0; k < NODE_KINDS; k++) {
        p->names[p->kinds] = node_kind_name((node_kind)k);
        p->seconds[p->kinds++] = n->prof[k];
    }
    p->names[p->kinds] = "reorders";
    p->seconds[p->kinds++] = n->prof[NODE_KINDS];
    p->names[p->kinds] = "loss";
    p->seconds[p->kinds++] = n->prof[NODE_KINDS + 1];
}

/* ------------------------------------------------- reference backend -- */

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

st_status ref_build(st_net *n)
{
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        const size_t sz = node_size(n, x->nd);
        const size_t in_sz = x->in >= 0 ? node_size(n, n->x[x->in].nd) : 0;
        snprintf(x->impl, sizeof x->impl, "reference");
        x->dst.plain = calloc(sz, sizeof(float));
        x->diff.plain = calloc(sz, sizeof(float));
        x->ref_diff_src = in_sz ? calloc(in_sz, sizeof(float)) : NULL;
        bool ok = x->dst.plain && x->diff.plain && (!in_sz || x->ref_diff_src);
        if (x->kind == NODE_MAXPOOL)
            ok = ok && (x->argmax = calloc(sz, sizeof(int)));
        if (x->kind == NODE_BATCHNORM)
            ok = ok && (x->mean = calloc((size_t)x->nd->c, sizeof(float))) &&
                 (x->var = calloc((size_t)x->nd->c, sizeof(float)));
        if (x->kind == NODE_DROPOUT)
            ok = ok && (x->mask = calloc(sz, 1));
        if (!ok)
            return st_fail(ST_ERR_NOMEM, "net: out of memory for layer %d", j);
    }
    return ST_OK;
}

void ref_destroy(st_net *n)
{
    for (int j = 0; n->x && j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        free(x->dst.plain);
        free(x->diff.plain);
        free(x->ref_diff_src);
        free(x->argmax);
        free(x->mean);
        free(x->var);
        free(x->mask);
    }
}

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

static void ref_forward_node(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    const float *src = x->in >= 0 ? n->x[x->in].dst.plain : NULL;
    const struct node *s = x->in >= 0 ? n->x[x->in].nd : NULL;
    float *y = x->dst.plain;
    const size_t sz = node_size(n, nd);
    switch (x->kind) {
    case NODE_INPUT: memcpy(y, n->input, sz * sizeof(float)); break;
    case NODE_CONV: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_conv_fwd(y, src, n->params + nd->w_off, nd->bias ? n->params + nd->b_off : NULL, &cs);
        break;
    }
    case NODE_LINEAR:
        ref_linear_fwd(y, src, n->params + nd->w_off, nd->bias ? n->params + nd->b_off : NULL, n->batch,
                       s->c * s->h * s->w, nd->c);
        break;
    case NODE_RELU: ref_relu_fwd(y, src, sz); break;
    case NODE_MAXPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_maxpool_fwd(y, x->argmax, src, &cs);
        break;
    }
    case NODE_AVGPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_avgpool_fwd(y, src, &cs);
        break;
    }
    case NODE_BATCHNORM: {
        const float *g = n->params + nd->w_off, *b = n->params + nd->b_off;
        if (n->training) {
            ref_bn_fwd_train(y, x->mean, x->var, src, g, b, n->batch, nd->c, nd->h * nd->w, 1e-5f);
            update_running_stats(n, nd, x->mean, x->var);
        } else {
            const float *rm = n->buffers + nd->buf_off;
            ref_bn_fwd_infer(y, src, g, b, rm, rm + nd->c, n->batch, nd->c, nd->h * nd->w, 1e-5f);
        }
        break;
    }
    case NODE_DROPOUT: {
        const float scale = 1.0f / (1.0f - nd->drop);
        for (size_t i = 0; i < sz; i++) {
            x->mask[i] = !n->training || dropout_keep(n->dropout_seed, j, i, nd->drop);
            y[i] = n->training ? (x->mask[i] ? src[i] * scale : 0.0f) : src[i];
        }
        break;
    }
    case NODE_FLATTEN: memcpy(y, src, sz * sizeof(float)); break;
    case NODE_ADD: {
        const float *b = n->x[x->in2].dst.plain;
        for (size_t i = 0; i < sz; i++)
            y[i] = src[i] + b[i];
        break;
    }
    case NODE_KINDS: break;
    }
    if (x->fuse_relu)
        ref_relu_fwd(y, y, sz);
}

st_status ref_forward(st_net *n, const float *input)
{
    n->input = input;
    for (int j = 0; j < n->nx; j++) {
        double t0 = n->profiling ? nn_now() : 0;
        ref_forward_node(n, j);
        if (n->profiling)
            n->prof[n->x[j].kind] += nn_now() - t0;
    }
    memcpy(n->logits, n->x[n->nx - 1].dst.plain, st_net_output_size(n) * sizeof(float));
    return ST_OK;
}

/* Hand `grad` (the gradient w.r.t. node p's output, from consumer j) to p. */
static void ref_deliver(st_net *n, int p, int j, const float *grad)
{
    struct xnode *px = &n->x[p];
    if (!px->wants_diff)
        return;
    const size_t sz = node_size(n, px->nd);
    if (px->first_writer == j) {
        memcpy(px->diff.plain, grad, sz * sizeof(float));
    } else {
        for (size_t i = 0; i < sz; i++)
            px->diff.plain[i] += grad[i];
    }
}

static void ref_backward_node(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    const struct node *nd = x->nd;
    if (x->kind == NODE_INPUT)
        return;
    const struct xnode *px = &n->x[x->in];
    const struct node *s = px->nd;
    const float *src = px->dst.plain;
    float *dy = x->diff.plain, *dx = px->wants_diff ? x->ref_diff_src : NULL;
    const size_t sz = node_size(n, nd);
    if (x->fuse_relu)
        ref_relu_bwd(dy, dy, x->dst.plain, sz);
    switch (x->kind) {
    case NODE_CONV: {
        struct conv_shape cs = window_shape(n, x, s);
        ref_conv_bwd(dx, n->grads + nd->w_off, nd->bias ? n->grads + nd->b_off : NULL, dy, src,
                     n->params + nd->w_off, &cs);
        break;
    }
    case NODE_LINEAR:
        ref_linear_bwd(dx, n->grads + nd->w_off, nd->bias ? n->grads + nd->b_off : NULL, dy, src,
                       n->params + nd->w_off, n->batch, s->c * s->h * s->w, nd->c);
        break;
    case NODE_RELU:
        if (dx)
            ref_relu_bwd(dx, dy, src, sz);
        break;
    case NODE_MAXPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        if (dx)
            ref_maxpool_bwd(dx, dy, x->argmax, &cs);
        break;
    }
    case NODE_AVGPOOL: {
        struct conv_shape cs = window_shape(n, x, s);
        if (dx)
            ref_avgpool_bwd(dx, dy, &cs);
        break;
    }
    case NODE_BATCHNORM:
        ref_bn_bwd(dx, n->grads + nd->w_off, n->grads + nd->b_off, dy, src, x->mean, x->var,
                   n->params + nd->w_off, n->batch, nd->c, nd->h * nd->w, 1e-5f);
        break;
    case NODE_DROPOUT: {
        const float scale = n->training ? 1.0f / (1.0f - nd->drop) : 1.0f;
        for (size_t i = 0; dx && i < sz; i++)
            dx[i] = x->mask[i] ? dy[i] * scale : 0.0f;
        break;
    }
    case NODE_FLATTEN:
        if (dx)
            memcpy(dx, dy, sz * sizeof(float));
        break;
    case NODE_ADD:
        ref_deliver(n, x->in, j, dy);
        ref_deliver(n, x->in2, j, dy);
        return;
    default: break;
    }
    if (dx)
        ref_deliver(n, x->in, j, dx);
}

st_status ref_backward(st_net *n)
{
    for (int j = n->nx - 1; j >= 0; j--) {
        double t0 = n->profiling ? nn_now() : 0;
        ref_backward_node(n, j);
        if (n->profiling)
            n->prof[n->x[j].kind] += nn_now() - t0;
    }
    if (n->cfg.input_grad)
        memcpy(n->input_grad, n->x[0].diff.plain, node_size(n, n->x[0].nd) * sizeof(float));
    return ST_OK;
}
