/* Layers between bf16 layers, against the reference backend: what they do
 * to a bf16 activation arriving from a bf16 producer, and to a bf16 output
 * gradient, every pass.
 *
 * How the reference sees the same operands.  A carrying layer's input is
 * another layer's rounded output, and a max-pool's argmax or a ReLU's mask
 * can flip with that rounding, so no per-element bound on the layer's
 * error holds against a reference fed the unrounded value.  Here nothing
 * is rounded before the layer under test: every model starts
 *
 *     input 8 H W
 *     conv 8 k1 nobias     (weights the identity: its bf16 output is its input)
 *
 * and the images, every parameter and the output gradient are bf16 values
 * (exact in fp32), so the layer under test reads in bf16 exactly what the
 * reference reads in fp32, the net's output gradient enters bf16
 * unrounded, and its input gradient leaves through the identity
 * unchanged.  A convolution or linear layer after the identity is then
 * tested with bf16 operands from a producer and a bf16 output gradient
 * (test_bf16.c rounds its operands at the net's edge, and its layer's
 * output leaves in fp32).  The images are distinct values, so no max-pool
 * window holds a tie (whose gradient either kernel may route).
 *
 * Tolerance, per element, stated.  These kernels load bf16, compute in fp32
 * and round once to bf16 when they store: on exact operands they are the
 * fp32 kernels' arithmetic plus that rounding, at most u |y| with u = 2^-8
 * (8 significant bits, round to nearest).  The fp32 engine is allowed
 * e = 1e-5 + 1e-4 max|reference| against the reference for the same layers
 * (test_nn.c), so a bf16 output or input gradient may be off by
 * u |reference| + (1 + u) e, and an fp32 result (weight gradients, batch
 * norm's running statistics) by e.  ReLU, the non-overlapping max-pool's
 * forward and backward, the overlapping one's forward, the average pools'
 * backward here (a quarter or a sixteenth of each gradient) and flatten
 * compute nothing to round: those must be the reference's bits.  A bf16 result is
 * also checked to hold bf16 values (its low 16 bits zero), which an fp32
 * tensor in its place would not; and the layer's compute type is bf16. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nettest.h"
#include "shmtrain/bf16.h"
#include "shmtrain/nn.h"

enum { C = 8, BATCH = 3, IDENTITY_PARAMS = C * C };

struct carry_case {
    const char *layers;  /* after "input 8 H W\nconv 8 k1 nobias\n" */
    int hw;              /* H = W */
    bool exact_forward, exact_backward;
    bool rotate_second;  /* the model's second convolution (k1, 8 -> 8) moves channel c to c + 1 */
    float dropout;       /* the model is the identity and a dropout of this rate */
};

static bool skipped(void)
{
    if (bf16_here())
        return false;
    print_message("skipped: no native bf16 here; test_bf16_carry_any_isa runs this on oneDNN's reference "
                  "bf16 kernels\n");
    return true;
}

static float bf16_value(float f)
{
    return st_bf16_to_f32(st_bf16_from_f32(f));
}

static bool is_bf16_value(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0xffff) == 0;
}

/* n distinct bf16 values, |v| in [1/16, 16), in a seeded order. */
static void distinct_bf16(float *v, size_t n, uint64_t seed)
{
    enum { ALL = 2 * 8 * 128 };
    float pool[ALL];
    size_t k = 0;
    for (int sign = 0; sign < 2; sign++)
        for (int e = -4; e < 4; e++)
            for (int m = 0; m < 128; m++)
                pool[k++] = (sign ? -1.0f : 1.0f) * ldexpf(1.0f + m / 128.0f, e);
    assert_true(n <= ALL);
    for (size_t i = ALL - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const size_t j = (size_t)(seed >> 33) % (i + 1);
        const float t = pool[i];
        pool[i] = pool[j], pool[j] = t;
    }
    memcpy(v, pool, n * sizeof(float));
}

/* 1 on the diagonal of an 8 x 8 (k1) convolution's weights, or one place
 * off it: output channel o reads input channel (o + shift) mod 8. */
static void channel_map(float *w, int shift)
{
    for (int o = 0; o < C; o++)
        for (int i = 0; i < C; i++)
            w[o * C + i] = i == (o + shift) % C ? 1.0f : 0.0f;
}

struct passes {
    float *y, *dx, *grads, *stats;
};

static void run(st_net *n, const float *x, const float *dy, struct passes *p)
{
    st_net_set_dropout_seed(n, 29);
    assert_int_equal(st_net_forward(n, x), ST_OK);
    assert_int_equal(st_net_output(n, p->y), ST_OK);
    assert_int_equal(st_net_backward_from(n, dy), ST_OK);
    assert_int_equal(st_net_input_grad(n, p->dx), ST_OK);
    size_t P, B;
    const float *grads = st_net_grads(n, &P), *stats = st_net_buffers(n, &B);
    memcpy(p->grads, grads, P * sizeof(float));
    if (B)
        memcpy(p->stats, stats, B * sizeof(float));
}

/* The oneDNN backend draws a dropout mask over its tensor's layout and the
 * reference over plain NCHW (onednn_layers.c), so the reference's
 * arithmetic is applied here to the mask the bf16 net drew, read off its
 * output (every image value is nonzero): an element is kept where the
 * output is not zero, times 1 / (1 - rate) in fp32 as the reference
 * computes it.  The mask keeps 1 - rate of the elements, within 6 standard
 * deviations. */
static void on_the_same_mask(struct passes *r, const struct passes *b, const float *x, const float *dy, size_t n,
                             float rate)
{
    const float scale = 1.0f / (1.0f - rate);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const bool keep = b->y[i] != 0.0f;
        kept += keep;
        r->y[i] = keep ? x[i] * scale : 0.0f;
        r->dx[i] = keep ? dy[i] * scale : 0.0f;
    }
    const double mean = (1.0 - rate) * (double)n, sd = sqrt((double)n * rate * (1.0 - rate));
    if (!(fabs((double)kept - mean) <= 6 * sd))
        fail_msg("dropout %.2f kept %zu of %zu elements", (double)rate, kept, n);
}

static double fp32_allowance(const float *want, size_t n)
{
    double top = 0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, fabs(want[i]));
    return 1e-5 + 1e-4 * top;
}

/* got against want: the same bits (exact), or within u |want| + (1 + u) e
 * for a bf16 result and e for an fp32 one; a bf16 result holds bf16 values. */
static void compare(const char *layers, const char *what, const float *got, const float *want, size_t n,
                    bool exact, bool bf16_result)
{
    const double u = ldexp(1, -8), e = fp32_allowance(want, n);
    bool telling = false;  /* an fp32 tensor in the place of a bf16 one would show */
    for (size_t i = 0; i < n; i++) {
        telling |= !is_bf16_value(want[i]);
        const double allowed = exact ? 0 : bf16_result ? u * fabs(want[i]) + (1 + u) * e : e;
        if (!(fabs((double)got[i] - want[i]) <= allowed))
            fail_msg("[%s] %s[%zu]: %.9g, the reference %.9g, allowed %.3g", layers, what, i, (double)got[i],
                     (double)want[i], allowed);
        if (bf16_result && !is_bf16_value(got[i]))
            fail_msg("[%s] %s[%zu] = %.9g is not a bf16 value: the tensor is not bf16", layers, what, i,
                     (double)got[i]);
    }
    if (bf16_result && !exact && !telling)
        fail_msg("[%s] %s: every reference value is a bf16 value, so bf16 storage goes unchecked", layers, what);
}

static void check(const struct carry_case *c, int threads)
{
    omp_set_num_threads(threads);
    char text[256];
    snprintf(text, sizeof text, "input %d %d %d\nconv %d k1 nobias\n%s\n", C, c->hw, c->hw, C, c->layers);
    st_model *m = parse(text);
    st_net *ref = make_net(m, BATCH, ST_BACKEND_REFERENCE, ST_DTYPE_F32, true);
    st_net *bf = make_net(m, BATCH, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, true);
    size_t P, B, out = st_net_output_size(ref), in = (size_t)BATCH * C * (size_t)(c->hw * c->hw);
    st_net_init(ref, 17);
    float *params = st_net_params(ref, &P);
    st_net_buffers(ref, &B);
    for (size_t i = 0; i < P; i++)
        params[i] = bf16_value(params[i]);
    channel_map(params, 0);
    if (c->rotate_second)
        channel_map(params + IDENTITY_PARAMS, 1);
    memcpy(st_net_params(bf, NULL), params, P * sizeof(float));
    memcpy(st_net_buffers(bf, NULL), st_net_buffers(ref, NULL), B * sizeof(float));

    float *x = malloc(in * sizeof(float)), *dy = malloc(out * sizeof(float));
    distinct_bf16(x, in, 3);
    fill_rand(dy, out, 5);
    for (size_t i = 0; i < out; i++)
        dy[i] = bf16_value(dy[i]);
    struct passes r, b;
    struct passes *both[] = {&r, &b};
    for (int i = 0; i < 2; i++) {
        both[i]->y = malloc(out * sizeof(float));
        both[i]->dx = malloc(in * sizeof(float));
        both[i]->grads = malloc(P * sizeof(float));
        both[i]->stats = malloc((B ? B : 1) * sizeof(float));
    }
    run(ref, x, dy, &r);
    run(bf, x, dy, &b);
    if (c->dropout > 0)
        on_the_same_mask(&r, &b, x, dy, in, c->dropout);

    compare(c->layers, "output", b.y, r.y, out, c->exact_forward, true);
    compare(c->layers, "input gradient", b.dx, r.dx, in, c->exact_backward, true);
    /* The identity's own weight gradient sums its input against a rounded
     * gradient: test_bf16.c's bound is the one for that.  The layers after
     * it read exact operands. */
    compare(c->layers, "parameter gradients", b.grads + IDENTITY_PARAMS, r.grads + IDENTITY_PARAMS,
            P - IDENTITY_PARAMS, false, false);
    compare(c->layers, "running statistics", b.stats, r.stats, B, false, false);
    for (int layer = 0; layer < st_net_layers(bf); layer++)
        if (st_net_layer_compute(bf, layer) != ST_DTYPE_BF16)
            fail_msg("[%s] layer %d does not compute in bf16", c->layers, layer);
    /* Evaluation mode: batch norm on its running statistics; dropout passes
     * its input on, exactly. */
    st_net_set_training(ref, false);
    st_net_set_training(bf, false);
    assert_int_equal(st_net_forward(ref, x), ST_OK);
    assert_int_equal(st_net_forward(bf, x), ST_OK);
    st_net_output(ref, r.y);
    st_net_output(bf, b.y);
    compare(c->layers, "output (eval)", b.y, r.y, out, c->exact_forward || c->dropout > 0, true);

    for (int i = 0; i < 2; i++)
        free(both[i]->y), free(both[i]->dx), free(both[i]->grads), free(both[i]->stats);
    free(x), free(dy);
    st_net_destroy(ref), st_net_destroy(bf);
    st_model_destroy(m);
}

static const struct carry_case CASES[] = {
    {.layers = "relu", .hw = 6, .exact_forward = true, .exact_backward = true},  /* the identity's post-op */
    /* ReLU alone, after a pool */
    {.layers = "maxpool k2\nrelu", .hw = 6, .exact_forward = true, .exact_backward = true},
    {.layers = "maxpool k3 s2 p1", .hw = 7, .exact_forward = true},  /* overlapping: gradients meet and round */
    {.layers = "avgpool k2", .hw = 6, .exact_backward = true},  /* a quarter of each gradient: exact */
    {.layers = "avgpool global", .hw = 4, .exact_backward = true},  /* a sixteenth */
    {.layers = "batchnorm", .hw = 5},
    {.layers = "dropout 0.3", .hw = 6, .dropout = 0.3f},
    {.layers = "flatten", .hw = 4, .exact_forward = true, .exact_backward = true},
    {.layers = "save a\nconv 8 k1 nobias\nadd a", .hw = 5, .rotate_second = true},
    {.layers = "conv 12 k3 p1\nflatten", .hw = 6},  /* a convolution fed by a bf16 producer, its gradient bf16 */
    {.layers = "conv 16 k3 s2 p1 nobias\ndropout 0.0", .hw = 7},
    {.layers = "flatten\nlinear 24\ndropout 0.0", .hw = 4},
};

static void test_carrying_layers(void **state)
{
    (void)state;
    if (skipped())
        return;
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
            check(&CASES[i], threads);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_carrying_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
