/* The sequence layers (embeddings, layer norm, causal attention, GELU, the
 * tied head, linear and add on [T, C]): oneDNN against the plain-C
 * reference (forward, every parameter gradient, the input gradients in
 * between), the reference against finite differences, the causal mask, the
 * tied head's gradient, a whole gpt-mini gradient check, and the model
 * text's errors.
 *
 * Tolerances.  Both backends compute in fp32; the reference sums in double.
 * A dot product of length K in fp32 is off by about K * 2^-24 relative to
 * the sum of |terms| in the worst case and sqrt(K) * 2^-24 typically; the
 * longest reductions here are the head's and the weight gradients' over
 * rows x positions (<= 1024 terms), and errors compound through a few
 * layers, so oneDNN matches the reference within 1e-4 of the tensor's
 * largest value (1024 x 6e-8 = 6e-5, rounded up).  Finite differences in
 * fp32: central differences with step h have truncation error O(h^2 f''')
 * and round-off about 2^-24 |L| / h; with |L| ~ 1 and h = 1e-2 both are
 * near 1e-4, so the check allows 2e-3 + 2e-2 |g|. */
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
#include "ref/ref.h"
#include "kernels/seq_kernels.h"
#include "kernels/transpose.h"
#include "shmtrain/nn.h"

static void tokens(int32_t *ids, size_t count, int vocab, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        ids[i] = (int32_t)((frand(&seed) + 1.0f) * 0.5f * (float)vocab) % vocab;
}

/* max |a - b| <= tol * max(floor, max |b|), naming where it fails.  Floor
 * 0 for gradients: against 1, gpt-mini's (at most 0.25 at init) passed with
 * the softmax backward's row sums cut short (the same bound relative to
 * their largest value caught it). */
static void assert_close_over(const float *a, const float *b, size_t n, double tol, double floor, const char *what)
{
    size_t at;
    double scale;
    const double worst = max_diff(a, b, n, floor, &at, &scale);
    if (!(worst <= tol * scale))
        fail_msg("%s: max diff %.3g at %zu (%g vs %g), scale %.3g", what, worst, at, (double)a[at], (double)b[at],
                 scale);
}

static void assert_close(const float *a, const float *b, size_t n, double tol, const char *what)
{
    assert_close_over(a, b, n, tol, 1.0, what);
}

/* A chain through every sequence layer, residuals included. */
static const char *const ALL_LAYERS =
    "input tokens 8\nembed 11 12\nsave r\nlayernorm\nlinear 36\nattention heads 3\nlinear 12\nadd r\n"
    "save m\nlayernorm\nlinear 48\ngelu\nlinear 12\nadd m\nlayernorm\nhead tied\n";

/* Forward, a random output gradient, backward: outputs and parameter
 * gradients of both backends, parameters moved by up to spread from their
 * initial values. */
static void run_both_spread(const char *text, int batch, int threads, uint64_t seed, float spread)
{
    omp_set_num_threads(threads);
    st_model *m = parse(text);
    st_net *ref = make_net(m, batch, ST_BACKEND_REFERENCE, ST_DTYPE_F32, false),
           *dn = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    size_t P, out = st_net_output_size(ref);
    st_net_init(ref, seed);
    float *pr = st_net_params(ref, &P);
    uint64_t ps = seed * 7 + 1;
    for (size_t i = 0; i < P; i++)  /* biases and norms off their initial 0 and 1, so they count */
        pr[i] += spread * frand(&ps);
    memcpy(st_net_params(dn, NULL), pr, P * sizeof(float));
    const int t = st_model_positions(m);
    int32_t *ids = malloc((size_t)batch * t * sizeof *ids);
    float *dy = malloc(out * sizeof(float)), *y1 = malloc(out * sizeof(float)), *y2 = malloc(out * sizeof(float));
    tokens(ids, (size_t)batch * t, st_model_vocab(m), seed);
    uint64_t s = seed;
    for (size_t i = 0; i < out; i++)
        dy[i] = frand(&s);
    assert_int_equal(st_net_forward(ref, ids), ST_OK);
    assert_int_equal(st_net_forward(dn, ids), ST_OK);
    st_net_output(ref, y1);
    st_net_output(dn, y2);
    assert_close(y2, y1, out, 1e-4, "forward");
    assert_int_equal(st_net_backward_from(ref, dy), ST_OK);
    assert_int_equal(st_net_backward_from(dn, dy), ST_OK);
    assert_close_over(st_net_grads(dn, NULL), st_net_grads(ref, NULL), P, 1e-4, 0.0, "parameter gradients");
    free(ids), free(dy), free(y1), free(y2);
    st_net_destroy(ref);
    st_net_destroy(dn);
    st_model_destroy(m);
}

static void run_both(const char *text, int batch, int threads, uint64_t seed)
{
    run_both_spread(text, batch, threads, seed, 0.1f);
}

static void test_onednn_matches_reference(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        run_both(ALL_LAYERS, 3, threads, 5);
        /* weights far from GPT-2's init, so the softmax is far from uniform and
         * its backward carries enough of the gradient that a 1% error there
         * fails (at spread 0.1 it passed) */
        run_both_spread("input tokens 8\nembed 7 6\nlinear 18\nattention heads 1\nhead tied\n", 2, threads, 9, 1.0f);
        run_both("input tokens 8\nembed 9 16\ngelu\nlayernorm\nlinear 9 nobias\n", 4, threads, 13);
        /* attention's whole 6 x 16 tiles, and the rows and columns past them */
        run_both_spread("input tokens 22\nembed 13 40\nlinear 120\nattention heads 2\nhead tied\n", 3, threads, 17, 1.0f);
    }
    /* the linear layers' weight gradients from untransposed operands, as for big layers */
    setenv("SHMTRAIN_ONEDNN_SEQ_TN", "1", 1);
    run_both(ALL_LAYERS, 3, 2, 5);
    unsetenv("SHMTRAIN_ONEDNN_SEQ_TN");
    /* oneDNN's layer norm, kept for A/B against the C rows */
    setenv("SHMTRAIN_ONEDNN_LAYERNORM", "1", 1);
    for (int threads = 1; threads <= 2; threads++)
        run_both(ALL_LAYERS, 3, threads, 5);
    unsetenv("SHMTRAIN_ONEDNN_LAYERNORM");
}

/* L = sum(R * y): its gradient by backward vs central differences. */
static double weighted_loss(st_net *n, const int32_t *ids, const float *r, float *y)
{
    assert_int_equal(st_net_forward(n, ids), ST_OK);
    st_net_output(n, y);
    double l = 0;
    for (size_t i = 0; i < st_net_output_size(n); i++)
        l += (double)r[i] * y[i];
    return l;
}

static void gradcheck(const char *text, int batch, int t, int samples, uint64_t seed)
{
    omp_set_num_threads(1);
    st_model *m = parse(text);
    st_net *n = make_net(m, batch, ST_BACKEND_REFERENCE, ST_DTYPE_F32, false);
    st_net_init(n, seed);
    size_t P, out = st_net_output_size(n);
    float *p = st_net_params(n, &P), *r = malloc(out * sizeof(float)), *y = malloc(out * sizeof(float));
    int32_t *ids = malloc((size_t)batch * t * sizeof *ids);
    tokens(ids, (size_t)batch * t, st_model_vocab(m), seed + 1);
    uint64_t s = seed;
    for (size_t i = 0; i < out; i++)
        r[i] = frand(&s) / sqrtf((float)out);
    /* Larger weights than GPT-2's init, so every path carries signal. */
    for (size_t i = 0; i < P; i++)
        p[i] += 0.2f * frand(&s);
    weighted_loss(n, ids, r, y);
    assert_int_equal(st_net_backward_from(n, r), ST_OK);
    float *g = malloc(P * sizeof(float));
    memcpy(g, st_net_grads(n, NULL), P * sizeof(float));
    const float h = 1e-2f;
    for (int k = 0; k < samples; k++) {
        const size_t i = (size_t)((frand(&s) + 1.0f) * 0.5f * (float)P) % P;
        const float keep = p[i];
        p[i] = keep + h;
        const double up = weighted_loss(n, ids, r, y);
        p[i] = keep - h;
        const double down = weighted_loss(n, ids, r, y);
        p[i] = keep;
        const double fd = (up - down) / (2 * h);
        if (!(fabs(fd - g[i]) <= 2e-3 + 2e-2 * fabs(fd)))
            fail_msg("parameter %zu of %zu: backward %.6g, finite difference %.6g", i, P, (double)g[i], fd);
    }
    free(r), free(y), free(ids), free(g);
    st_net_destroy(n);
    st_model_destroy(m);
}

static void test_reference_matches_finite_differences(void **state)
{
    (void)state;
    gradcheck(ALL_LAYERS, 2, 8, 200, 3);
}

/* gpt-mini itself, one sample: the reference's gradient at 48 sampled
 * parameters against finite differences, and oneDNN's whole gradient
 * against the reference's. */
static void test_gpt_mini_gradient(void **state)
{
    (void)state;
    const char *text = st_model_preset_text("gpt-mini");
    assert_non_null(text);
    gradcheck(text, 1, 64, 48, 21);
    omp_set_num_threads(2);
    st_model *m = parse(text);
    assert_int_equal(st_model_classes(m), 256);
    assert_int_equal(st_model_positions(m), 64);
    st_net *ref = make_net(m, 2, ST_BACKEND_REFERENCE, ST_DTYPE_F32, false),
           *dn = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    st_net_init(ref, 4);
    st_net_init(dn, 4);
    int32_t ids[128];
    int labels[128];
    tokens(ids, 128, 256, 8);
    tokens((int32_t *)labels, 128, 256, 9);
    float l1, l2;
    assert_int_equal(st_net_forward(ref, ids), ST_OK);
    assert_int_equal(st_net_forward(dn, ids), ST_OK);
    assert_int_equal(st_net_loss(ref, labels, &l1, NULL), ST_OK);
    assert_int_equal(st_net_loss(dn, labels, &l2, NULL), ST_OK);
    assert_float_equal(l1, l2, 1e-4);
    assert_float_equal(l1, logf(256.0f), 0.05f);  /* GPT-2's init: near-uniform predictions */
    assert_int_equal(st_net_backward(ref), ST_OK);
    assert_int_equal(st_net_backward(dn), ST_OK);
    size_t P;
    const float *gdn = st_net_grads(dn, &P);
    assert_close_over(gdn, st_net_grads(ref, NULL), P, 1e-4, 0.0, "gpt-mini gradients");
    st_net_destroy(ref);
    st_net_destroy(dn);
    st_model_destroy(m);
}

/* Changing token k changes no output before position k, on both backends. */
static void test_causal_mask(void **state)
{
    (void)state;
    omp_set_num_threads(2);
    st_model *m = parse(ALL_LAYERS);
    for (int b = 0; b < 2; b++) {
        st_net *n = make_net(m, 2, b ? ST_BACKEND_REFERENCE : ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
        st_net_init(n, 2);
        const size_t out = st_net_output_size(n), per_pos = (size_t)st_model_classes(m);
        float *y1 = malloc(out * sizeof(float)), *y2 = malloc(out * sizeof(float));
        int32_t ids[16];
        tokens(ids, 16, 11, 3);
        assert_int_equal(st_net_forward(n, ids), ST_OK);
        st_net_output(n, y1);
        const int k = 5;
        ids[k] = (ids[k] + 1) % 11;  /* sample 0, position 5 */
        assert_int_equal(st_net_forward(n, ids), ST_OK);
        st_net_output(n, y2);
        assert_memory_equal(y1, y2, k * per_pos * sizeof(float));                 /* before k: bitwise */
        assert_memory_equal(y1 + 8 * per_pos, y2 + 8 * per_pos, 8 * per_pos * sizeof(float));  /* sample 1 */
        for (int pos = k; pos < 8; pos++)
            assert_memory_not_equal(y1 + pos * per_pos, y2 + pos * per_pos, per_pos * sizeof(float));
        free(y1), free(y2);
        st_net_destroy(n);
    }
    st_model_destroy(m);
}

/* Two steps on one batch: the gradients of the first in `first`, and the
 * second's must be the same bits (a buffer reused from the step before
 * carries nothing over). */
static void two_steps_same_bits(st_net *n, float *first)
{
    int32_t ids[128];
    int labels[128];
    tokens(ids, 128, 256, 8);
    tokens((int32_t *)labels, 128, 256, 9);
    size_t P;
    for (int step = 0; step < 2; step++) {
        float loss;
        assert_int_equal(st_net_forward(n, ids), ST_OK);
        assert_int_equal(st_net_loss(n, labels, &loss, NULL), ST_OK);
        assert_int_equal(st_net_backward(n), ST_OK);
        const float *grads = st_net_grads(n, &P);
        if (step == 0)
            memcpy(first, grads, P * sizeof(float));
        else
            assert_memory_equal(first, grads, P * sizeof(float));
    }
}

/* In bf16 the copies a linear layer's backward converts (its fp32 output
 * gradient in bf16) share one buffer across layers: gpt-mini's 16 linear
 * layers' in at most one per purpose, a step repeated giving the same bits,
 * and the gradients within the bf16 bound of fp32's (test_bf16.c's
 * derivation; here only that no layer read another's copy: 2^-4 of the
 * largest, where a copy from the wrong layer is off by the gradient itself). */
static void bf16_conversions_share_buffers(void)
{
    if (!__builtin_cpu_supports("avx512bf16"))
        return;
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, "gpt-mini"), ST_OK);
    st_net *n = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, false),
           *f = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    st_net_gradient_memory g;
    st_net_gradient_memory_get(n, &g);
    print_message("gpt-mini bf16: backward's conversions in %d buffers, %.2f MB\n", g.conversion_buffers,
                  g.conversion_bytes / 1e6);
    assert_true(g.conversion_buffers >= 1 && g.conversion_buffers <= 4);
    const size_t P = st_model_param_count(m);
    st_net_init(n, 4);
    memcpy(st_net_params(f, NULL), st_net_params(n, NULL), P * sizeof(float));
    float *first = malloc(P * sizeof(float)), *fp32 = malloc(P * sizeof(float));
    two_steps_same_bits(n, first);
    two_steps_same_bits(f, fp32);
    assert_close_over(first, fp32, P, 1.0 / 16, 0.0, "bf16 gradients against fp32's");
    free(fp32);
    free(first);
    st_net_destroy(n), st_net_destroy(f);
    st_model_destroy(m);
}

/* The output gradients of a model of sequence layers share a few buffers
 * by liveness (onednn_diffs.c): gpt-mini's 40-odd gradients (and the adds'
 * second ones) in at most 8 buffers of at most its widest activation each,
 * where lenet keeps one per gradient; and buffers reused from the step
 * before change nothing: two steps on one batch give the same gradients,
 * bit for bit (the reference check above says they are right). */
static void test_gradients_share_buffers(void **state)
{
    (void)state;
    omp_set_num_threads(2);
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, "gpt-mini"), ST_OK);
    st_net *n = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    st_net_gradient_memory g;
    st_net_gradient_memory_get(n, &g);
    const size_t widest = 2 * 64 * 512 * sizeof(float);  /* rows x the MLP's 4C */
    print_message("gpt-mini: %d gradients in %d buffers, %.2f MB (widest %.2f MB)\n", g.gradients, g.buffers,
                  g.bytes / 1e6, widest / 1e6);
    assert_true(g.gradients >= 40);
    assert_true(g.buffers >= 2 && g.buffers <= 8);
    assert_true(g.bytes <= 8 * widest);
    float *first = malloc(st_model_param_count(m) * sizeof(float));
    two_steps_same_bits(n, first);
    free(first);
    st_net_destroy(n);
    st_model_destroy(m);
    assert_int_equal(st_model_load(&m, "lenet"), ST_OK);
    n = make_net(m, 2, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    st_net_gradient_memory_get(n, &g);
    print_message("lenet: %d gradients in %d buffers\n", g.gradients, g.buffers);
    assert_true(g.gradients >= 8);
    assert_int_equal(g.buffers, g.gradients);
    assert_int_equal(g.conversion_buffers, 0);
    st_net_destroy(n);
    st_model_destroy(m);
    bf16_conversions_share_buffers();
}

/* A token that never occurs in the input still gets a gradient in the
 * shared table: through the head only. */
static void test_tied_head_gradient_reaches_embedding(void **state)
{
    (void)state;
    omp_set_num_threads(1);
    st_model *m = parse("input tokens 4\nembed 5 3\nhead tied\n");
    for (int b = 0; b < 2; b++) {
        st_net *n = make_net(m, 1, b ? ST_BACKEND_REFERENCE : ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
        st_net_init(n, 1);
        int32_t ids[4] = {0, 1, 1, 2};
        int labels[4] = {1, 4, 2, 3};
        assert_int_equal(st_net_forward(n, ids), ST_OK);
        assert_int_equal(st_net_loss(n, labels, NULL, NULL), ST_OK);
        assert_int_equal(st_net_backward(n), ST_OK);
        size_t P;
        const float *g = st_net_grads(n, &P);
        assert_int_equal(P, 5 * 3 + 4 * 3);
        for (int tok = 3; tok < 5; tok++)  /* absent from the input: the head's part alone, not zero */
            assert_true(fabsf(g[tok * 3]) + fabsf(g[tok * 3 + 1]) + fabsf(g[tok * 3 + 2]) > 1e-6f);
        st_net_destroy(n);
    }
    st_model_destroy(m);
}

static void expect_parse_error(const char *text, const char *needle)
{
    st_model *m = NULL;
    assert_int_not_equal(st_model_parse(&m, text, "bad.model"), ST_OK);
    if (!strstr(st_last_error(), needle))
        fail_msg("expected '%s' in: %s", needle, st_last_error());
}

static void test_model_text_errors(void **state)
{
    (void)state;
    expect_parse_error("input tokens 8\nlinear 4\n", "bad.model:2: linear: token ids must go through 'embed");
    expect_parse_error("input 1 4 4\nembed 5 4\n", "bad.model:2: embed must follow 'input tokens T'");
    expect_parse_error("input tokens 8\nembed 5 8\nlinear 24\nattention heads 3\n",
                       "bad.model:4: attention heads 3 needs a [T, 3C] input with C a multiple of 3");
    expect_parse_error("input tokens 8\nembed 5 8\nlinear 7\nhead tied\n",
                       "bad.model:4: head tied: the input must be [T, 8]");
    expect_parse_error("input tokens 8\nembed 5 8\nblock heads 3\n", "bad.model:3: attention heads 3");
    expect_parse_error("input tokens 8\nembed 5 8\nsave a\nlinear 4\nadd a\n", "add a: shapes must be equal");
    expect_parse_error("input 1 4 4\nconv 2 k3\nlayernorm\n", "layernorm normalises features");
    /* and a good block: 12 layers from one line, with its summary */
    st_model *m = parse("input tokens 8\nembed 5 8\nblock heads 2\nlayernorm\nhead tied\n");
    assert_int_equal(st_model_param_count(m), 5 * 8 + 8 * 8 + 2 * (2 * 8) + (8 * 24 + 24) + (8 * 8 + 8) +
                                                  (8 * 32 + 32) + (32 * 8 + 8) + 2 * 8);
    assert_non_null(strstr(st_model_text(m), "attention heads 2\n"));
    st_model_destroy(m);
}

static void test_token_out_of_vocabulary_is_an_error(void **state)
{
    (void)state;
    st_model *m = parse("input tokens 4\nembed 5 3\nhead tied\n");
    st_net *n = make_net(m, 1, ST_BACKEND_ONEDNN, ST_DTYPE_F32, false);
    int32_t ids[4] = {0, 1, 5, 2};
    assert_int_equal(st_net_forward(n, ids), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "token 5 at position 2 of sample 0 is outside the vocabulary (0..4)"));
    st_net_destroy(n);
    st_model_destroy(m);
}

/* nn_transpose against plain loops, bitwise, with whole 8 x 8 blocks and
 * the rows and columns past them; its column sums must be the bits of a
 * plain loop down each column (the bias gradient both linear paths give). */
static void test_transpose_and_column_sums(void **state)
{
    (void)state;
    const long shapes[][2] = {{37, 45}, {64, 32}, {5, 3}, {5, 12}, {8, 9}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const long rows = shapes[s][0], cols = shapes[s][1], lds = cols + 3, ldd = rows + 5;
        float *src = malloc((size_t)(rows * lds) * sizeof(float)), *dst = calloc((size_t)(cols * ldd), sizeof(float));
        float *sums = malloc((size_t)cols * sizeof(float));
        uint64_t seed = (uint64_t)s + 1;
        for (long i = 0; i < rows * lds; i++)
            src[i] = frand(&seed) * 100.0f;
        nn_transpose(dst, ldd, src, lds, rows, cols, sums);
        for (long c = 0; c < cols; c++) {
            float sum = src[c];
            for (long r = 1; r < rows; r++)
                sum += src[r * lds + c];
            assert_memory_equal(&sums[c], &sum, sizeof sum);
            for (long r = 0; r < rows; r++)
                assert_memory_equal(&dst[c * ldd + r], &src[r * lds + c], sizeof(float));
        }
        free(src), free(dst), free(sums);
    }
}

/* GELU on bf16 activations (a bf16 net's linear layers on both sides)
 * against the reference on the same inputs: every bf16 value in [-8, 8]
 * (each exact in fp32), and output gradients of both signs.  Tolerance per
 * element: the fp32 kernel's own error (its tanh is a polynomial within a
 * few ulp: 8 2^-24 (|ref| + |x| + |dy|) covers it with room) plus one
 * rounding to bf16, at most 2^-8 of the result (8 significant bits, to
 * nearest); the sum is what is allowed; and 2^-126, the smallest normal, as
 * the vector code may flush a denormal result to zero (training flushes
 * them anyway: st_nn_flush_denormals). */
static void test_gelu_bf16_kernels(void **state)
{
    (void)state;
    enum { MAX = 1 << 16 };
    st_bf16 *x = malloc(MAX * sizeof *x), *y = malloc(MAX * sizeof *y), *dy = malloc(MAX * sizeof *dy),
            *dx = malloc(MAX * sizeof *dx);
    float *xf = malloc(MAX * sizeof *xf), *dyf = malloc(MAX * sizeof *dyf), *ry = malloc(MAX * sizeof *ry),
          *rdx = malloc(MAX * sizeof *rdx), *th = malloc(MAX * sizeof *th);
    assert_true(x && y && dy && dx && xf && dyf && ry && rdx && th);
    long n = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float v = st_bf16_to_f32((st_bf16)h);
        if (fabsf(v) <= 8.0f) {  /* NaN fails the test and is left out */
            x[n] = (st_bf16)h;
            xf[n] = v;
            dyf[n] = st_bf16_to_f32(st_bf16_from_f32(n % 3 ? 0.75f : -1.25f));
            dy[n] = st_bf16_from_f32(dyf[n]);
            n++;
        }
    }
    seq_gelu_fwd_bf16(y, th, x, n);
    seq_gelu_bwd_bf16(dx, dy, x, th, n);
    ref_gelu_fwd(ry, xf, (size_t)n);
    ref_gelu_bwd(rdx, dyf, xf, (size_t)n);
    for (long i = 0; i < n; i++) {
        const float ey = 8 * 0x1p-24f * (fabsf(ry[i]) + fabsf(xf[i])) + 0x1p-8f * fabsf(ry[i]) + 0x1p-126f;
        const float edx =
            8 * 0x1p-24f * (fabsf(rdx[i]) + fabsf(xf[i]) * fabsf(dyf[i])) + 0x1p-8f * fabsf(rdx[i]) + 0x1p-126f;
        if (!(fabsf(st_bf16_to_f32(y[i]) - ry[i]) <= ey) || !(fabsf(st_bf16_to_f32(dx[i]) - rdx[i]) <= edx))
            fail_msg("GELU at %g (dy %g): bf16 %g, %g; reference %g, %g", xf[i], dyf[i], st_bf16_to_f32(y[i]),
                     st_bf16_to_f32(dx[i]), ry[i], rdx[i]);
    }
    print_message("%ld bf16 inputs in [-8, 8] checked\n", n);
    free(x), free(y), free(dy), free(dx), free(xf), free(dyf), free(ry), free(rdx), free(th);
}

/* Layer norm writing bf16 (a bf16 net's, for its linear layers) is the fp32
 * kernel's rows rounded once, bit for bit; its backward from a bf16
 * gradient is the fp32 backward from that gradient widened, bit for bit
 * (dx, dgamma, dbeta: the same rows, the same partials, the same order).
 * The fp32 kernels are tested against the reference above. */
static void test_ln_bf16_is_fp32_rounded(void **state)
{
    (void)state;
    omp_set_num_threads(2);
    enum { ROWS = 37, C = 96 };
    float x[ROWS * C], g[C], b[C], y[ROWS * C], stats[2 * ROWS], stats2[2 * ROWS], dyf[ROWS * C];
    float dx[ROWS * C], dx2[ROWS * C], dg[C], dg2[C], db[C], db2[C];
    st_bf16 yb[ROWS * C], dyb[ROWS * C];
    float *partial = malloc(seq_ln_partial_floats(C) * sizeof(float)), *rowbuf = malloc(2 * C * sizeof(float));
    uint64_t s = 21;
    for (int i = 0; i < ROWS * C; i++) {
        x[i] = 3 * frand(&s) + (float)(i % 7);
        dyb[i] = st_bf16_from_f32(frand(&s));
        dyf[i] = st_bf16_to_f32(dyb[i]);
    }
    for (int i = 0; i < C; i++)
        g[i] = 1 + frand(&s) / 4, b[i] = frand(&s) / 4;
    seq_ln_fwd(y, stats, x, g, b, ROWS, C);
    seq_ln_fwd_bf16(yb, stats2, x, g, b, ROWS, C, rowbuf);
    assert_memory_equal(stats, stats2, sizeof stats);
    for (int i = 0; i < ROWS * C; i++)
        if (yb[i] != st_bf16_from_f32(y[i]))
            fail_msg("layer norm in bf16: element %d is %04x, fp32's %g rounds to %04x", i, yb[i], y[i],
                     st_bf16_from_f32(y[i]));
    seq_ln_bwd(dx, dg, db, partial, x, dyf, g, stats, ROWS, C);
    seq_ln_bwd_bf16(dx2, dg2, db2, partial, x, dyb, g, stats, ROWS, C, rowbuf);
    assert_memory_equal(dx, dx2, sizeof dx);
    assert_memory_equal(dg, dg2, sizeof dg);
    assert_memory_equal(db, db2, sizeof db);
    free(partial), free(rowbuf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onednn_matches_reference),
        cmocka_unit_test(test_reference_matches_finite_differences),
        cmocka_unit_test(test_gpt_mini_gradient),
        cmocka_unit_test(test_causal_mask),
        cmocka_unit_test(test_gelu_bf16_kernels),
        cmocka_unit_test(test_transpose_and_column_sums),
        cmocka_unit_test(test_tied_head_gradient_reaches_embedding),
        cmocka_unit_test(test_gradients_share_buffers),
        cmocka_unit_test(test_ln_bf16_is_fp32_rounded),
        cmocka_unit_test(test_model_text_errors),
        cmocka_unit_test(test_token_out_of_vocabulary_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
