/* Networks: the exec graph, parameters, initialisation, the loss, the
 * profile, and the choice of backend (ref_backend.c or onednn_*.c), which
 * runs the graph behind struct nn_backend. */
#define _GNU_SOURCE
#include "net.h"
#include "kernels/simd.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
                                  (src->kind == NODE_CONV || src->kind == NODE_LINEAR ||
                                   src->kind == NODE_BATCHNORM || src->kind == NODE_ADD) &&
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

/* The one place the loss is chosen: fused with the head where the backend
 * can (no [rows, vocabulary] logits held: 2.5 GB a copy for gpt2 at its
 * recipe's batch), whole logits otherwise and under tuning.unfused_loss. */
static bool fuses_loss(const st_net *n)
{
    const st_model *m = n->model;
    return n->backend->loss && m->n > 0 && m->nodes[m->n - 1].kind == NODE_HEAD && !n->cfg.tuning.unfused_loss;
}

/* The net's data: parameters, buffers, gradients (unless the caller's),
 * each row's loss, the logits and their gradient (unless the loss is
 * fused), and the input's gradient where asked. */
static st_status allocate_data(st_net *n)
{
    const st_model *m = n->model;
    const size_t P = m->params ? m->params : 1, B = m->buffers ? m->buffers : 1;
    const size_t rows = (size_t)n->batch * (size_t)st_model_positions(m), outs = rows * (size_t)st_model_classes(m);
    n->params = nn_lines_alloc(P, sizeof(float), true);
    n->buffers = calloc(B, sizeof(float));
    if (!n->fused_loss) {
        n->logits = calloc(outs, sizeof(float));
        n->dlogits = calloc(outs, sizeof(float));
    }
    n->loss_rows = calloc(rows, sizeof(double));
    n->grads = n->cfg.grad_buffer;
    n->own_grads = !n->cfg.grad_buffer;
    if (n->own_grads)
        n->grads = nn_lines_alloc(P, sizeof(float), true);
    if (!n->params || !n->buffers || !n->grads || (!n->fused_loss && (!n->logits || !n->dlogits)) || !n->loss_rows)
        return st_fail(ST_ERR_NOMEM, "net: out of memory for %zu parameters", m->params);
    if (n->cfg.input_grad && !(n->input_grad = calloc(nn_node_size(n, &m->nodes[0]), sizeof(float))))
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    return ST_OK;
}

st_status nn_runnable(const st_net *n)
{
    return n->params ? ST_OK : st_fail(ST_ERR_INVALID, "net: built as a plan only (st_net_config.plan_only): "
                                                       "nothing runs on it");
}

st_status nn_net_create(st_net **out, const st_model *m, const st_net_config *cfg, const struct nn_backend *backend)
{
    *out = NULL;
    st_net *n = calloc(1, sizeof *n);
    if (!n)
        return st_fail(ST_ERR_NOMEM, "net: out of memory");
    n->model = m;
    n->cfg = *cfg;
    st_status st;
    const size_t per_sample = model_largest_activation(m);
    if ((size_t)cfg->batch > MODEL_MAX_BATCH_TENSOR / per_sample) {
        free(n);
        return st_fail(ST_ERR_INVALID, "net: batch size %d: an activation of %zu elements a sample would need %zu x %zu, "
                                       "more than one tensor may hold (%zu); use a smaller --batch-size", cfg->batch,
                       per_sample, (size_t)cfg->batch, per_sample, MODEL_MAX_BATCH_TENSOR);
    }
    n->backend = backend;
    n->batch = cfg->batch;
    n->training = true;
    n->fused_loss = fuses_loss(n);
    if ((st = build_graph(n)) != ST_OK)
        goto fail;
    /* the contract every backend builds (st_net_config.plan_only: all
     * there is, with no data behind it) */
    nn_assign_roles(n);
    nn_plan_precision(n);
    if (cfg->plan_only) {
        *out = n;
        return ST_OK;
    }
    if ((st = allocate_data(n)) != ST_OK || (st = n->backend->build(n)) != ST_OK)
        goto fail;
    if (n->cfg.tuning.verbose)
        st_net_describe(n, stderr);
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
    if (n->backend)
        n->backend->destroy(n);
    nn_copies_free(n);
    free(n->x);
    free(n->params);
    free(n->buffers);
    if (n->own_grads)
        free(n->grads);
    free(n->logits);
    free(n->dlogits);
    free(n->loss_rows);
    free(n->input_grad);
    free(n);
}

/* Whoever takes a writable pointer may change the parameters: the bf16
 * copies are written again before the next forward pass. */
float *st_net_params(st_net *n, size_t *count)
{
    if (count)
        *count = n->model->params;
    n->copies_stale = true;
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

void st_net_on_grads_ready(st_net *n, st_grads_ready_fn fn, void *ctx)
{
    n->grads_ready = fn;
    n->grads_ready_ctx = ctx;
}
void st_net_set_dropout_seed(st_net *n, uint64_t seed) { n->dropout_seed = seed; }

/* --------------------------------------------------------------- init -- */

static float uniform(uint64_t *s, float bound)
{
    double u = (double)(nn_splitmix64(s) >> 11) / (double)(1ull << 53);
    return (float)((2.0 * u - 1.0) * bound);
}

/* Layers without parameters. */
static void init_nothing(st_net *n, const struct node *nd, uint64_t *rng)
{
    (void)n, (void)nd, (void)rng;
}

/* PyTorch's default for conv and linear: kaiming_uniform_(a=sqrt(5)) reduces
 * to U(-1/sqrt(fan_in), +), for the bias too. */
static void init_kaiming(st_net *n, const struct node *nd, uint64_t *rng)
{
    float bound = 1.0f / sqrtf((float)nd->fan_in);
    for (size_t k = 0; k < nd->w_count; k++)
        n->params[nd->w_off + k] = uniform(rng, bound);
    for (size_t k = 0; k < nd->b_count; k++)
        n->params[nd->b_off + k] = uniform(rng, bound);
}

/* N(0, std^2) by Box-Muller, from the same stream. */
static float normal(uint64_t *s, float std)
{
    double u1 = ((double)(nn_splitmix64(s) >> 11) + 1.0) / (double)(1ull << 53);  /* (0, 1] */
    double u2 = (double)(nn_splitmix64(s) >> 11) / (double)(1ull << 53);
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* GPT-2's initialisation, as nanoGPT's: N(0, 0.02) weights, zero biases,
 * and a residual branch's last projection (a linear whose consumer is an
 * add) at 0.02 / sqrt(2 x blocks), so the residual stream's variance does
 * not grow with depth. */
static void init_gpt_linear(st_net *n, const struct node *nd, uint64_t *rng)
{
    const st_model *m = n->model;
    int blocks = 0, self = (int)(nd - m->nodes);
    bool residual = false;
    for (int i = 0; i < m->n; i++) {
        blocks += m->nodes[i].kind == NODE_ATTENTION;
        residual |= m->nodes[i].kind == NODE_ADD && m->nodes[i].in == self;
    }
    const float std = residual && blocks ? 0.02f / sqrtf(2.0f * (float)blocks) : 0.02f;
    for (size_t k = 0; k < nd->w_count; k++)
        n->params[nd->w_off + k] = normal(rng, std);
    for (size_t k = 0; k < nd->b_count; k++)
        n->params[nd->b_off + k] = 0.0f;
}

/* Linear layers: PyTorch's default on images and features, GPT-2's on sequences. */
static void init_linear(st_net *n, const struct node *nd, uint64_t *rng)
{
    if (nd->t > 0)
        init_gpt_linear(n, nd, rng);
    else
        init_kaiming(n, nd, rng);
}

/* Token and position tables: N(0, 0.02), as GPT-2's. */
static void init_embed(st_net *n, const struct node *nd, uint64_t *rng)
{
    for (size_t k = 0; k < nd->w_count + nd->b_count; k++)
        n->params[nd->w_off + k] = normal(rng, 0.02f);
}

/* Layer norm: gamma 1, beta 0. */
static void init_ln(st_net *n, const struct node *nd, uint64_t *rng)
{
    (void)rng;
    for (size_t k = 0; k < nd->w_count; k++) {
        n->params[nd->w_off + k] = 1.0f;
        n->params[nd->b_off + k] = 0.0f;
    }
}

/* Batch norm: gamma 1, beta 0, running mean 0 and variance 1. */
static void init_bn(st_net *n, const struct node *nd, uint64_t *rng)
{
    (void)rng;
    for (size_t k = 0; k < nd->w_count; k++) {
        n->params[nd->w_off + k] = 1.0f;
        n->params[nd->b_off + k] = 0.0f;
        n->buffers[nd->buf_off + k] = 0.0f;
        n->buffers[nd->buf_off + nd->w_count + k] = 1.0f;
    }
}

void st_net_init(st_net *n, uint64_t seed)
{
    static void (*const init[])(st_net *, const struct node *, uint64_t *) = {
#define INIT(KIND, keyword, parse, init_fn, ...) [NODE_##KIND] = init_fn,
        NN_LAYER_TABLE(INIT)
#undef INIT
    };
    _Static_assert(sizeof init / sizeof *init == NODE_KINDS, "an init per layer kind");
    const st_model *m = n->model;
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;  /* one stream, layer after layer */
    for (int i = 0; i < m->n; i++)
        init[m->nodes[i].kind](n, &m->nodes[i], &s);
    n->copies_stale = true;
}

/* ------------------------------------------------------------- running -- */

/* Token ids index the embedding table: one out of range would read (and
 * later write) outside it. */
static st_status check_tokens(const st_net *n, const int32_t *ids)
{
    const struct node *in = &n->model->nodes[0];
    const int vocab = n->model->nodes[1].vocab;
    const size_t count = (size_t)n->batch * (size_t)in->t;
    for (size_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return st_fail(ST_ERR_INVALID, "net: token %d at position %zu of sample %zu is outside the "
                                           "vocabulary (0..%d)", ids[i], i % (size_t)in->t, i / (size_t)in->t,
                           vocab - 1);
    return ST_OK;
}

st_status st_net_forward(st_net *n, const void *input)
{
    if (!input)
        return st_fail(ST_ERR_INVALID, "net: forward: NULL input");
    if (nn_runnable(n) != ST_OK)
        return ST_ERR_INVALID;
    if (n->model->nodes[0].tokens) {
        st_status st = check_tokens(n, input);
        if (st != ST_OK)
            return st;
    }
    nn_copies_refresh(n);
    return n->backend->forward(n, input);
}

size_t st_net_output_size(const st_net *n)
{
    return (size_t)n->batch * (size_t)st_model_positions(n->model) * (size_t)st_model_classes(n->model);
}

st_status st_net_output(st_net *n, float *out)
{
    if (nn_runnable(n) != ST_OK)
        return ST_ERR_INVALID;
    if (n->fused_loss)
        return n->backend->output(n, out);
    memcpy(out, n->logits, st_net_output_size(n) * sizeof(float));
    return ST_OK;
}

st_status st_net_backward_from(st_net *n, const float *d_output)
{
    if (!d_output)
        return st_fail(ST_ERR_INVALID, "net: backward from a NULL gradient");
    if (nn_runnable(n) != ST_OK)
        return ST_ERR_INVALID;
    return n->backend->backward_from(n, d_output);
}

/* NULL to a fused loss's backend: the loss has made the head's gradients. */
st_status st_net_backward(st_net *n)
{
    return nn_runnable(n) == ST_OK ? n->backend->backward_from(n, n->dlogits) : ST_ERR_INVALID;
}

st_status st_net_input_grad(st_net *n, float *d_input)
{
    if (!n->cfg.input_grad)
        return st_fail(ST_ERR_INVALID, "net: created without input_grad");
    return n->backend->input_grad(n, d_input);
}

void st_net_gradient_memory_get(const st_net *n, st_net_gradient_memory *m)
{
    *m = (st_net_gradient_memory){0};
    if (n->backend->gradient_memory && n->params)
        n->backend->gradient_memory(n, m);
}

void st_net_describe(const st_net *n, FILE *f)
{
    for (int j = 0; j < n->nx; j++) {
        const struct xnode *x = &n->x[j];
        fprintf(f, "%3d %-10s line %-3d %-4s %s%s%s\n", j, node_kind_name(x->kind), x->nd->line,
                st_dtype_name(x->compute), x->impl,
                x->fuse_relu ? " +relu" : "",
                x->in >= 0 && !n->x[x->in].wants_diff ? " (no gradient to its input)" : "");
    }
}

void st_net_profile_enable(st_net *n, bool on)
{
    n->profiling = on;
    memset(n->prof, 0, sizeof n->prof);
}

_Static_assert(NODE_KINDS + 2 <= ST_NET_PROFILE_MAX, "st_net_profile holds every layer kind, reorders and loss");

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

/* ------------------------------------------------------ what it runs in -- */

void st_net_counters_get(const st_net *n, st_net_counters *c) { *c = n->counters; }

void st_net_counters_reset(st_net *n) { memset(&n->counters, 0, sizeof n->counters); }

/* Layer i is exec node i + 1: node 0 is the input, which computes nothing. */
int st_net_layers(const st_net *n) { return n->nx - 1; }

st_dtype st_net_layer_compute(const st_net *n, int layer)
{
    return layer >= 0 && layer < n->nx - 1 ? n->x[layer + 1].compute : ST_DTYPE_F32;
}

int st_net_lowp_layers(const st_net *n)
{
    int k = 0;
    for (int i = 0; i < st_net_layers(n); i++)
        k += st_net_layer_compute(n, i) != ST_DTYPE_F32;
    return k;
}

void st_net_describe_precision(const st_net *n, FILE *f)
{
    fprintf(f, "%-5s %-10s %-5s %-8s %s\n", "layer", "kind", "line", "compute", "output");
    for (int j = 1; j < n->nx; j++) {
        const struct xnode *x = &n->x[j];
        fprintf(f, "%-5d %-10s %-5d %-8s %s%s\n", j, node_kind_name(x->kind), x->nd->line, st_dtype_name(x->compute),
                st_dtype_name(x->stored), x->fuse_relu ? " (relu fused)" : "");
    }
    fprintf(f, "%d of %d layers compute in %s\n", st_net_lowp_layers(n), st_net_layers(n),
            st_dtype_name(n->cfg.precision != ST_DTYPE_F32 ? n->cfg.precision : ST_DTYPE_BF16));
}
