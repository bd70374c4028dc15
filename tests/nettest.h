/* Test helper for the engine's tests (test_nn, test_gpt, test_bf16): a
 * seeded stream of floats in [-1, 1), model text parsed and nets built or
 * the test failed, and the largest difference between two arrays.  Include
 * after <cmocka.h> and <math.h>. */
#ifndef SHMTRAIN_TESTS_NETTEST_H
#define SHMTRAIN_TESTS_NETTEST_H

#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "shmtrain/nn.h"

/* The next float in [-1, 1) of the stream *s (an LCG: the same on every machine). */
static inline float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* n floats of frand's stream from `seed`. */
static inline void fill_rand(float *v, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = frand(&seed);
}

/* A fixed synthetic problem: class k images have a bright blob at a
 * class-dependent place, plus noise. */
static inline void synthetic_batch(float *x, int *y, int batch, int c, int h, int w, int classes, uint64_t seed)
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

/* The loss's central difference in one value `v` (a parameter or an input
 * element of `x`), restored afterwards. */
static inline double loss_slope(st_net *n, const float *x, const int *labels, float *v, float eps)
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

static inline st_model *parse(const char *text)
{
    st_model *m = NULL;
    if (st_model_parse(&m, text, "test") != ST_OK)
        fail_msg("parse failed: %s", st_last_error());
    return m;
}

/* The engine's switches as this test's environment sets them (ctest sets
 * SHMTRAIN_BF16_ANY_ISA for the *_any_isa entries): a test is a main(). */
static inline st_nn_tuning env_tuning(void)
{
    st_nn_tuning t;
    st_nn_tuning_from_env(&t);
    return t;
}

/* bf16 runs here: natively, or on oneDNN's reference kernels where this
 * test's environment asks for them (the *_any_isa ctest entries). */
static inline bool bf16_here(void)
{
    const st_nn_tuning t = env_tuning();
    return st_nn_native(ST_DTYPE_BF16, &t);
}

static inline st_net *make_net(const st_model *m, int batch, st_backend b, st_dtype precision, bool input_grad)
{
    st_net *n = NULL;
    st_net_config c = {.batch = batch, .backend = b, .precision = precision, .input_grad = input_grad,
                       .tuning = env_tuning()};
    if (st_net_create(&n, m, &c) != ST_OK)
        fail_msg("net failed: %s", st_last_error());
    return n;
}

/* What `say` (st_net_describe, st_net_describe_precision) says of the
 * net, as text (the caller frees it). */
static inline char *net_text(const st_net *n, void (*say)(const st_net *, FILE *))
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_non_null(f);
    say(n, f);
    fclose(f);
    return text;
}

static inline char *net_description(const st_net *n) { return net_text(n, st_net_describe); }

/* max |a - b| (NaN counts as the worst), where, and max |b| (at least `floor`). */
static inline double max_diff(const float *a, const float *b, size_t n, double floor, size_t *at, double *scale)
{
    double worst = 0;
    *scale = floor;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > worst || isnan(d))
            worst = d, *at = i;
        *scale = fmax(*scale, fabs(b[i]));
    }
    return worst;
}

/* The root mean square of a - b over n values (0 for none). */
static inline double rms_diff(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)(n ? n : 1));
}

#endif
