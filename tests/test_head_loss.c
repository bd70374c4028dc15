/* The tied head fused with its loss (src/nn/onednn/onednn_head.c): against the
 * same net holding whole logits (tuning.unfused_loss) bit for bit in fp32,
 * against the reference backend within fp32 round-off, in bf16 against
 * fp32 within bf16's rounding, at gpt-mini's vocabulary (256, one chunk)
 * and GPT-2's (50304, its 512 rows in chunks of at most 80: six of 74 and
 * a tail of 68; 512 rows take AMX's blocked tables where oneDNN has AMX);
 * st_net_score against st_net_loss; and a backward with neither a loss nor
 * an output gradient refused. */
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

/* GPT-2's vocabulary on a narrow table, its rows in several chunks and a
 * shorter last one as gpt2's recipe has them (12 x 1024 rows in chunks of
 * at most 1334), at a cost a test can pay. */
static const char *const WIDE = "input tokens 64\nembed 50304 32\nlayernorm\nhead tied\n";
#define WIDE_CHUNK_ROWS 80
static const char *const MINI = "gpt-mini";

struct result {
    float loss;
    int correct;
    float *grads, *output;
    size_t params, outputs;
};

static st_model *load(const char *what)
{
    st_model *m = NULL;
    if (strchr(what, '\n'))
        return parse(what);
    assert_int_equal(st_model_load(&m, what), ST_OK);
    return m;
}

/* Forward, output, loss and backward of `what` at `batch` with parameters
 * from seed 3 (spread 0.5: a softmax far from uniform) on fixed tokens. */
static struct result run_chunked(const char *what, int batch, st_backend backend, st_dtype precision, bool unfused,
                                 int chunk_rows, bool plain_table)
{
    st_model *m = load(what);
    st_net_config c = {.batch = batch, .backend = backend, .precision = precision, .tuning = env_tuning()};
    c.tuning.unfused_loss = unfused;
    c.head_chunk_rows = chunk_rows;
    c.tuning.ip_plain = plain_table;
    st_net *n = NULL;
    if (st_net_create(&n, m, &c) != ST_OK)
        fail_msg("net: %s", st_last_error());
    struct result r = {0};
    float *p = st_net_params(n, &r.params);
    fill_rand(p, r.params, 3);
    for (size_t i = 0; i < r.params; i++)
        p[i] *= 0.5f;
    const int vocab = st_model_vocab(m), rows = batch * st_model_positions(m);
    int32_t *ids = malloc((size_t)rows * sizeof *ids);
    int *labels = malloc((size_t)rows * sizeof *labels);
    for (int i = 0; i < rows; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % vocab);
        labels[i] = (i * 13 + 5) % vocab;
    }
    r.outputs = st_net_output_size(n);
    r.output = malloc(r.outputs * sizeof(float));
    r.grads = malloc(r.params * sizeof(float));
    assert_int_equal(st_net_forward(n, ids), ST_OK);
    assert_int_equal(st_net_output(n, r.output), ST_OK);
    assert_int_equal(st_net_loss(n, labels, &r.loss, &r.correct), ST_OK);
    assert_int_equal(st_net_backward(n), ST_OK);
    memcpy(r.grads, st_net_grads(n, NULL), r.params * sizeof(float));
    if (chunk_rows == WIDE_CHUNK_ROWS && backend == ST_BACKEND_ONEDNN) {  /* the chunks asked for, not one */
        char *said = net_description(n);
        if (!strstr(said, "74 rows a chunk"))
            fail_msg("the head is not in chunks of 74 rows:\n%s", said);
        const bool blocked = precision == ST_DTYPE_BF16 && st_nn_amx_supported() && !plain_table;
        if (!strstr(said, "AMX-blocked") != !blocked)  /* 512 rows: blocked wherever AMX, unless asked */
            fail_msg("the head's table %s AMX's blocked layouts:\n%s", blocked ? "is not in" : "is in", said);
        free(said);
    }
    free(ids);
    free(labels);
    st_net_destroy(n);
    st_model_destroy(m);
    return r;
}

/* WIDE in its chunks of 74 and 68 rows; the others as the engine chunks them. */
static struct result run(const char *what, int batch, st_backend backend, st_dtype precision, bool unfused)
{
    return run_chunked(what, batch, backend, precision, unfused, what == WIDE ? WIDE_CHUNK_ROWS : 0, false);
}

static void result_free(struct result *r)
{
    free(r->grads);
    free(r->output);
}

static void check_close(const char *what, const float *a, const float *b, size_t count, double tolerance)
{
    size_t at;
    double scale;
    const double worst = max_diff(a, b, count, 1e-3, &at, &scale);
    print_message("  %-8s within %.2g of %.2g (at %zu)\n", what, worst, scale, at);
    if (!(worst <= tolerance * scale))
        fail_msg("%s: %g at %zu, more than %g of %g", what, worst, at, tolerance, scale);
}

/* Fused and unfused run the same chunks through the same products: the
 * same bits, the loss, the logits and every gradient. */
static void test_fused_is_unfused_bit_for_bit(void **state)
{
    (void)state;
    const char *models[] = {MINI, WIDE};
    const int batches[] = {2, 8};
    for (int k = 0; k < 2; k++) {
        struct result f = run(models[k], batches[k], ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
        struct result u = run(models[k], batches[k], ST_BACKEND_ONEDNN, ST_DTYPE_F32, true);
        print_message("%s: loss %.7g fused, %.7g unfused\n", k ? "vocabulary 50304" : "gpt-mini", f.loss, u.loss);
        assert_memory_equal(&f.loss, &u.loss, sizeof f.loss);
        assert_int_equal(f.correct, u.correct);
        assert_memory_equal(f.output, u.output, f.outputs * sizeof(float));
        assert_memory_equal(f.grads, u.grads, f.params * sizeof(float));
        result_free(&f);
        result_free(&u);
    }
}

/* Against the definition.  The logits are sums of 32 (128 for gpt-mini)
 * products, their round-off ~sqrt(k) eps relative; the table's gradient
 * sums 512 rows' in chunks (6 x 74 + 68) where the reference sums them in one
 * order in double: 1e-5 of the largest magnitude is ~17x fp32's sqrt(512)
 * eps; a wrong scale, a lost chunk or a gradient of the wrong rows is off
 * by 1e-2 and more. */
static void test_fused_matches_the_reference(void **state)
{
    (void)state;
    struct result f = run(WIDE, 8, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    struct result r = run(WIDE, 8, ST_BACKEND_REFERENCE, ST_DTYPE_F32, false);
    print_message("vocabulary 50304, 512 rows: loss %.7g fused, %.7g reference\n", f.loss, r.loss);
    assert_true(fabsf(f.loss - r.loss) <= 1e-5f * fabsf(r.loss));
    check_close("logits", f.output, r.output, f.outputs, 1e-5);
    check_close("grads", f.grads, r.grads, f.params, 1e-5);
    result_free(&f);
    result_free(&r);
}

/* bf16 against fp32, both fused.  Each product's operands are rounded to
 * bf16 (relative 2^-9 each) and summed in fp32: a logit or a gradient
 * element is off by about 2 x 2^-9 of its terms' magnitude, which for
 * these sums stays under 2^-7 of the largest element; 2e-2 leaves ~3x, and
 * the loss, a mean over 512 rows of log-sum-exps, moves far less (1e-3).
 * A tail chunk run through the whole chunk's products, or a transposed
 * table, is off by the elements' own size. */
static void test_bf16_head_within_rounding(void **state)
{
    (void)state;
    if (!bf16_here()) {
        print_message("skipped: no native bf16 here\n");
        return;
    }
    struct result b = run(WIDE, 8, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, false);
    struct result f = run(WIDE, 8, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    struct result u = run(WIDE, 8, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, true);
    print_message("vocabulary 50304 in bf16: loss %.7g, fp32 %.7g\n", b.loss, f.loss);
    assert_true(fabsf(b.loss - f.loss) <= 1e-3f * fabsf(f.loss));
    check_close("logits", b.output, f.output, f.outputs, 2e-2);
    check_close("grads", b.grads, f.grads, f.params, 2e-2);
    /* fused and unfused in bf16: the same chunks, the same bits */
    assert_memory_equal(&b.loss, &u.loss, sizeof b.loss);
    assert_memory_equal(b.grads, u.grads, b.params * sizeof(float));
    /* in chunks and in one: the same bf16 operands, only the table
     * gradient's fp32 partial sums added in another order (a few fp32 ulps
     * of the largest element; 1e-5 leaves ~10x); a row counted twice or
     * lost, as a tail chunk through the whole chunk's products does, moves
     * elements by about 1/512 of the largest */
    struct result one = run_chunked(WIDE, 8, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, false, 0, false);
    assert_memory_equal(&b.loss, &one.loss, sizeof b.loss);
    check_close("grads, one chunk", b.grads, one.grads, b.params, 1e-5);
    /* where AMX blocks the table (and the rows), against the plain table:
     * the same operands in other blockings, the same bound; a blocked copy
     * never refreshed, or rows reordered from another chunk, are off by
     * the elements' own size */
    struct result plain = run_chunked(WIDE, 8, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, false, WIDE_CHUNK_ROWS, true);
    check_close("logits, plain table", b.output, plain.output, b.outputs, 1e-5);
    check_close("grads, plain table", b.grads, plain.grads, b.params, 1e-5);
    result_free(&plain);
    result_free(&b);
    result_free(&f);
    result_free(&u);
    result_free(&one);
}

/* st_net_score is the loss without the gradient: over all rows, the same
 * sum st_net_loss averages; over the first rows, those rows' alone (a last
 * evaluation batch: fewer rows than the products were built for, which in
 * bf16 have fixed shapes), checked against the rows' losses from a net of
 * one sample; rows past the batch refused.  In fp32, and in bf16 where it
 * runs. */
static void score_is_the_loss(st_dtype precision)
{
    st_model *m = load(WIDE);
    st_net *two = make_net(m, 2, ST_BACKEND_ONEDNN, precision, false);
    st_net *one = make_net(m, 1, ST_BACKEND_ONEDNN, precision, false);
    size_t count;
    float *p2 = st_net_params(two, &count), *p1 = st_net_params(one, NULL);
    fill_rand(p2, count, 5);
    memcpy(p1, p2, count * sizeof(float));
    int32_t ids[128];
    int labels[128];
    for (int i = 0; i < 128; i++)
        ids[i] = (int32_t)(i * 97 % 50304), labels[i] = (i * 31 + 1) % 50304;
    assert_int_equal(st_net_forward(two, ids), ST_OK);
    double sum, first;
    int right, right_first;
    assert_int_equal(st_net_score(two, labels, 128, &sum, &right), ST_OK);
    assert_int_equal(st_net_score(two, labels, 64, &first, &right_first), ST_OK);
    float loss;
    int correct;
    assert_int_equal(st_net_loss(two, labels, &loss, &correct), ST_OK);
    assert_true(loss == (float)(sum / 128));
    assert_int_equal(correct, right);
    assert_int_equal(st_net_forward(one, ids), ST_OK);
    assert_int_equal(st_net_loss(one, labels, &loss, &correct), ST_OK);
    print_message("%s, first sample's 64 rows: %.9g scored, %.9g from a net of one\n", st_dtype_name(precision),
                  first / 64, (double)loss);
    assert_true(fabs(first / 64 - loss) <= 1e-6 * fabs(loss));
    assert_int_equal(right_first, correct);
    assert_int_equal(st_net_score(two, labels, 129, &sum, &right), ST_ERR_INVALID);
    st_net_destroy(two);
    st_net_destroy(one);
    st_model_destroy(m);
}

static void test_score_is_the_loss(void **state)
{
    (void)state;
    score_is_the_loss(ST_DTYPE_F32);
    if (bf16_here())
        score_is_the_loss(ST_DTYPE_BF16);
}

/* A backward with nothing to start from fails, naming why, rather than
 * running from the last step's gradients: before any loss, and a second
 * time after one. */
static void test_backward_needs_a_loss(void **state)
{
    (void)state;
    st_model *m = load(MINI);
    st_net *n = make_net(m, 1, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    int32_t ids[64] = {0};
    int labels[64] = {0};
    assert_int_equal(st_net_forward(n, ids), ST_OK);
    assert_int_equal(st_net_backward(n), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "without a loss"));
    /* one loss makes one backward's head gradients, not two */
    float loss;
    assert_int_equal(st_net_loss(n, labels, &loss, NULL), ST_OK);
    assert_int_equal(st_net_backward(n), ST_OK);
    assert_int_equal(st_net_backward(n), ST_ERR_INVALID);
    st_net_destroy(n);
    st_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_is_unfused_bit_for_bit),
        cmocka_unit_test(test_fused_matches_the_reference),
        cmocka_unit_test(test_bf16_head_within_rounding),
        cmocka_unit_test(test_score_is_the_loss),
        cmocka_unit_test(test_backward_needs_a_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
