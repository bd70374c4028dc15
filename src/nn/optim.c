/* SGD (momentum, Nesterov, weight decay) and AdamW, as torch.optim defines them. */
#include "shmtrain/optim.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/copy_layouts.h"
#include "kernels/simd.h"

struct st_optim {
    st_optim_config cfg;
    size_t count;
    float *state;      /* SGD: momentum [count]; AdamW: m [count] then v [count] */
    size_t state_count;
    uint64_t steps;
    const st_weight_copy *copies;  /* borrowed (st_optim_set_copies) */
    int ncopies;
    size_t *bounds;  /* nchunks + 1 chunk starts fitted to the copies (chunk_bounds), or NULL: every CHUNK */
    size_t nchunks;
};

st_status st_optim_create(st_optim **out, size_t count, const st_optim_config *cfg)
{
    *out = NULL;
    if (cfg->kind != ST_OPTIM_SGD && cfg->kind != ST_OPTIM_ADAMW)
        return st_fail(ST_ERR_INVALID, "--optimizer: unknown kind %d", (int)cfg->kind);
    if (cfg->momentum < 0 || cfg->momentum >= 1 || cfg->weight_decay < 0)
        return st_fail(ST_ERR_INVALID, "--momentum must be in [0, 1) and --weight-decay >= 0");
    if (cfg->nesterov && cfg->momentum <= 0)
        return st_fail(ST_ERR_INVALID, "--nesterov needs a momentum > 0");
    st_optim *o = calloc(1, sizeof *o);
    if (!o)
        return st_fail(ST_ERR_NOMEM, "optimizer: out of memory");
    o->cfg = *cfg;
    if (o->cfg.kind == ST_OPTIM_ADAMW) {
        if (!o->cfg.beta1) o->cfg.beta1 = 0.9f;
        if (!o->cfg.beta2) o->cfg.beta2 = 0.999f;
        if (!o->cfg.eps) o->cfg.eps = 1e-8f;
    }
    o->count = count;
    o->state_count = cfg->kind == ST_OPTIM_ADAMW ? 2 * count : (cfg->momentum > 0 ? count : 0);
    if (o->state_count && !(o->state = nn_lines_alloc(o->state_count, sizeof(float), true))) {
        size_t want = o->state_count;
        free(o);
        return st_fail(ST_ERR_NOMEM, "optimizer: out of memory for %zu floats of state", want);
    }
    *out = o;
    return ST_OK;
}

void st_optim_destroy(st_optim *o)
{
    if (!o)
        return;
    free(o->state);
    free(o->bounds);
    free(o);
}

/* The update is a stream over four arrays (parameters, gradients, momentum
 * and the result), bound by memory traffic: one loop per case without
 * branches inside so it vectorises, built for several ISAs (the library is
 * compiled for baseline x86-64), and split over the OpenMP threads when the
 * model is large enough to pay for the fork.  Element-wise, so the result
 * does not depend on the thread count. */
#define CHUNK 16384

ST_MULTIVERSION
static void sgd_plain(float *restrict p, const float *restrict g, size_t n, float lr, float wd)
{
    for (size_t i = 0; i < n; i++)
        p[i] -= lr * (g[i] + wd * p[i]);
}

ST_MULTIVERSION
static void sgd_momentum(float *restrict p, const float *restrict g, float *restrict buf, size_t n, float lr,
                         float wd, float mu, bool first, bool nesterov)
{
    if (first) {  /* torch: the first step copies the gradient into the buffer */
        for (size_t i = 0; i < n; i++) {
            const float d = g[i] + wd * p[i];
            buf[i] = d;
            p[i] -= lr * (nesterov ? d + mu * d : d);
        }
    } else if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            const float d = g[i] + wd * p[i], b = mu * buf[i] + d;
            buf[i] = b;
            p[i] -= lr * (d + mu * b);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const float b = mu * buf[i] + (g[i] + wd * p[i]);
            buf[i] = b;
            p[i] -= lr * b;
        }
    }
}

/* The copies' elements among parameters [lo, lo + n), just updated and still
 * in cache. */
static void write_copies(const st_optim *o, const float *restrict p, size_t lo, size_t n)
{
    for (int k = 0; k < o->ncopies; k++) {
        const st_weight_copy *c = &o->copies[k];
        const size_t from = lo > c->offset ? lo : c->offset;
        const size_t to = lo + n < c->offset + c->count ? lo + n : c->offset + c->count;
        if (from < to)
            nn_copy_write(c, p + c->offset, from - c->offset, to - c->offset);
    }
}

/* The copy in a layout of more than one element a unit (nn_copy_unit)
 * that holds parameter at, or NULL; *next: where the next such copy
 * begins. */
static const st_weight_copy *grouped_copy_at(const st_optim *o, size_t at, size_t *next)
{
    *next = o->count;
    for (int k = 0; k < o->ncopies; k++) {
        const st_weight_copy *c = &o->copies[k];
        if (nn_copy_unit(c) == 1)
            continue;
        if (c->offset <= at && at < c->offset + c->count)
            return c;
        if (c->offset > at && c->offset < *next)
            *next = c->offset;
    }
    return NULL;
}

/* Chunks of about CHUNK parameters, those inside a copy in a pair layout
 * whole units of it (64 of its rows), so that every chunk writes its part
 * of the copy in whole cache lines.  The update is element-wise: where the
 * chunks begin changes no bit. */
static void chunk_bounds(st_optim *o)
{
    free(o->bounds);
    o->bounds = NULL;
    size_t cap = o->count / CHUNK + 2, n = 0, next;
    for (int k = 0; k < o->ncopies; k++)
        cap += 2 * (o->copies[k].count / CHUNK + 2);
    size_t *b = malloc(cap * sizeof *b);
    if (!b)
        return;  /* every CHUNK: the same bits, the copies' cut groups written element by element */
    b[0] = 0;
    for (size_t at = 0; at < o->count && n + 1 < cap; at = b[n]) {
        b[n++] = at;
        const st_weight_copy *c = grouped_copy_at(o, at, &next);
        if (c) {
            const size_t unit = nn_copy_unit(c), step = unit * (CHUNK > unit ? CHUNK / unit : 1);
            const size_t end = c->offset + c->count, to = c->offset + ((at - c->offset) / step + 1) * step;
            b[n] = to < end ? to : end;
        } else {
            b[n] = at + CHUNK < next ? at + CHUNK : next;
        }
    }
    if (b[n] != o->count) {  /* cap is a bound, never reached: should it be, every CHUNK as above */
        free(b);
        return;
    }
    o->bounds = b;
    o->nchunks = n;
}

static size_t chunk_count(const st_optim *o) { return o->bounds ? o->nchunks : (o->count + CHUNK - 1) / CHUNK; }

/* Chunk k's first parameter, and its length in *n. */
static size_t chunk_at(const st_optim *o, size_t k, size_t *n)
{
    const size_t lo = o->bounds ? o->bounds[k] : k * CHUNK;
    const size_t hi = o->bounds ? o->bounds[k + 1] : (o->count - lo < CHUNK ? o->count : lo + CHUNK);
    *n = hi - lo;
    return lo;
}

void st_optim_set_copies(st_optim *o, const st_weight_copy *copies, int count)
{
    o->copies = copies;
    o->ncopies = copies ? count : 0;
    chunk_bounds(o);
}

/* A clip's scale reaches the update through a piece of scaled gradients
 * in the thread's cache: each product rounded and stored, as scaling them
 * in place left them (the same bits), without a pass over all of them
 * (that pass and the norm's, on one thread, took 3-8% of gpt2's bf16
 * step in the trainer: docs/benchmarks.md 0s). */
enum { SCALED = 4096 };

ST_MULTIVERSION
static void scale_into(float *restrict dst, const float *restrict g, size_t n, float gs)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = g[i] * gs;
}

/* g's piece [at, at + n) as the update reads it. */
static const float *piece(const float *g, size_t at, size_t n, float gs, float *buf)
{
    if (gs == 1.0f)
        return g + at;
    scale_into(buf, g + at, n, gs);
    return buf;
}

ST_MULTIVERSION
static void adamw_chunk(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                        float lr, float wd, float b1, float b2, float c1, float c2, float eps,
                        const uint8_t *restrict decays)
{
    for (size_t i = 0; i < n; i++) {
        p[i] *= 1.0f - lr * wd * (decays ? (float)decays[i] : 1.0f);
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] / c1) / (sqrtf(v[i]) / c2 + eps);
    }
}

/* A rule's constants for one step, and its moments (NULL: none). */
struct update {
    float lr, wd, mu, b1, b2, c1, c2, eps;
    bool first, nesterov;
    float *m, *v;
    const uint8_t *decays;
};

/* One rule over the parameters' piece [at, at + k), g its gradient as the update reads it. */
typedef void update_rule(const struct update *u, float *restrict p, const float *restrict g, size_t at, size_t k);

static void sgd_piece(const struct update *u, float *restrict p, const float *restrict g, size_t at, size_t k)
{
    if (u->m)
        sgd_momentum(p + at, g, u->m + at, k, u->lr, u->wd, u->mu, u->first, u->nesterov);
    else
        sgd_plain(p + at, g, k, u->lr, u->wd);
}

static void adamw_piece(const struct update *u, float *restrict p, const float *restrict g, size_t at, size_t k)
{
    adamw_chunk(p + at, g, u->m + at, u->v + at, k, u->lr, u->wd, u->b1, u->b2, u->c1, u->c2, u->eps,
                u->decays ? u->decays + at : NULL);
}

/* Every rule's walk: the chunks over the threads (each writing its weight
 * copies while its parameters are in cache), each chunk in pieces of the
 * scaled gradient. */
static void each_piece(st_optim *o, float *restrict p, const float *restrict g, float gs, update_rule *rule,
                       const struct update *u)
{
    const size_t chunks = chunk_count(o);
#pragma omp parallel for schedule(static) if (chunks > 4)
    for (size_t c = 0; c < chunks; c++) {
        size_t n;
        const size_t lo = chunk_at(o, c, &n);
        float buf[SCALED];
        for (size_t at = lo; at < lo + n; at += SCALED) {
            const size_t k = lo + n - at < SCALED ? lo + n - at : SCALED;
            rule(u, p, piece(g, at, k, gs, buf), at, k);
        }
        write_copies(o, p, lo, n);
    }
}

static void sgd_step(st_optim *o, float *restrict p, const float *restrict g, float gs, float lr)
{
    const struct update u = {.lr = lr, .wd = o->cfg.weight_decay, .mu = o->cfg.momentum, .first = o->steps == 0,
                             .nesterov = o->cfg.nesterov, .m = o->state};
    each_piece(o, p, g, gs, sgd_piece, &u);
}

static void adamw_step(st_optim *o, float *restrict p, const float *restrict g, float gs, float lr)
{
    const double t = (double)(o->steps + 1);
    const float b1 = o->cfg.beta1, b2 = o->cfg.beta2;
    const struct update u = {.lr = lr, .wd = o->cfg.weight_decay, .b1 = b1, .b2 = b2,
                             .c1 = (float)(1.0 - pow(b1, t)), .c2 = (float)sqrt(1.0 - pow(b2, t)),
                             .eps = o->cfg.eps, .m = o->state, .v = o->state + o->count,
                             .decays = o->cfg.decay_mask};
    each_piece(o, p, g, gs, adamw_piece, &u);
}

void st_optim_step_scaled(st_optim *o, float *params, const float *grads, float grad_scale, float lr)
{
    if (o->cfg.kind == ST_OPTIM_ADAMW)
        adamw_step(o, params, grads, grad_scale, lr);
    else
        sgd_step(o, params, grads, grad_scale, lr);
    o->steps++;
}

void st_optim_step(st_optim *o, float *params, const float *grads, float lr)
{
    st_optim_step_scaled(o, params, grads, 1.0f, lr);
}

float *st_optim_state(st_optim *o, size_t *count)
{
    if (count)
        *count = o->state_count;
    return o->state;
}

uint64_t st_optim_steps(const st_optim *o) { return o->steps; }
void st_optim_set_steps(st_optim *o, uint64_t steps) { o->steps = steps; }

/* The sum of squares runs every step (it also catches NaN/Inf gradients),
 * so it must not be one long dependent chain of double additions (that
 * latency-bound loop was a tenth of mlp's step).  A 16-float vector of
 * partial sums per block of 4096, the blocks' lanes added in double in
 * block order: GCC's vector type keeps the lane order on every ISA, so
 * every clone gives the same bits; the blocks' vectors are made by all the
 * threads, GROUP blocks at a time, and added by one, so any thread count
 * gives them too. */
typedef float float16_vec __attribute__((vector_size(64)));
enum { BLOCK = 4096, GROUP = 256 };

/* Written out, not returned: a 64-byte vector returns in a register only
 * where the clone has AVX-512, and the caller is compiled without it. */
ST_MULTIVERSION
static void block_squares(float *restrict out, const float *restrict g, size_t n)
{
    float16_vec acc = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float16_vec v;
        memcpy(&v, g + i, sizeof v);
        acc += v * v;
    }
    for (int l = 0; i < n; i++, l++)
        acc[l] += g[i] * g[i];
    memcpy(out, &acc, sizeof acc);
}

static double sum_of_squares(const float *restrict g, size_t n)
{
    const size_t blocks = (n + BLOCK - 1) / BLOCK;
    double sum = 0;
    for (size_t b0 = 0; b0 < blocks; b0 += GROUP) {
        const size_t group = blocks - b0 < GROUP ? blocks - b0 : GROUP;
        float acc[GROUP * 16];
#pragma omp parallel for schedule(static) if (group > 16)
        for (size_t b = 0; b < group; b++) {
            const size_t at = (b0 + b) * BLOCK;
            block_squares(acc + b * 16, g + at, n - at < BLOCK ? n - at : BLOCK);
        }
        for (size_t b = 0; b < group * 16; b++)
            sum += acc[b];
    }
    return sum;
}

float st_grad_norm(const float *grads, size_t count) { return (float)sqrt(sum_of_squares(grads, count)); }

float st_clip_scale(float norm, float max_norm)
{
    return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

float st_clip_grad_norm(float *grads, size_t count, float max_norm)
{
    const float norm = st_grad_norm(grads, count), scale = st_clip_scale(norm, max_norm);
    if (scale != 1.0f)
#pragma omp parallel for schedule(static) if (count > 4 * CHUNK)
        for (size_t i = 0; i < count; i++)
            grads[i] *= scale;
    return norm;
}

float st_schedule_lr(const st_schedule *s, uint64_t step)
{
    if (s->warmup && step < s->warmup)
        return s->lr * (float)(step + 1) / (float)s->warmup;
    uint64_t t = step - s->warmup;
    switch (s->kind) {
    case ST_SCHED_STEP: {
        float gamma = s->gamma > 0 ? s->gamma : 0.1f;
        return s->step_size ? s->lr * powf(gamma, (float)(t / s->step_size)) : s->lr;
    }
    case ST_SCHED_COSINE: {
        uint64_t span = s->total > s->warmup ? s->total - s->warmup : 1;
        double frac = t >= span ? 1.0 : (double)t / (double)span;
        return s->min_lr + (s->lr - s->min_lr) * (float)(0.5 * (1.0 + cos(3.14159265358979323846 * frac)));
    }
    case ST_SCHED_CONSTANT:
    default: return s->lr;
    }
}
