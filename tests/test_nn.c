/* The engine: every layer on oneDNN against the plain-C reference (forward,
 * backward data, backward weights) and against finite differences, at 1 and
 * 2 OpenMP threads; whole presets; training; determinism.  The model text
 * and its presets: test_model.c. */
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

static void fill(float *v, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = frand(&seed);
}

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
    "input 4 6 6\nsave a\nconv 4 k3 p1\nbatchnorm\nadd a\nrelu",
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
    fill(x, in, 1);
    fill(dy, out, 2);
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

/* ------------------------------------------------------ gradients ready -- */

static void synthetic_batch(float *x, int *y, int batch, int c, int h, int w, int classes, uint64_t seed);

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
    fill(x, in, 3);
    fill(w, out, 4);
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
    "input 4 4 4\ndropout 0.5\nconv 3 k1",
    "input 4 4 4\nsave a\nconv 4 k3 p1\nadd a\nconv 2 k1",
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

/* The loss's central difference in one value `v` (a parameter or an input
 * element of `x`), restored afterwards. */
static double loss_slope(st_net *n, const float *x, const int *labels, float *v, float eps)
{
    const float keep = *v;
    float lp, lm;
    *v = keep + eps;
    st_net_forward(n, x);
    st_net_loss(n, labels, &lp, NULL);
    *v = keep - eps;
    st_net_forward(n, x);
    st_net_loss(n, labels, &lm, NULL);
    *v = keep;
    return ((double)lp - lm) / (2 * eps);
}

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
    fill(x, in, 9);
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

/* ------------------------------------------------------------ training -- */

/* A fixed synthetic problem: class k images have a bright blob at a
 * class-dependent place, plus noise. */
static void synthetic_batch(float *x, int *y, int batch, int c, int h, int w, int classes, uint64_t seed)
{
    for (int i = 0; i < batch; i++) {
        int k = (int)((seed * 31 + (uint64_t)i * 17) % (uint64_t)classes);
        y[i] = k;
        for (int ch = 0; ch < c; ch++)
            for (int r = 0; r < h; r++)
                for (int q = 0; q < w; q++) {
                    uint64_t s = seed * 1000003 + (uint64_t)(((i * c + ch) * h + r) * w + q);
                    float noise = frand(&s) * 0.3f;
                    int cy = (k * 5) % h, cx = (k * 7) % w;
                    float blob = (abs(r - cy) <= 2 && abs(q - cx) <= 2) ? 1.0f : 0.0f;
                    x[((i * c + ch) * h + r) * w + q] = blob + noise;
                }
    }
}

static void train(const char *preset, st_optim_kind kind, int steps, float lr, float *first, float *last,
                  uint64_t *param_hash)
{
    omp_set_num_threads(2);
    assert_true(st_nn_flush_denormals(true));
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, preset), ST_OK);
    const int batch = 16;
    int c, h, w;
    st_model_input_shape(m, &c, &h, &w);
    st_net *n = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    st_net_init(n, 42);
    size_t P;
    float *p = st_net_params(n, &P), *g = st_net_grads(n, NULL);
    st_optim *o = NULL;
    st_optim_config oc = {.kind = kind, .momentum = kind == ST_OPTIM_SGD ? 0.9f : 0, .weight_decay = 1e-4f};
    assert_int_equal(st_optim_create(&o, P, &oc), ST_OK);
    float *x = malloc((size_t)batch * c * h * w * 4);
    int y[16];
    double early = 0, late = 0;
    for (int s = 0; s < steps; s++) {
        synthetic_batch(x, y, batch, c, h, w, st_model_classes(m), (uint64_t)s % 20);
        float loss;
        assert_int_equal(st_net_forward(n, x), ST_OK);
        assert_int_equal(st_net_loss(n, y, &loss, NULL), ST_OK);
        assert_int_equal(st_net_backward(n), ST_OK);
        st_clip_grad_norm(g, P, 5.0f);
        st_optim_step(o, p, g, lr);
        if (s < 20)
            early += loss / 20;
        if (s >= steps - 20)
            late += loss / 20;
    }
    *first = (float)early;
    *last = (float)late;
    uint64_t hsh = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < P * 4; i++)
        hsh = (hsh ^ b[i]) * 1099511628211ull;
    *param_hash = hsh;
    free(x);
    st_optim_destroy(o);
    st_net_destroy(n);
    st_model_destroy(m);
    st_nn_flush_denormals(false);
}

static void test_training_drives_loss_down_deterministically(void **state)
{
    (void)state;
    const struct {
        const char *preset;
        st_optim_kind kind;
        float lr;
    } runs[] = {{"mlp", ST_OPTIM_SGD, 0.05f}, {"lenet", ST_OPTIM_SGD, 0.05f}, {"cnn", ST_OPTIM_ADAMW, 1e-3f}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        float a0, a1, b0, b1;
        uint64_t ha, hb;
        train(runs[i].preset, runs[i].kind, 200, runs[i].lr, &a0, &a1, &ha);
        if (!(a1 < 0.3f * a0))
            fail_msg("%s: loss only went from %.4f to %.4f", runs[i].preset, a0, a1);
        train(runs[i].preset, runs[i].kind, 200, runs[i].lr, &b0, &b1, &hb);
        assert_true(ha == hb);  /* same seed, same bits */
        assert_true(a1 == b1);
    }
}

static void test_optimizers_match_torch_rules(void **state)
{
    (void)state;
    /* Hand-computed torch.optim steps on one parameter. */
    st_optim *o;
    float p = 1.0f, g = 0.5f;
    assert_int_equal(st_optim_create(&o, 1, &(st_optim_config){.kind = ST_OPTIM_SGD, .momentum = 0.9f,
                                                                 .weight_decay = 0.1f}), ST_OK);
    st_optim_step(o, &p, &g, 0.1f);  /* d = 0.5 + 0.1 = 0.6; buf = 0.6; p = 1 - 0.06 */
    assert_true(fabsf(p - 0.94f) < 1e-6f);
    st_optim_step(o, &p, &g, 0.1f);  /* d = 0.594; buf = 0.54 + 0.594 = 1.134; p = 0.94 - 0.1134 */
    assert_true(fabsf(p - 0.8266f) < 1e-6f);
    st_optim_destroy(o);
    p = 1.0f;
    assert_int_equal(st_optim_create(&o, 1, &(st_optim_config){.kind = ST_OPTIM_ADAMW, .weight_decay = 0.01f}),
                     ST_OK);
    st_optim_step(o, &p, &g, 0.1f);  /* p*(1-0.001) - 0.1 * 1 (first Adam step is lr*sign) */
    assert_true(fabsf(p - (0.999f - 0.1f)) < 1e-5f);
    st_optim_destroy(o);
    assert_int_equal(st_optim_create(&o, 1, &(st_optim_config){.nesterov = true}), ST_ERR_INVALID);
    st_schedule s = {.kind = ST_SCHED_COSINE, .lr = 1.0f, .warmup = 10, .total = 110};
    assert_true(fabsf(st_schedule_lr(&s, 0) - 0.1f) < 1e-6f);
    assert_true(fabsf(st_schedule_lr(&s, 9) - 1.0f) < 1e-6f);
    assert_true(fabsf(st_schedule_lr(&s, 60) - 0.5f) < 1e-6f);
    assert_true(st_schedule_lr(&s, 110) < 1e-6f);
    s = (st_schedule){.kind = ST_SCHED_STEP, .lr = 1.0f, .step_size = 5, .gamma = 0.5f};
    assert_true(fabsf(st_schedule_lr(&s, 12) - 0.25f) < 1e-6f);
    float grads[2] = {3, 4};
    assert_true(fabsf(st_clip_grad_norm(grads, 2, 1.0f) - 5.0f) < 1e-6f);
    assert_true(fabsf(grads[0] - 0.6f) < 1e-4f && fabsf(grads[1] - 0.8f) < 1e-4f);
}

/* The loss on its own: its value and accuracy against log-sum-exp in double
 * from the logits, and its gradient (through one linear layer, which the
 * tests above check) against finite differences of the loss itself.  The
 * preset checks go through whole models with loose tolerances; an error of
 * 1% in the softmax part of the gradient gets past them, not past this. */
static void test_loss_matches_finite_differences(void **state)
{
    (void)state;
    enum { B = 3, IN = 4, K = 5 };
    st_model *m = parse("input 4 1 1\nlinear 5");
    for (int backend = 0; backend < 2; backend++) {
        st_net *n = make_net(m, B, backend ? ST_BACKEND_REFERENCE : ST_BACKEND_ONEDNN, ST_DTYPE_F32, true);
        st_net_init(n, 11);
        float x[B * IN], z[B * K], dx[B * IN], loss;
        int y[B], correct, expect_correct = 0;
        fill(x, B * IN, 21);
        for (int i = 0; i < B * IN; i++)
            x[i] *= 4;  /* logits of a few units: a softmax far from uniform */
        assert_int_equal(st_net_forward(n, x), ST_OK);
        assert_int_equal(st_net_output(n, z), ST_OK);
        for (int i = 0; i < B; i++) {  /* samples 0 and 2 right, 1 wrong */
            int best = 0;
            for (int j = 1; j < K; j++)
                best = z[i * K + j] > z[i * K + best] ? j : best;
            y[i] = i == 1 ? (best + 1) % K : best;
        }
        assert_int_equal(st_net_loss(n, y, &loss, &correct), ST_OK);
        double expect = 0;
        for (int i = 0; i < B; i++) {
            double zmax = z[i * K], sum = 0;
            int best = 0;
            for (int j = 1; j < K; j++)
                if (z[i * K + j] > zmax)
                    zmax = z[i * K + j], best = j;
            for (int j = 0; j < K; j++)
                sum += exp(z[i * K + j] - zmax);
            expect += (zmax + log(sum) - z[i * K + y[i]]) / B;
            expect_correct += best == y[i];
        }
        assert_true(fabs(loss - expect) < 1e-6 * (1 + fabs(expect)));
        assert_int_equal(expect_correct, 2);
        assert_int_equal(correct, expect_correct);
        assert_int_equal(st_net_backward(n), ST_OK);
        assert_int_equal(st_net_input_grad(n, dx), ST_OK);
        for (int i = 0; i < B * IN; i++) {
            const double num = loss_slope(n, x, y, &x[i], 3e-3f);
            if (fabs(num - dx[i]) > 2e-4 + 2e-3 * fabs(num))
                fail_msg("%s input %d: d loss finite difference %.6g vs analytic %.6g",
                         backend ? "reference" : "oneDNN", i, num, (double)dx[i]);
        }
        st_net_destroy(n);
    }
    st_model_destroy(m);
}

static double profiled(const st_net_profile *p, const char *name)
{
    for (int k = 0; k < p->kinds; k++)
        if (!strcmp(p->names[k], name))
            return p->seconds[k];
    fail_msg("profile has no entry \"%s\"", name);
    return -1;
}

/* The per-kind profile st-step-bench reports: the layer kinds a model has
 * and the loss get time, kinds it lacks get none, it all fits inside the
 * wall-clock time of the steps, enabling resets it and disabled it stays put. */
static void test_profile_accounts_for_the_step(void **state)
{
    (void)state;
    omp_set_num_threads(1);
    st_model *m = parse("input 1 8 8\nconv 4 k3 p1\nrelu\nmaxpool k2\nflatten\nlinear 3");
    for (int backend = 0; backend < 2; backend++) {
        st_net *n = make_net(m, 2, backend ? ST_BACKEND_REFERENCE : ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
        st_net_init(n, 1);
        float x[2 * 64];
        int y[2] = {0, 2};
        fill(x, 2 * 64, 5);
        st_net_profile p;
        st_net_profile_enable(n, true);
        const double t0 = omp_get_wtime();
        for (int i = 0; i < 3; i++) {
            assert_int_equal(st_net_forward(n, x), ST_OK);
            assert_int_equal(st_net_loss(n, y, NULL, NULL), ST_OK);
            assert_int_equal(st_net_backward(n), ST_OK);
        }
        const double wall = omp_get_wtime() - t0;
        st_net_profile_get(n, &p);
        assert_true(profiled(&p, "conv") > 0);
        assert_true(profiled(&p, "linear") > 0);
        assert_true(profiled(&p, "loss") > 0);
        assert_true(profiled(&p, "batchnorm") == 0 && profiled(&p, "dropout") == 0);
        double sum = 0;
        for (int k = 0; k < p.kinds; k++)
            sum += p.seconds[k];
        assert_true(sum <= wall);
        st_net_profile_enable(n, true);
        st_net_profile_get(n, &p);
        for (int k = 0; k < p.kinds; k++)
            assert_true(p.seconds[k] == 0);
        st_net_profile_enable(n, false);
        assert_int_equal(st_net_forward(n, x), ST_OK);
        assert_int_equal(st_net_loss(n, y, NULL, NULL), ST_OK);
        st_net_profile_get(n, &p);
        assert_true(profiled(&p, "conv") == 0 && profiled(&p, "loss") == 0);
        st_net_destroy(n);
    }
    st_model_destroy(m);
}

static void test_bad_labels_are_refused(void **state)
{
    (void)state;
    st_model *m = parse("input 4 1 1\nlinear 3");
    st_net *n = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    float x[8] = {0};
    int y[2] = {0, 3};
    assert_int_equal(st_net_forward(n, x), ST_OK);
    assert_int_equal(st_net_loss(n, y, NULL, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "label 3 of sample 1"));
    st_net_destroy(n);
    st_model_destroy(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comparison_catches_a_wrong_gradient),
        cmocka_unit_test(test_optimizers_match_torch_rules),
        cmocka_unit_test(test_bad_labels_are_refused),
        cmocka_unit_test(test_loss_matches_finite_differences),
        cmocka_unit_test(test_profile_accounts_for_the_step),
        cmocka_unit_test(test_layers_match_reference_1_thread),
        cmocka_unit_test(test_layers_match_reference_2_threads),
        cmocka_unit_test(test_first_layers_backward_in_chunks),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_presets_gradients),
        cmocka_unit_test(test_no_gradient_flows_to_the_input),
        cmocka_unit_test(test_training_drives_loss_down_deterministically),
        cmocka_unit_test(test_grads_ready_callbacks),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);  /* e.g. test_finite_differences */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
