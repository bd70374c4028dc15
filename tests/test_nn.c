/* The engine: every layer on oneDNN against the plain-C reference (forward,
 * backward data, backward weights) and against finite differences, at 1 and
 * 2 OpenMP threads; whole presets.  Training (optimizers, the loss,
 * determinism, the profile): test_nn_training.c; the model text and its
 * presets: test_model.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nettest.h"
#include "shmtrain/nn.h"
#include "shmtrain/optim.h"

/* max |a - b| <= atol + rtol * max |b|; on failure says where. */
static bool close_enough(const float *a, const float *b, size_t n, double atol, double rtol, char *why,
                         size_t len)
{
    size_t at;
    double scale;
    const double worst = max_diff(a, b, n, 0, &at, &scale);
    snprintf(why, len, "max diff %.3g at %zu (%g vs %g), scale %.3g", worst, at, n ? (double)a[at] : 0.0,
             n ? (double)b[at] : 0.0, scale);
    return worst <= atol + rtol * scale;
}

static void assert_close(const char *what, const char *model, const float *a, const float *b, size_t n,
                         double atol, double rtol)
{
    char why[160];
    if (!close_enough(a, b, n, atol, rtol, why, sizeof why))
        fail_msg("%s of [%s]: %s", what, model, why);
}

/* --------------------------------------------- layer: oneDNN vs reference -- */

static const char *const LAYERS[] = {
    "input 3 8 8\nconv 5 k3 s1 p1",
    "input 3 9 9\nconv 20 k3 s2 p1",
    "input 16 6 6\nconv 32 k3",
    "input 2 5 5\nconv 4 k3 nobias",
    "input 3 7 7\nconv 24 k5 s2 p2 nobias",
    /* outputs not a multiple of 16: the weight reorders for backward-data
     * that oneDNN 3.7.2 was reported to get wrong (onednn_reorder.c) */
    "input 6 12 12\nconv 10 k3 p1",
    "input 1 12 12\nconv 6 k3 p1",
    "input 8 6 6\nconv 8 k3 p1",
    "input 32 6 6\nconv 20 k3 p1",
    "input 12 1 1\nlinear 7",
    "input 3 4 4\nlinear 33",
    "input 3 4 4\nlinear 5 nobias",
    "input 3 8 8\nconv 16 k3 p1\nrelu",              /* fused ReLU */
    "input 3 6 6\nlinear 9\nrelu",                   /* fused ReLU */
    "input 16 8 8\nrelu",
    "input 5 6 6\nrelu",
    "input 16 8 8\nmaxpool k2",
    "input 16 7 7\nmaxpool k3 s2 p1",
    "input 5 6 6\nmaxpool k2",
    "input 16 7 7\nmaxpool k2",                      /* odd: the last row and column drop out */
    "input 20 9 6\nmaxpool k2",                      /* 2 blocks, one padded */
    "input 3 8 8\nconv 6 k3 p1\nrelu\nmaxpool k2",  /* nhwc conv output, pooled */
    "input 16 8 8\navgpool k2",
    "input 8 5 5\navgpool k3 s2 p1",
    "input 16 4 4\navgpool global",
    "input 16 4 4\nbatchnorm",
    "input 5 3 3\nbatchnorm",
    "input 16 4 4\ndropout 0.0",
    "input 3 4 4\nflatten",
    "input 3 8 8\nconv 16 k3 p1\nrelu\nmaxpool k2",  /* runs as conv, pool, relu */
    "input 1 40 40\nconv 32 k3\nrelu\nmaxpool k2",    /* 554 KB of conv output: conv + pool in chunks */
    "input 6 96 96\nconv 6 k3 p1\nrelu\nmaxpool k2",  /* the same in nhwc, bias and padding */
    "input 16 4 4\nsave a\nrelu\nadd a",
    "input 8 8 8\nsave a\nconv 16 k3 s2 p1\nadd a proj",
    "input 4 6 6\nsave a\nconv 4 k3 p1\nbatchnorm\nadd a\nrelu",         /* the ReLU runs inside the add */
    "input 4 6 6\nconv 4 k3 p1\nsave a\nconv 4 k3 p1\nadd a\nrelu\nconv 3 k1", /* ... its gradient to two layers */
    /* the add's gradient read in place by the sum into a's (no copy into a's buffer first); not where
     * the ReLU inside its home's backward masks that buffer in place */
    "input 4 6 6\nconv 4 k3 p1\nsave a\nconv 4 k3 p1\nbatchnorm\nadd a\nrelu\nconv 3 k1",
    "input 4 6 6\nconv 4 k3 p1\nsave a\nconv 4 k3 p1\nrelu\nadd a\nconv 3 k1",
    "input 4 6 6\nconv 8 k3 p1\nbatchnorm\nrelu\nconv 3 k1",  /* the ReLU runs inside the batch norm */
    "input 16 4 4\nbatchnorm\nrelu",                            /* ... on the input, no gradient wanted there */
};

/* input_grad: also compare d(loss)/d(input); without it the first layer
 * runs no backward-data pass, which changes what the backend builds. */
static void compare_net(const char *text, int threads, bool input_grad)
{
    omp_set_num_threads(threads);
    const int batch = 3;
    st_model *m = parse(text);
    st_net *r = make_net(m, batch, ST_BACKEND_REFERENCE, ST_DTYPE_F32, input_grad),
           *d = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_F32, input_grad);
    st_net_init(r, 11);
    st_net_init(d, 11);
    size_t in = st_model_input_size(m) * batch, out = st_net_output_size(r), P, B;
    float *x = malloc(in * 4), *dy = malloc(out * 4), *yr = malloc(out * 4), *yd = malloc(out * 4),
          *dxr = malloc(in * 4), *dxd = malloc(in * 4);
    fill_rand(x, in, 1);
    fill_rand(dy, out, 2);
    assert_int_equal(st_net_forward(r, x), ST_OK);
    assert_int_equal(st_net_forward(d, x), ST_OK);
    st_net_output(r, yr);
    st_net_output(d, yd);
    assert_close("forward", text, yd, yr, out, 1e-5, 1e-4);
    assert_int_equal(st_net_backward_from(r, dy), ST_OK);
    assert_int_equal(st_net_backward_from(d, dy), ST_OK);
    if (input_grad) {
        st_net_input_grad(r, dxr);
        st_net_input_grad(d, dxd);
        assert_close("backward data", text, dxd, dxr, in, 1e-5, 1e-4);
    }
    float *gr = st_net_grads(r, &P), *gd = st_net_grads(d, NULL);
    if (P)
        assert_close("backward weights", text, gd, gr, P, 1e-5, 1e-4);
    float *br = st_net_buffers(r, &B), *bd = st_net_buffers(d, NULL);
    if (B)
        assert_close("running statistics", text, bd, br, B, 1e-6, 1e-5);
    /* Evaluation mode too (batch norm uses the running statistics). */
    st_net_set_training(r, false);
    st_net_set_training(d, false);
    assert_int_equal(st_net_forward(r, x), ST_OK);
    assert_int_equal(st_net_forward(d, x), ST_OK);
    st_net_output(r, yr);
    st_net_output(d, yd);
    assert_close("forward (eval)", text, yd, yr, out, 1e-5, 1e-4);
    free(x), free(dy), free(yr), free(yd), free(dxr), free(dxd);
    st_net_destroy(r);
    st_net_destroy(d);
    st_model_destroy(m);
}

static void test_layers_match_reference_1_thread(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof LAYERS / sizeof *LAYERS; i++)
        compare_net(LAYERS[i], 1, true);
}

static void test_layers_match_reference_2_threads(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof LAYERS / sizeof *LAYERS; i++)
        compare_net(LAYERS[i], 2, true);
}

/* A first convolution before a max-pool, big enough to be chunked, with no
 * gradient wanted at the input: its backward-weights pass then runs in the
 * pool's chunks too (one image each at batch 3), partial gradients summed.
 * The describe line proves that path is the one compared. */
static const char *const FIRST_LAYERS[] = {
    "input 1 40 40\nconv 32 k3\nrelu\nmaxpool k2\nlinear 5",          /* blocked */
    "input 1 41 41\nconv 32 k3 nobias\nrelu\nmaxpool k2\nlinear 5",   /* odd: an edge row gets no gradient */
    "input 6 96 96\nconv 6 k3 p1\nrelu\nmaxpool k2\nlinear 5",        /* nhwc */
};

/* What st_net_describe says of a oneDNN net of the model; the caller frees it. */
static char *describe(const char *model_text, int batch, bool input_grad)
{
    st_model *m = parse(model_text);
    st_net *n = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_F32, input_grad);
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_non_null(f);
    st_net_describe(n, f);
    assert_int_equal(fclose(f), 0);
    st_net_destroy(n);
    st_model_destroy(m);
    return text;
}

static void test_first_layers_backward_in_chunks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof FIRST_LAYERS / sizeof *FIRST_LAYERS; i++) {
        char *text = describe(FIRST_LAYERS[i], 3, false);
        /* Below AVX-512 (an EPYC Zen 3, say) oneDNN 2.6's backward-weights
         * kernel wants the output gradient reordered first, so that pass
         * stays whole-batch and only the forward is chunked. */
        const bool both = strstr(st_nn_onednn_isa(), "avx512") != NULL;
        const char *want = both ? "(forward and backward-weights) in 1-image chunks" : "in 1-image chunks";
        if (!strstr(text, want))
            fail_msg("[%s] is not chunked %s on %s:\n%s", FIRST_LAYERS[i], both ? "both ways" : "forward",
                     st_nn_onednn_isa(), text);
        free(text);
        compare_net(FIRST_LAYERS[i], 1, false);
        compare_net(FIRST_LAYERS[i], 2, false);
    }
}

/* One-channel stems (stem.c): kernels of 1 to 7, padding, odd widths (a
 * last pixel alone in its pair), one to eight channels, no bias, its own
 * ReLU and the max-pool's, and rows that take each tile: 14 pairs of 5x5
 * or 3x3 taps (each column loaded once), 7 such pairs then a rest, and
 * the general tiles.  Compared with no gradient wanted at the input (the
 * stem runs no backward-data pass); the description proves the stem ran. */
static const char *const STEMS[] = {
    "input 1 28 28\nconv 6 k5 p2\nrelu\nmaxpool k2\nlinear 5",  /* lenet's: one tile of 14 pairs */
    "input 1 13 11\nconv 8 k3\nrelu\nflatten\nlinear 4",       /* odd widths; ReLU in the stem */
    "input 1 9 9\nconv 1 k7 p3 nobias\nlinear 3",
    "input 1 12 22\nconv 5 k1\nmaxpool k2\nlinear 3",
    "input 1 10 10\nconv 3 k2 p1\nlinear 3",                     /* an even kernel, padded */
    "input 1 8 30\nconv 4 k3 p1\nlinear 3",                      /* 15 pairs: 14, then 1 */
    "input 1 9 24\nconv 7 k5 p2\nrelu\nlinear 3",               /* 12 pairs: 7, then 5 */
    "input 1 7 17\nconv 2 k3 p1\nlinear 3",                      /* 9 pairs: 7, then 2, the last odd */
};

static void test_stems(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof STEMS / sizeof *STEMS; i++) {
        char *text = describe(STEMS[i], 3, false);
        if (!strstr(text, "C stem"))
            fail_msg("[%s] did not run stem.c:\n%s", STEMS[i], text);
        free(text);
        compare_net(STEMS[i], 1, false);
        compare_net(STEMS[i], 2, false);
    }
}

/* ------------------------------------------------------ gradients ready -- */


struct ready_log {
    st_net *net;
    size_t first[64], count[64];
    float *seen;    /* the gradients as they were at each callback */
    int calls;
};

static void note_ready(void *ctx, size_t first, size_t count)
{
    struct ready_log *log = ctx;
    const float *g = st_net_grads(log->net, NULL);
    if (log->calls < 64) {
        log->first[log->calls] = first;
        log->count[log->calls] = count;
    }
    log->calls++;
    memcpy(log->seen + first, g + first, count * sizeof(float));
}

/* The callback names every parameter's gradient once, last layers first,
 * and only once the values are final (what a bucketed all-reduce relies on):
 * a residual model, both backends, a chunked first layer on oneDNN. */
static void test_grads_ready_callbacks(void **state)
{
    (void)state;
    const char *const models[] = {"resnet", "cnn", "input 6 96 96\nconv 6 k3 p1\nrelu\nmaxpool k2\nlinear 5"};
    for (size_t k = 0; k < sizeof models / sizeof *models; k++)
        for (int b = ST_BACKEND_ONEDNN; b <= ST_BACKEND_REFERENCE; b++) {
            st_model *m = NULL;
            if (st_model_load(&m, models[k]) != ST_OK)
                m = parse(models[k]);
            const int batch = 3;
            st_net *n = make_net(m, batch, (st_backend)b, ST_DTYPE_F32, false);
            size_t P;
            st_net_params(n, &P);
            struct ready_log log = {.net = n, .seen = calloc(P, sizeof(float))};
            assert_non_null(log.seen);
            st_net_on_grads_ready(n, note_ready, &log);
            int c, h, w;
            st_model_input_shape(m, &c, &h, &w);
            float *x = malloc((size_t)batch * c * h * w * sizeof *x);
            int y[3];
            synthetic_batch(x, y, batch, c, h, w, st_model_classes(m), 7);
            float loss;
            assert_int_equal(st_net_forward(n, x), ST_OK);
            assert_int_equal(st_net_loss(n, y, &loss, NULL), ST_OK);
            assert_int_equal(st_net_backward(n), ST_OK);
            assert_true(log.calls > 0 && log.calls <= 64);
            size_t covered = 0;
            for (int i = 0; i < log.calls; i++) {
                covered += log.count[i];
                if (i > 0 && log.first[i] + log.count[i] > log.first[i - 1])
                    fail_msg("%s, backend %d: range %d [%zu, +%zu) is not below the one before", models[k], b, i,
                             log.first[i], log.count[i]);
            }
            assert_int_equal(covered, P);  /* decreasing and disjoint, so each parameter once */
            assert_int_equal(log.first[log.calls - 1], 0);
            assert_memory_equal(log.seen, st_net_grads(n, NULL), P * sizeof(float));  /* final when announced */
            free(x);
            free(log.seen);
            st_net_destroy(n);
            st_model_destroy(m);
        }
}

/* The comparison itself must be able to fail: a perturbed gradient is caught. */
static void test_comparison_catches_a_wrong_gradient(void **state)
{
    (void)state;
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3.01f, 4}, c[4] = {1, 2, NAN, 4};
    char why[160];
    assert_true(close_enough(a, a, 4, 1e-6, 1e-6, why, sizeof why));
    assert_false(close_enough(a, b, 4, 1e-6, 1e-6, why, sizeof why));
    assert_non_null(strstr(why, "at 2"));
    assert_false(close_enough(c, a, 4, 1e-6, 1e-6, why, sizeof why));
}

/* ---------------------------------------------- finite differences -- */

/* L = sum(output * w) for fixed random weights w. */
static double probe_loss(st_net *n, const float *x, const float *w, float *y)
{
    if (st_net_forward(n, x) != ST_OK)
        fail_msg("forward: %s", st_last_error());
    st_net_output(n, y);
    double l = 0;
    for (size_t i = 0; i < st_net_output_size(n); i++)
        l += (double)y[i] * w[i];
    return l;
}

static void finite_differences(const char *text, st_backend backend, int threads)
{
    omp_set_num_threads(threads);
    const int batch = 2;
    st_model *m = parse(text);
    st_net *n = make_net(m, batch, backend, ST_DTYPE_F32, true);
    st_net_init(n, 5);
    st_net_set_dropout_seed(n, 99);
    size_t in = st_model_input_size(m) * batch, out = st_net_output_size(n), P;
    float *x = malloc(in * 4), *w = malloc(out * 4), *y = malloc(out * 4), *dx = malloc(in * 4);
    fill_rand(x, in, 3);
    fill_rand(w, out, 4);
    probe_loss(n, x, w, y);
    assert_int_equal(st_net_backward_from(n, w), ST_OK);
    st_net_input_grad(n, dx);
    float *p = st_net_params(n, &P), *g = malloc((P ? P : 1) * 4);
    memcpy(g, st_net_grads(n, NULL), P * 4);
    const float eps = 2e-3f;
    const double l0 = probe_loss(n, x, w, y);
    int checked = 0, kinks = 0;
    /* Parameters, then inputs: up to 12 of each, spread over the span. */
    for (int which = 0; which < 2; which++) {
        float *v = which ? x : p, *grad = which ? dx : g;
        size_t count = which ? in : P;
        for (size_t k = 0; k < 12 && count; k++) {
            size_t i = (k * 7919 + 13) % count;
            float keep = v[i];
            v[i] = keep + eps;
            double lp = probe_loss(n, x, w, y);
            v[i] = keep - eps;
            double lm = probe_loss(n, x, w, y);
            v[i] = keep;
            double num = (lp - lm) / (2 * eps), ana = grad[i];
            /* A ReLU or max-pool kink inside [-eps, eps] makes the two
             * one-sided slopes disagree: no derivative to compare there. */
            if (fabs((lp - l0) - (l0 - lm)) > 0.05 * fabs(lp - lm) + 1e-4) {
                kinks++;
                continue;
            }
            if (fabs(num - ana) > 2e-2 + 2e-2 * fabs(num))
                fail_msg("[%s] %s %zu: finite difference %.5g vs analytic %.5g (%d threads)", text,
                         which ? "input" : "param", i, num, ana, threads);
            checked++;
        }
    }
    if (checked < 12 || kinks > checked / 3)
        fail_msg("[%s] only %d coordinates checked (%d at kinks)", text, checked, kinks);
    free(x), free(w), free(y), free(dx), free(g);
    st_net_destroy(n);
    st_model_destroy(m);
}

static const char *const FD_MODELS[] = {
    "input 3 6 6\nconv 4 k3 p1",
    "input 3 6 6\nconv 18 k3 s2 p1\nrelu",
    "input 2 4 4\nlinear 5\nrelu\nlinear 3",
    "input 3 6 6\nmaxpool k2\nconv 2 k1",
    "input 3 6 6\navgpool k3 s2 p1\nconv 2 k1",
    "input 4 4 4\nbatchnorm\nconv 3 k1",
    "input 4 4 4\nconv 4 k3 p1\nbatchnorm\nrelu\nconv 3 k1",
    "input 4 4 4\ndropout 0.5\nconv 3 k1",
    "input 4 4 4\nsave a\nconv 4 k3 p1\nadd a\nconv 2 k1",
    "input 4 4 4\nsave a\nconv 4 k3 p1\nadd a\nrelu\nconv 2 k1",
};

static void test_finite_differences(void **state)
{
    (void)state;
    for (int t = 1; t <= 2; t++)
        for (size_t i = 0; i < sizeof FD_MODELS / sizeof *FD_MODELS; i++) {
            finite_differences(FD_MODELS[i], ST_BACKEND_ONEDNN, t);
            if (t == 1)
                finite_differences(FD_MODELS[i], ST_BACKEND_REFERENCE, 1);
        }
}

/* ------------------------------------------------------- whole presets -- */

static void check_preset(const char *name)
{
    omp_set_num_threads(1);
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, name), ST_OK);
    const int batch = 2;
    st_net *r = make_net(m, batch, ST_BACKEND_REFERENCE, ST_DTYPE_F32, true),
           *d = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_F32, true);
    st_net_init(r, 3);
    st_net_init(d, 3);
    size_t in = st_model_input_size(m) * batch, P;
    float *x = malloc(in * 4), *dxr = malloc(in * 4), *dxd = malloc(in * 4);
    fill_rand(x, in, 9);
    int labels[2] = {3, 7};
    float lr, ld;
    int cr, cd;
    assert_int_equal(st_net_forward(r, x), ST_OK);
    assert_int_equal(st_net_forward(d, x), ST_OK);
    assert_int_equal(st_net_loss(r, labels, &lr, &cr), ST_OK);
    assert_int_equal(st_net_loss(d, labels, &ld, &cd), ST_OK);
    assert_true(fabsf(lr - ld) < 1e-5f);
    assert_int_equal(cr, cd);
    assert_int_equal(st_net_backward(r), ST_OK);
    assert_int_equal(st_net_backward(d), ST_OK);
    const float *gd = st_net_grads(d, &P), *gr = st_net_grads(r, NULL);
    assert_close("preset grads", name, gd, gr, P, 1e-6, 1e-4);
    st_net_input_grad(r, dxr);
    st_net_input_grad(d, dxd);
    assert_close("preset input grads", name, dxd, dxr, in, 1e-7, 1e-4);
    /* And the loss gradient against finite differences on a few weights. */
    float *p = st_net_params(d, NULL), *g = st_net_grads(d, NULL);
    float *gsave = malloc(P * 4);
    memcpy(gsave, g, P * 4);
    for (int k = 0; k < 6; k++) {
        size_t i = ((size_t)k * 104729 + 17) % P;
        double num = loss_slope(d, x, labels, &p[i], 1e-2f);
        if (fabs(num - gsave[i]) > 5e-3 + 3e-2 * fabs(num))
            fail_msg("%s param %zu: finite difference %.5g vs analytic %.5g", name, i, num, (double)gsave[i]);
    }
    free(gsave), free(x), free(dxr), free(dxd);
    st_net_destroy(r);
    st_net_destroy(d);
    st_model_destroy(m);
}

static void test_presets_gradients(void **state)
{
    (void)state;
    check_preset("mlp");
    check_preset("lenet");
    check_preset("cnn");
    check_preset("resnet");
}

/* Layers before the first parameter pass no gradient back: the input's
 * flatten in mlp needs none, so its first inner product must not run a
 * backward-data pass (it did: 18% of mlp's step).  With input_grad they all
 * pass it back. */
static int count_no_input_grad(const char *model_text, bool input_grad, char *first_line, size_t len)
{
    char *text = describe(model_text, 4, input_grad);
    int count = 0;
    first_line[0] = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (strstr(line, "(no gradient to its input)") && count++ == 0)
            snprintf(first_line, len, "%s", line);
    free(text);
    return count;
}

static void test_no_gradient_flows_to_the_input(void **state)
{
    (void)state;
    char line[256];
    /* input -> flatten -> linear: both skip it */
    assert_int_equal(count_no_input_grad("input 1 28 28\nlinear 16\nrelu\nlinear 10\n", false, line,
                                         sizeof line), 2);
    assert_non_null(strstr(line, "flatten"));
    assert_int_equal(count_no_input_grad("input 1 28 28\nlinear 16\nrelu\nlinear 10\n", true, line,
                                         sizeof line), 0);
    /* a parameter-free layer first (pool, then flatten), then weights */
    assert_int_equal(count_no_input_grad("input 2 8 8\nmaxpool k2\nconv 4 k3\nrelu\nlinear 3\n", false,
                                         line, sizeof line), 2);
    assert_non_null(strstr(line, "maxpool"));
    /* both branches of an add after the first weights still want one */
    assert_int_equal(count_no_input_grad("input 4 8 8\nconv 4 k3 p1\nsave a\nconv 4 k3 p1\nrelu\nadd a\n"
                                         "linear 3\n", false,
                                         line, sizeof line), 1);
    assert_non_null(strstr(line, "conv"));
}

/* A ReLU that is a batch norm's only consumer runs inside it (resnet's
 * four after a norm): one layer fewer, said in the net's description; a
 * ReLU after an add, or after a norm something else reads too, stays. */
static void test_relu_fuses_into_norm_and_add(void **state)
{
    (void)state;
    const struct {
        const char *text;
        int layers;
        const char *fused;  /* the kind whose line says "relu fused", NULL: none */
    } cases[] = {
        {"input 4 6 6\nconv 8 k3 p1\nbatchnorm\nrelu\nconv 3 k1", 3, "batchnorm"},
        {"input 4 6 6\nsave a\nconv 4 k3 p1\nbatchnorm\nadd a\nrelu", 3, "add"},
        {"input 4 6 6\nbatchnorm\nsave a\nrelu\nadd a", 3, NULL},                /* the norm read twice */
        {"input 4 6 6\nsave a\nconv 4 k3 p1\nadd a\nsave b\nrelu\nadd b", 4, NULL}, /* the add read twice */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        st_model *m = parse(cases[i].text);
        st_net *n = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
        assert_int_equal(st_net_layers(n), cases[i].layers);
        char *text = net_text(n, st_net_describe_precision);
        bool seen = false;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            const bool fused = strstr(line, "relu fused") != NULL;
            if (fused && !(cases[i].fused && strstr(line, cases[i].fused)))
                fail_msg("%s: a ReLU fused where it should not be: %s", cases[i].text, line);
            seen |= fused;
        }
        if (cases[i].fused && !seen)
            fail_msg("%s: no ReLU fused into the %s", cases[i].text, cases[i].fused);
        free(text);
        st_net_destroy(n);
        st_model_destroy(m);
    }
}

/* A residual block's add keeps its gradient in its branch's buffer; the
 * block's input, which a convolution reads too, gets it by that
 * convolution's sum reading it where it lies: one pass over the input's
 * gradient fewer a step than a copy into its buffer first.  Counted:
 * the same-precision reorders a step of a block whose branch ends in a
 * batch norm, against one whose branch ends in a ReLU that masks the
 * buffer in place (the copy stays: the sum comes after the mask). */
static unsigned long long activation_reorders_a_step(const char *text)
{
    st_model *m = parse(text);
    st_net *n = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    st_net_init(n, 3);
    const size_t in = st_model_input_size(m) * 2, out = st_net_output_size(n);
    float *x = malloc(in * 4), *dy = malloc(out * 4);
    fill_rand(x, in, 1);
    fill_rand(dy, out, 2);
    st_net_counters_reset(n);
    assert_int_equal(st_net_forward(n, x), ST_OK);
    assert_int_equal(st_net_backward_from(n, dy), ST_OK);
    st_net_counters c;
    st_net_counters_get(n, &c);
    free(x), free(dy);
    st_net_destroy(n);
    st_model_destroy(m);
    return c.activation_reorders;
}

static void test_residual_gradient_read_in_place(void **state)
{
    (void)state;
    const unsigned long long norm = activation_reorders_a_step(
        "input 4 6 6\nconv 4 k3 p1\nsave a\nconv 4 k3 p1\nbatchnorm\nadd a\nrelu\nconv 3 k1");
    const unsigned long long masked = activation_reorders_a_step(
        "input 4 6 6\nconv 4 k3 p1\nsave a\nconv 4 k3 p1\nrelu\nadd a\nrelu\nconv 3 k1");
    print_message("same-precision reorders a step: %llu (branch ends in a norm), %llu (in a masking ReLU)\n", norm,
                  masked);
    assert_int_equal(norm + 1, masked);
}

/* A first convolution from 3 channels into 16 reads its input in nhwc; its
 * output goes in 16-channel blocks where the next convolution reads blocks
 * (a residual block's, as resnet's stem feeds), so neither that
 * convolution nor the add reorders it, either way: no more reorders a step
 * than the same net on a 16-channel input, blocked from the start (its
 * input's reorders and the head's plumbing: 5 on a Zen 4 core, against the
 * stem's 4; with the stem's output in nhwc, 9). */
static void test_stem_output_in_blocks(void **state)
{
    (void)state;
    static const char block[] = "conv 16 k3 p1\nbatchnorm\nrelu\nsave a\nconv 16 k3 p1\nbatchnorm\nrelu\n"
                                "conv 16 k3 p1\nbatchnorm\nadd a\nrelu\nconv 32 k3 p1\navgpool k8\nflatten\nlinear 10";
    char text[320];
    snprintf(text, sizeof text, "input 3 8 8\n%s", block);
    const unsigned long long stem = activation_reorders_a_step(text);
    snprintf(text, sizeof text, "input 16 8 8\n%s", block);
    const unsigned long long blocked = activation_reorders_a_step(text);
    print_message("same-precision reorders a step: %llu (a 3-channel stem), %llu (16 channels in)\n", stem, blocked);
    assert_true(stem <= blocked);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comparison_catches_a_wrong_gradient),
        cmocka_unit_test(test_residual_gradient_read_in_place),
        cmocka_unit_test(test_stem_output_in_blocks),
        cmocka_unit_test(test_layers_match_reference_1_thread),
        cmocka_unit_test(test_layers_match_reference_2_threads),
        cmocka_unit_test(test_first_layers_backward_in_chunks),
        cmocka_unit_test(test_stems),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_presets_gradients),
        cmocka_unit_test(test_no_gradient_flows_to_the_input),
        cmocka_unit_test(test_relu_fuses_into_norm_and_add),
        cmocka_unit_test(test_grads_ready_callbacks),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);  /* e.g. test_finite_differences */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
