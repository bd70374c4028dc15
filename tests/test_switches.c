/* Every engine switch (include/shmtrain/tuning.h) against the engine as
 * built: the same parameters and batch through a net with the switch on
 * and one without give the same loss, outputs and parameter gradients
 * within fp32 round-off, and the switch changes what is built (its
 * description), so that a switch the engine ignores fails too. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nettest.h"
#include "shmtrain/nn.h"

/* A model that takes the path each switch turns back. */
static const struct {
    const char *env;
    const char *model;
    int batch;
    st_dtype precision;  /* fp32 unless the switch acts in a bf16 net */
    int amx;             /* 1: only where oneDNN has AMX, -1: only where it has not (the other is the default) */
    bool avx512;         /* only where the CPU has AVX-512F (without it the switch's path is the default) */
} CASES[] = {
    /* cnn's first convolution: 64 x 32 x 26 x 26 outputs do not fit L2, so it runs in its max-pool's chunks */
    {"SHMTRAIN_ONEDNN_NO_CHUNKS", "cnn", 64, ST_DTYPE_F32, 0, false},
    /* lenet's second convolution reads 6 channels, nhwc */
    {"SHMTRAIN_ONEDNN_BRGCONV", "lenet", 16, ST_DTYPE_F32, 0, false},
    {"SHMTRAIN_ONEDNN_STEM", "lenet", 16, ST_DTYPE_F32, 0, false},      /* one channel into 6: stem.c */
    {"SHMTRAIN_ONEDNN_IP_ANY", "mlp", 16, ST_DTYPE_F32, 0, false},
    /* 8 x 64 = 512 rows: AMX's blocked weights */
    {"SHMTRAIN_ONEDNN_IP_PLAIN", "gpt-mini", 8, ST_DTYPE_BF16, 1, false},
    /* 512 rows, 384 wide: dW as a matmul on the tiles */
    {"SHMTRAIN_ONEDNN_WGRAD_IP", "gpt", 2, ST_DTYPE_BF16, 1, false},
    /* AMX's blocked weights and tables */
    {"SHMTRAIN_ONEDNN_REORDERED_COPIES", "gpt-mini", 8, ST_DTYPE_BF16, 1, false},
    {"SHMTRAIN_ONEDNN_POOL", "lenet", 16, ST_DTYPE_F32, 0, false},
    {"SHMTRAIN_ONEDNN_SEQ_TN", "gpt-mini", 2, ST_DTYPE_F32, 0, false},
    {"SHMTRAIN_ONEDNN_LAYERNORM", "gpt-mini", 2, ST_DTYPE_F32, 0, false},
    /* one chunk: the same products, the same bits */
    {"SHMTRAIN_ONEDNN_UNFUSED_LOSS", "gpt-mini", 2, ST_DTYPE_F32, 0, false},
    {"SHMTRAIN_ATTENTION_FP32", "gpt-mini", 2, ST_DTYPE_BF16, 0, false},  /* where the CPU has AVX512-BF16 */
    /* gpt-mini's heads (T 64, 32 dimensions) fit the short-context kernel: the switches act on AVX-512 */
    {"SHMTRAIN_ATTENTION_MATMUL", "gpt-mini", 2, ST_DTYPE_BF16, 0, true},
    {"SHMTRAIN_ATTENTION_MATMUL", "gpt-mini", 2, ST_DTYPE_F32, 0, true},
    {"SHMTRAIN_ATTENTION_DOT", "gpt-mini", 2, ST_DTYPE_BF16, 0, true},
    {"SHMTRAIN_ATTENTION_TILES", "gpt-mini", 2, ST_DTYPE_F32, 0, false},
};

/* Forward, loss, backward of `n` with these parameters on this batch. */
static float run(st_net *n, const float *params, const void *x, const int *labels)
{
    size_t P;
    float *mine = st_net_params(n, &P);
    memcpy(mine, params, P * sizeof(float));
    float loss;
    int correct;
    assert_int_equal(st_net_forward(n, x), ST_OK);
    assert_int_equal(st_net_loss(n, labels, &loss, &correct), ST_OK);
    assert_int_equal(st_net_backward(n), ST_OK);
    return loss;
}

/* Tolerance: the two nets sum the same products (dot products of at most
 * 784 terms here) in other orders and blockings; such round-off grows as
 * sqrt(k) eps (3e-6 relative to the largest value at k = 784), and through
 * backward's chained products a few times that.  1e-4 of each array's
 * largest magnitude leaves 10x; a switch computing something else (a
 * transposed weight gradient, a layer norm without its epsilon) is off by
 * 1e-2 and more. */
#define TOL 1e-4
/* A switch in a bf16 net between bf16 and fp32 arithmetic (attention's
 * products): each rounded operand is off by up to u = 2^-8 of itself, and
 * between the loss and a gradient a few such products chain (attention's
 * two forward, three backward), so 4u of the largest. */
#define BF16_TOL (4.0 / 256)

static void check_switch(int k)
{
    if (CASES[k].precision == ST_DTYPE_BF16 && !__builtin_cpu_supports("avx512bf16")) {
        print_message("    %-30s skipped: no AVX512-BF16, nothing in bf16 to switch\n", CASES[k].env);
        return;
    }
    if (CASES[k].amx && (CASES[k].amx > 0) != st_nn_amx_supported()) {
        print_message("    %-30s skipped: the default where oneDNN %s AMX\n", CASES[k].env,
                      CASES[k].amx > 0 ? "has no" : "has");
        return;
    }
    if (CASES[k].avx512 && !__builtin_cpu_supports("avx512f")) {
        print_message("    %-30s skipped: the default without AVX-512F\n", CASES[k].env);
        return;
    }
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, CASES[k].model), ST_OK);
    const int batch = CASES[k].batch, vocab = st_model_vocab(m);
    const size_t inputs = st_model_input_size(m) * (size_t)batch, rows = (size_t)batch * st_model_positions(m);
    float *x = malloc(inputs * sizeof *x);
    int *labels = malloc(rows * sizeof *labels);
    uint64_t seed = 11 + (uint64_t)k;
    for (size_t i = 0; i < inputs; i++) {
        x[i] = frand(&seed);
        if (vocab)
            ((int32_t *)x)[i] = (int32_t)(i * 7 % (size_t)vocab);  /* token ids */
    }
    for (size_t i = 0; i < rows; i++)
        labels[i] = (int)(i * 3 % (size_t)st_model_classes(m));
    st_net_config base = {.batch = batch, .precision = CASES[k].precision}, switched = base;
    const double tol = CASES[k].precision == ST_DTYPE_BF16 ? BF16_TOL : TOL;
    assert_true(st_nn_tuning_set(&switched.tuning, CASES[k].env, true));
    st_net *a = NULL, *b = NULL;
    assert_int_equal(st_net_create(&a, m, &base), ST_OK);
    assert_int_equal(st_net_create(&b, m, &switched), ST_OK);
    size_t P;
    const float *init = st_net_params(a, &P);
    float *params = malloc(P * sizeof *params);
    memcpy(params, init, P * sizeof *params);
    const float la = run(a, params, x, labels), lb = run(b, params, x, labels);
    if (!(fabs(la - lb) <= tol * fmax(1.0, fabs(la))))
        fail_msg("%s on %s: loss %.7g, without %.7g", CASES[k].env, CASES[k].model, lb, la);
    size_t at;
    double scale;
    const float *ga = st_net_grads(a, NULL), *gb = st_net_grads(b, NULL);
    const double worst = max_diff(gb, ga, P, 0, &at, &scale);
    if (!(worst <= tol * scale))
        fail_msg("%s on %s: gradient %zu is %g, without %g (scale %g)", CASES[k].env, CASES[k].model, at,
                 (double)gb[at], (double)ga[at], scale);
    char *da = net_description(a), *db = net_description(b);
    if (!strcmp(da, db))
        fail_msg("%s on %s: built the same net as without it:\n%s", CASES[k].env, CASES[k].model, da);
    print_message("    %-30s %-8s loss %.7g / %.7g, gradients within %.2g of %.2g\n", CASES[k].env, CASES[k].model, lb,
                  la, worst, scale);
    free(da), free(db), free(params), free(x), free(labels);
    st_net_destroy(a), st_net_destroy(b);
    st_model_destroy(m);
}

static void test_every_switch_computes_alike(void **state)
{
    (void)state;
    st_nn_flush_denormals(true);
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++)
        check_switch((int)k);
}

/* Every switch the engine has is in CASES (or is the verbosity or the
 * bf16 test hook, which compute nothing else), and the environment reader
 * sets exactly its own field. */
static void test_the_switches_are_the_table(void **state)
{
    (void)state;
    int n;
    const st_nn_switch *sw = st_nn_switches(&n);
    for (int i = 0; i < n; i++) {
        bool listed = !strcmp(sw[i].env, "SHMTRAIN_NN_VERBOSE") || !strcmp(sw[i].env, "SHMTRAIN_BF16_ANY_ISA");
        for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++)
            listed |= !strcmp(CASES[k].env, sw[i].env);
        if (!listed)
            fail_msg("%s has no case in test_switches.c", sw[i].env);
        st_nn_tuning t = {0}, want = {0};
        setenv(sw[i].env, "1", 1);
        st_nn_tuning_from_env(&t);
        unsetenv(sw[i].env);
        *(bool *)((char *)&want + sw[i].offset) = true;
        assert_memory_equal(&t, &want, sizeof t);
        setenv(sw[i].env, "0", 1);  /* "0" is off */
        st_nn_tuning_from_env(&t);
        unsetenv(sw[i].env);
        assert_false(*(bool *)((char *)&t + sw[i].offset));
    }
    st_nn_tuning t = {0};
    assert_false(st_nn_tuning_set(&t, "SHMTRAIN_ONEDNN_NOTHING", true));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_switches_are_the_table),
        cmocka_unit_test(test_every_switch_computes_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
