/* The engine's C kernels for the sequence layers beside every oneDNN
 * primitive for the same work, timed: the measurement behind keeping
 * seq_kernels.c (layer norm, GELU, the causal softmax) rather than oneDNN
 * 3's primitives, which 2.6 lacked or ran slowly.
 *
 *   st-op-candidates [--cold] layernorm ROWS C
 *   st-op-candidates [--cold] gelu ROWS C
 *   st-op-candidates [--cold] softmax MATRICES T
 *
 * e.g. gpt-mini at batch 12: layernorm 768 128, gelu 768 512, softmax 48 64
 * (12 samples x 4 heads of 64 x 64); gpt at batch 4: layernorm 1024 384,
 * gelu 1024 1536, softmax 24 256.  Forward and backward separately, the
 * median of 15 runs each, and the largest difference from the C kernel's
 * result.  oneDNN's softmax takes no mask, so it runs whole rows where the
 * causal one runs the lower triangle (half the work): the comparison
 * flatters neither.  --cold streams 8 MB between runs, as the operands come
 * from L3 inside a training step.  Threads as OMP_NUM_THREADS says. */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/seq_kernels.h"
#include "shmtrain/nn.h"

enum { RUNS = 15, COLD_FLOATS = 2 << 20 };

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static float *cold;

#define CHECK(call)                                                                              \
    do {                                                                                         \
        dnnl_status_t s_ = (call);                                                               \
        if (s_ != dnnl_success) {                                                                \
            fprintf(stderr, "st-op-candidates: %s failed: %s\n", #call, dnnl_status2str(s_));   \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *floats(size_t n, unsigned seed, float scale)
{
    float *v = malloc(n * sizeof *v);
    if (!v) {
        fprintf(stderr, "st-op-candidates: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = ((float)(seed >> 8 & 0xffff) / 32768.0f - 1.0f) * scale;
    }
    return v;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* What one timed call does: a C kernel, or a primitive with its arguments. */
struct call {
    void (*c)(void *ctx);
    void *ctx;
    dnnl_primitive_t prim;
    dnnl_exec_arg_t *args;
    int nargs;
};

static double median_ms(const struct call *k)
{
    double ts[RUNS];
    for (int r = -2; r < RUNS; r++) {
        for (size_t i = 0; cold && i < COLD_FLOATS; i += 16)
            cold[i] += 1.0f;
        double t0 = now_s();
        if (k->c) {
            k->c(k->ctx);
        } else {
            CHECK(dnnl_primitive_execute(k->prim, strm, k->nargs, k->args));
            CHECK(dnnl_stream_wait(strm));
        }
        if (r >= 0)
            ts[r] = now_s() - t0;
    }
    qsort(ts, RUNS, sizeof *ts, by_double);
    return ts[RUNS / 2] * 1e3;
}

static void report(const char *op, const char *pass, const char *impl, double ms, double diff)
{
    printf("%-10s %-9s %-28s %8.3f ms", op, pass, impl, ms);
    if (diff >= 0)
        printf("   max |diff| vs C %.2g", diff);
    printf("\n");
}

static dnnl_memory_t mem(const_dnnl_memory_desc_t md, void *p)
{
    dnnl_memory_t m;
    CHECK(dnnl_memory_create(&m, md, eng, p));
    return m;
}

static dnnl_memory_desc_t md2(dnnl_dim_t rows, dnnl_dim_t cols)
{
    dnnl_memory_desc_t md;
    CHECK(dnnl_memory_desc_create_with_tag(&md, 2, (dnnl_dims_t){rows, cols}, dnnl_f32, dnnl_ab));
    return md;
}

/* Times every non-reference candidate of a forward pd and, for each, the
 * backward pd made with it as the hint; `bind` fills the arguments of a pass. */
typedef void (*bind_fn)(void *ctx, bool backward, dnnl_exec_arg_t *args, int *nargs);
typedef dnnl_status_t (*bwd_fn)(dnnl_primitive_desc_t *pd, void *ctx, const_dnnl_primitive_desc_t hint);

static void walk(const char *op, dnnl_status_t created, dnnl_primitive_desc_t *made, bwd_fn make_bwd, bind_fn bind,
                 void *ctx, const float *y, const float *y_c, const float *dx, const float *dx_c, size_t n)
{
    dnnl_primitive_desc_t fwd = *made;  /* read after the call that made it: argument order is unspecified */
    if (created != dnnl_success) {
        printf("%-10s (oneDNN has no kernel for it)\n", op);
        return;
    }
    do {
        const char *impl = NULL;
        CHECK(dnnl_primitive_desc_query(fwd, dnnl_query_impl_info_str, 0, &impl));
        if (!strncmp(impl, "ref", 3))
            continue;
        dnnl_exec_arg_t args[12];
        struct call k = {.args = args};
        CHECK(dnnl_primitive_create(&k.prim, fwd));
        bind(ctx, false, args, &k.nargs);
        const double f = median_ms(&k);
        report(op, "forward", impl, f, max_diff(y, y_c, n));
        CHECK(dnnl_primitive_destroy(k.prim));
        dnnl_primitive_desc_t bwd;
        if (make_bwd(&bwd, ctx, fwd) != dnnl_success) {
            printf("%-10s backward  (none for this forward)\n", op);
            continue;
        }
        const char *bimpl = NULL;
        CHECK(dnnl_primitive_desc_query(bwd, dnnl_query_impl_info_str, 0, &bimpl));
        CHECK(dnnl_primitive_create(&k.prim, bwd));
        bind(ctx, true, args, &k.nargs);
        const double b = median_ms(&k);  /* before the difference: argument order is unspecified */
        report(op, "backward", bimpl, b, max_diff(dx, dx_c, n));
        CHECK(dnnl_primitive_destroy(k.prim));
        CHECK(dnnl_primitive_desc_destroy(bwd));
    } while (dnnl_primitive_desc_next_impl(fwd) == dnnl_success);
    CHECK(dnnl_primitive_desc_destroy(fwd));
}

/* ------------------------------------------------------- layer norm -- */

struct ln {
    long rows, c;
    float *x, *g, *b, *dy, *y, *dx, *dg, *db, *stats, *partial, *y_c, *dx_c, *mean, *var;
    dnnl_memory_desc_t data, stat;
    dnnl_memory_t m[12];
};

static void ln_c_fwd(void *p)
{
    struct ln *l = p;
    seq_ln_fwd(l->y_c, l->stats, l->x, l->g, l->b, l->rows, l->c);
}

static void ln_c_bwd(void *p)
{
    struct ln *l = p;
    seq_ln_bwd(l->dx_c, l->dg, l->db, l->partial, l->x, l->dy, l->g, l->stats, l->rows, l->c);
}

static void ln_bind(void *p, bool backward, dnnl_exec_arg_t *a, int *n)
{
    struct ln *l = p;
    static const int keys[] = {DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCALE,
                               DNNL_ARG_SHIFT, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE,
                               DNNL_ARG_DIFF_SHIFT};
    /* forward: src dst mean var scale shift; backward: src mean var scale
     * shift (3.x wants it here) diff_dst diff_src diff_scale diff_shift */
    static const int fwd[] = {0, 1, 2, 3, 4, 5}, bwd[] = {0, 2, 3, 4, 5, 6, 7, 8, 9};
    const int *use = backward ? bwd : fwd, count = backward ? 9 : 6;
    for (int i = 0; i < count; i++)
        a[i] = (dnnl_exec_arg_t){keys[use[i]], l->m[use[i]]};
    *n = count;
}

static dnnl_status_t ln_bwd_pd(dnnl_primitive_desc_t *pd, void *p, const_dnnl_primitive_desc_t hint)
{
    struct ln *l = p;
    return dnnl_layer_normalization_backward_primitive_desc_create(pd, eng, dnnl_backward, l->data, l->data, l->data,
                                                                   l->stat, 1e-5f, dnnl_use_scale | dnnl_use_shift,
                                                                   hint, NULL);
}

static void layernorm(long rows, long c)
{
    const size_t n = (size_t)(rows * c);
    struct ln l = {.rows = rows, .c = c, .x = floats(n, 1, 2), .g = floats(c, 2, 1), .b = floats(c, 3, 1),
                   .dy = floats(n, 4, 1), .y = floats(n, 5, 0), .dx = floats(n, 6, 0), .dg = floats(c, 7, 0),
                   .db = floats(c, 8, 0), .stats = floats(2 * rows, 9, 0), .y_c = floats(n, 10, 0),
                   .dx_c = floats(n, 11, 0), .mean = floats(rows, 12, 0), .var = floats(rows, 13, 0),
                   .partial = floats(seq_ln_partial_floats(c), 14, 0)};
    printf("# layer norm over %ld rows of %ld, %d thread(s)%s\n", rows, c, omp_get_max_threads(), cold ? ", cold" : "");
    report("layernorm", "forward", "C rows (seq_kernels.c)", median_ms(&(struct call){.c = ln_c_fwd, .ctx = &l}), -1);
    report("layernorm", "backward", "C rows (seq_kernels.c)", median_ms(&(struct call){.c = ln_c_bwd, .ctx = &l}), -1);
    l.data = md2(rows, c);
    CHECK(dnnl_memory_desc_create_with_tag(&l.stat, 1, (dnnl_dims_t){rows}, dnnl_f32, dnnl_a));
    dnnl_memory_desc_t vec;
    CHECK(dnnl_memory_desc_create_with_tag(&vec, 1, (dnnl_dims_t){c}, dnnl_f32, dnnl_a));
    float *dscale = floats(c, 15, 0), *dshift = floats(c, 16, 0);
    void *ptrs[] = {l.x, l.y, l.mean, l.var, l.g, l.b, l.dy, l.dx, dscale, dshift};
    const_dnnl_memory_desc_t mds[] = {l.data, l.data, l.stat, l.stat, vec, vec, l.data, l.data, vec, vec};
    for (int i = 0; i < 10; i++)
        l.m[i] = mem(mds[i], ptrs[i]);
    dnnl_primitive_desc_t fwd;
    walk("layernorm",
         dnnl_layer_normalization_forward_primitive_desc_create(&fwd, eng, dnnl_forward_training, l.data, l.data,
                                                                l.stat, 1e-5f, dnnl_use_scale | dnnl_use_shift, NULL),
         &fwd, ln_bwd_pd, ln_bind, &l, l.y, l.y_c, l.dx, l.dx_c, n);
    for (int i = 0; i < 10; i++)
        dnnl_memory_destroy(l.m[i]);
    dnnl_memory_desc_destroy(l.data), dnnl_memory_desc_destroy(l.stat), dnnl_memory_desc_destroy(vec);
}

/* ------------------------------------------------------------- GELU -- */

struct gelu {
    long count;
    float *x, *dy, *y, *dx, *th, *y_c, *dx_c;
    dnnl_memory_desc_t data;
    dnnl_memory_t m[4];  /* x, y, dy, dx */
};

static void gelu_c_fwd(void *p)
{
    struct gelu *g = p;
    seq_gelu_fwd(g->y_c, g->th, g->x, g->count);
}

static void gelu_c_bwd(void *p)
{
    struct gelu *g = p;
    seq_gelu_bwd(g->dx_c, g->dy, g->x, g->th, g->count);
}

static void gelu_bind(void *p, bool backward, dnnl_exec_arg_t *a, int *n)
{
    struct gelu *g = p;
    if (!backward) {
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, g->m[0]};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_DST, g->m[1]};
        *n = 2;
        return;
    }
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, g->m[0]};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, g->m[2]};
    a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, g->m[3]};
    *n = 3;
}

static dnnl_status_t gelu_bwd_pd(dnnl_primitive_desc_t *pd, void *p, const_dnnl_primitive_desc_t hint)
{
    struct gelu *g = p;
    return dnnl_eltwise_backward_primitive_desc_create(pd, eng, dnnl_eltwise_gelu_tanh, g->data, g->data, g->data, 0,
                                                       0, hint, NULL);
}

static void gelu(long rows, long c)
{
    const size_t n = (size_t)(rows * c);
    struct gelu g = {.count = rows * c, .x = floats(n, 1, 3), .dy = floats(n, 2, 1), .y = floats(n, 3, 0),
                     .dx = floats(n, 4, 0), .th = floats(n, 5, 0), .y_c = floats(n, 6, 0), .dx_c = floats(n, 7, 0)};
    printf("# GELU (tanh) on %ld x %ld, %d thread(s)%s\n", rows, c, omp_get_max_threads(), cold ? ", cold" : "");
    report("gelu", "forward", "C (seq_kernels.c)", median_ms(&(struct call){.c = gelu_c_fwd, .ctx = &g}), -1);
    report("gelu", "backward", "C (seq_kernels.c)", median_ms(&(struct call){.c = gelu_c_bwd, .ctx = &g}), -1);
    g.data = md2(rows, c);
    float *ptrs[] = {g.x, g.y, g.dy, g.dx};
    for (int i = 0; i < 4; i++)
        g.m[i] = mem(g.data, ptrs[i]);
    dnnl_primitive_desc_t fwd;
    walk("gelu",
         dnnl_eltwise_forward_primitive_desc_create(&fwd, eng, dnnl_forward_training, dnnl_eltwise_gelu_tanh, g.data,
                                                    g.data, 0, 0, NULL),
         &fwd, gelu_bwd_pd, gelu_bind, &g, g.y, g.y_c, g.dx, g.dx_c, n);
    for (int i = 0; i < 4; i++)
        dnnl_memory_destroy(g.m[i]);
    dnnl_memory_desc_destroy(g.data);
}

/* ---------------------------------------------------------- softmax -- */

struct softmax {
    long mats, t;
    float *s, *p, *dp, *ds, *p_c, *ds_c;
    dnnl_memory_desc_t data;
    dnnl_memory_t m[4];  /* scores, p, dp, ds */
};

/* In place, as in the engine: after the first run the softmax of a
 * softmax, the same arithmetic (denormals flushed, as shmtrain runs). */
static void softmax_c_fwd(void *v)
{
    struct softmax *s = v;
    const long tt = s->t * s->t;
#pragma omp parallel for schedule(static)
    for (long k = 0; k < s->mats; k++)
        seq_causal_softmax(s->p_c + k * tt, s->t);
}

static void softmax_c_bwd(void *v)
{
    struct softmax *s = v;
    const long tt = s->t * s->t;
#pragma omp parallel for schedule(static)
    for (long k = 0; k < s->mats; k++)
        seq_causal_softmax_bwd(s->ds_c + k * tt, s->p_c + k * tt, s->t, 1.0f);
}

static void softmax_bind(void *v, bool backward, dnnl_exec_arg_t *a, int *n)
{
    struct softmax *s = v;
    if (!backward) {
        a[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, s->m[0]};
        a[1] = (dnnl_exec_arg_t){DNNL_ARG_DST, s->m[1]};
        *n = 2;
        return;
    }
    a[0] = (dnnl_exec_arg_t){DNNL_ARG_DST, s->m[1]};
    a[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, s->m[2]};
    a[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, s->m[3]};
    *n = 3;
}

static dnnl_status_t softmax_bwd_pd(dnnl_primitive_desc_t *pd, void *v, const_dnnl_primitive_desc_t hint)
{
    struct softmax *s = v;
    return dnnl_softmax_backward_primitive_desc_create(pd, eng, dnnl_softmax_accurate, s->data, s->data, s->data, 1,
                                                       hint, NULL);
}

static void softmax(long mats, long t)
{
    const size_t n = (size_t)(mats * t * t);
    struct softmax s = {.mats = mats, .t = t, .s = floats(n, 1, 4), .p = floats(n, 2, 0), .dp = floats(n, 3, 1),
                        .ds = floats(n, 4, 0), .p_c = floats(n, 5, 0), .ds_c = floats(n, 6, 0)};
    /* The mask as oneDNN would need it: -inf right of the diagonal, so that
     * both compute the same probabilities. */
    for (long k = 0; k < mats; k++)
        for (long i = 0; i < t; i++)
            for (long j = i + 1; j < t; j++)
                s.s[(k * t + i) * t + j] = -INFINITY;
    printf("# causal softmax of %ld matrices %ld x %ld, %d thread(s)%s\n", mats, t, t, omp_get_max_threads(),
           cold ? ", cold" : "");
    /* the results to compare with: one run on the inputs */
    memcpy(s.p_c, s.s, n * sizeof(float));
    softmax_c_fwd(&s);
    memcpy(s.ds_c, s.dp, n * sizeof(float));
    softmax_c_bwd(&s);
    float *p_keep = floats(n, 0, 0), *ds_keep = floats(n, 0, 0);
    memcpy(p_keep, s.p_c, n * sizeof(float));
    memcpy(ds_keep, s.ds_c, n * sizeof(float));
    report("softmax", "forward", "C causal (seq_kernels.c)", median_ms(&(struct call){.c = softmax_c_fwd, .ctx = &s}),
           -1);
    report("softmax", "backward", "C causal (seq_kernels.c)",
           median_ms(&(struct call){.c = softmax_c_bwd, .ctx = &s}), -1);
    memcpy(s.p_c, p_keep, n * sizeof(float));
    memcpy(s.ds_c, ds_keep, n * sizeof(float));
    s.data = md2(mats * t, t);
    float *ptrs[] = {s.s, s.p, s.dp, s.ds};
    for (int i = 0; i < 4; i++)
        s.m[i] = mem(s.data, ptrs[i]);
    dnnl_primitive_desc_t fwd;
    walk("softmax",
         dnnl_softmax_forward_primitive_desc_create(&fwd, eng, dnnl_forward_training, dnnl_softmax_accurate, s.data,
                                                    s.data, 1, NULL),
         &fwd, softmax_bwd_pd, softmax_bind, &s, s.p, s.p_c, s.ds, s.ds_c, n);
    for (int i = 0; i < 4; i++)
        dnnl_memory_destroy(s.m[i]);
    dnnl_memory_desc_destroy(s.data);
}

static long size_arg(const char *arg, const char *what)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (!*arg || *end || v < 1 || v > 1 << 20) {
        fprintf(stderr, "st-op-candidates: %s '%s' is not a size (1..1048576)\n", what, arg);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    int at = 1;
    if (at < argc && !strcmp(argv[at], "--cold")) {
        if (!(cold = calloc(COLD_FLOATS, sizeof(float)))) {
            fprintf(stderr, "st-op-candidates: out of memory\n");
            return 1;
        }
        at++;
    }
    if (argc - at != 3 || (strcmp(argv[at], "layernorm") && strcmp(argv[at], "gelu") && strcmp(argv[at], "softmax"))) {
        fprintf(stderr, "usage: st-op-candidates [--cold] layernorm ROWS C | gelu ROWS C | softmax MATRICES T\n");
        return 2;
    }
    const long a = size_arg(argv[at + 1], argv[at][0] == 's' ? "MATRICES" : "ROWS"),
               b = size_arg(argv[at + 2], argv[at][0] == 's' ? "T" : "C");
    st_nn_flush_denormals(true);  /* as shmtrain runs; the in-place repeats would make denormals */
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    if (argv[at][0] == 'l')
        layernorm(a, b);
    else if (argv[at][0] == 'g')
        gelu(a, b);
    else
        softmax(a, b);
    CHECK(dnnl_stream_destroy(strm));
    CHECK(dnnl_engine_destroy(eng));
    free(cold);
    return 0;
}
