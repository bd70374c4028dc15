/* The engine trains: SGD drives the loss down the same way twice, every
 * optimizer against PyTorch's update rules, the loss and its gradient
 * against finite differences, the profile accounts for the step, and bad
 * labels are refused.  Layer by layer against the reference: test_nn.c. */
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

/* The rules of the one-parameter test above, on every parameter of a buffer
 * that spans several chunks and several of their pieces (4096 floats), with
 * an odd tail: each element stepped as a plain loop of the same rule steps
 * it (within 2 ulp: the optimizer's loops may fuse a multiply-add). */
static void test_every_parameter_steps(void **state)
{
    (void)state;
    enum { N = 3 * 65536 + 4096 + 7 };
    float *p = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
    assert_non_null(p), assert_non_null(g), assert_non_null(want);
    const st_optim_config kinds[] = {{.kind = ST_OPTIM_SGD, .weight_decay = 0.1f},
                                     {.kind = ST_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.1f},
                                     {.kind = ST_OPTIM_ADAMW, .weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                      .eps = 1e-8f}};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        st_optim *o;
        assert_int_equal(st_optim_create(&o, N, &kinds[k]), ST_OK);
        for (size_t i = 0; i < N; i++) {
            p[i] = 1.0f + (float)(i % 97) / 97.0f;
            g[i] = 0.5f - (float)(i % 13) / 13.0f;
            /* one step from zero state: SGD p - lr (g + wd p) (momentum's first buffer is d itself);
               AdamW p (1 - lr wd) - lr g / (|g| + eps') */
            want[i] = kinds[k].kind == ST_OPTIM_SGD ? p[i] - 0.1f * (g[i] + 0.1f * p[i])
                                                     : p[i] * (1.0f - 0.1f * 0.01f) - 0.1f * (g[i] / (fabsf(g[i]) + 1e-8f));
        }
        st_optim_step(o, p, g, 0.1f);
        for (size_t i = 0; i < N; i++)
            if (!(fabsf(p[i] - want[i]) <= 2e-6f * fabsf(want[i]) + 1e-6f))
                fail_msg("optimizer %zu: parameter %zu of %d stepped to %.9g, its rule gives %.9g", k, i, N, p[i],
                         want[i]);
        st_optim_destroy(o);
    }
    free(p), free(g), free(want);
}

/* The norm as defined before it ran on every thread: 16 float lanes a
 * block of 4096, every block's lanes added in double in order. */
static double norm_in_order(const float *g, size_t n)
{
    double sum = 0;
    for (size_t at = 0; at < n; at += 4096) {
        float acc[16] = {0};
        for (size_t i = at; i < n && i < at + 4096; i++)
            acc[(i - at) % 16] += g[i] * g[i];
        for (int l = 0; l < 16; l++)
            sum += acc[l];
    }
    return sqrt(sum);
}

/* A clip's scale handed to the update (st_optim_step_scaled) gives the bits
 * of scaling the gradients in place first and then stepping, for every
 * optimizer, over a span of several chunks (16384) and pieces (4096) with
 * a ragged end, on one thread and on two; and st_grad_norm is the norm
 * defined in order above, bit for bit, at any thread count. */
static void test_clip_scale_in_the_update(void **state)
{
    (void)state;
    enum { N = 5 * 16384 + 1234 };
    const st_optim_config kinds[] = {{.kind = ST_OPTIM_SGD, .weight_decay = 0.01f},
                                     {.kind = ST_OPTIM_SGD, .momentum = 0.9f, .nesterov = true},
                                     {.kind = ST_OPTIM_ADAMW, .weight_decay = 0.1f}};
    float *g = malloc(N * sizeof *g), *clipped = malloc(N * sizeof *g);
    float *p[2] = {malloc(N * sizeof(float)), malloc(N * sizeof(float))};
    assert_true(g && clipped && p[0] && p[1]);
    fill_rand(g, N, 5);
    const int threads = omp_get_max_threads();
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        const float norm = st_grad_norm(g, N), scale = st_clip_scale(norm, 1.0f);
        if (norm != (float)norm_in_order(g, N))
            fail_msg("%d threads: the norm %.9g, in order %.9g", th, norm, norm_in_order(g, N));
        assert_true(scale < 0.1f && st_clip_scale(norm, 2 * norm) == 1.0f && st_clip_scale(norm, 0) == 1.0f);
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            st_optim *o[2];
            fill_rand(p[0], N, 7);
            memcpy(p[1], p[0], N * sizeof(float));
            memcpy(clipped, g, N * sizeof *g);
            assert_true(st_clip_grad_norm(clipped, N, 1.0f) == norm);
            for (int i = 0; i < 2; i++)
                assert_int_equal(st_optim_create(&o[i], N, &kinds[k]), ST_OK);
            for (int step = 0; step < 2; step++) {
                st_optim_step(o[0], p[0], clipped, 0.01f);
                st_optim_step_scaled(o[1], p[1], g, scale, 0.01f);
            }
            if (memcmp(p[0], p[1], N * sizeof(float)))
                fail_msg("optimizer %zu, %d threads: the scaled update is not the clipped one's bits", k, th);
            st_optim_destroy(o[0]), st_optim_destroy(o[1]);
        }
    }
    omp_set_num_threads(threads);
    free(g), free(clipped), free(p[0]), free(p[1]);
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
        fill_rand(x, B * IN, 21);
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
        fill_rand(x, 2 * 64, 5);
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
        cmocka_unit_test(test_training_drives_loss_down_deterministically),
        cmocka_unit_test(test_optimizers_match_torch_rules),
        cmocka_unit_test(test_every_parameter_steps),
        cmocka_unit_test(test_clip_scale_in_the_update),
        cmocka_unit_test(test_loss_matches_finite_differences),
        cmocka_unit_test(test_profile_accounts_for_the_step),
        cmocka_unit_test(test_bad_labels_are_refused),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
