/* Precision bf16 on the oneDNN backend against the fp32 reference backend,
 * and the gate that keeps it off CPUs without native bf16.
 *
 * Where it runs.  Natively where oneDNN's ISA has bf16 (AVX512-BF16, AMX).
 * Elsewhere the plain entry checks the gate and skips the rest, saying
 * why, and the entry test_bf16_any_isa runs this binary with
 * tests/bf16_any_isa.cc preloaded and SHMTRAIN_BF16_ANY_ISA=1: oneDNN then
 * offers its reference bf16 kernels (operands rounded to bf16, products
 * summed in fp32: what bf16 computes, slowly), so the engine's bf16
 * plumbing (conversions, layouts, fp32 weight gradients, the per-layer
 * rule) is checked on every machine CI runs on.
 *
 * Each bf16 layer is also shown to have run bf16 (the description, read
 * back from oneDNN, and an output that differs from the fp32 engine's)
 * and to deliver fp32 weight gradients (bits below bf16's).
 *
 * Tolerance, per element, derived (not tuned).  A bf16 kernel rounds each
 * operand to 8 significant bits (relative error <= u = 2^-8 each), forms
 * the product exactly in fp32 (8 + 8 bits fit in 24) and accumulates K of
 * them in fp32 (each addition off by <= 2^-24 of a partial sum, and every
 * partial sum is <= S).  With S = sum |a_k| |b_k| (+ |bias|):
 *
 *     |y - y_exact| <= ((1 + u)^2 - 1) S + (K - 1) 2^-24 (1 + u)^2 S
 *                   <= (2^-7 + 2^-16 + K 2^-24 (1 + 2^-7)) S.
 *
 * The reference sums in double and rounds once (2^-24 |y| <= 2^-24 S).  The
 * test allows tol = (2^-7 + 2^-15 + (K + 2) 2^-23) S: the bound, a unit
 * for the reference, and a factor 2 on the accumulation term for kernels
 * that add partial sums in another order.  S comes from the reference
 * backend itself run on |parameters|, |input| and |output gradient|, which
 * for a single layer is exactly sum |a||b| for its output, its input
 * gradient and each weight gradient.  K per pass: forward C_in kh kw (the
 * features, for linear), input gradient C_out kh kw, weight gradients
 * rows (batch x output positions).  The input gradient leaves the
 * backward-data pass in bf16 (and an embedding's gradient is made of it):
 * one more rounding, u |dx| <= 2^-8 S, on those. */
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
#include "shmtrain/nn.h"

/* What st_net_describe says of node j (its line), in `out`. */
static void describe_node(const st_net *n, int j, char *out, size_t len)
{
    char *text = net_description(n);
    out[0] = '\0';
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (atoi(line) == j && strstr(line, "line"))
            snprintf(out, len, "%s", line);
    free(text);
}

static bool skipped(void)
{
    if (bf16_here())
        return false;
    print_message("skipped: oneDNN's ISA here is %s, without native bf16 (AVX512-BF16 or AMX); the entry "
                  "test_bf16_any_isa checks the bf16 path with oneDNN's reference kernels\n",
                  st_nn_onednn_isa());
    return true;
}

/* ------------------------------------------------------------ the gate -- */

static void test_gate(void **state)
{
    (void)state;
    st_model *m = parse("input 8\nlinear 4\n");
    st_net *n = NULL;
    st_net_config half = {.batch = 2, .precision = ST_DTYPE_F16, .tuning = env_tuning()};
    assert_int_equal(st_net_create(&n, m, &half), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "precision fp16"));
    assert_non_null(strstr(st_last_error(), "reference"));
    assert_null(n);
    st_net_config odd = {.batch = 2, .precision = ST_DTYPE_I32, .tuning = env_tuning()};
    assert_int_equal(st_net_create(&n, m, &odd), ST_ERR_INVALID);
    st_net_config bf = {.batch = 2, .precision = ST_DTYPE_BF16, .tuning = env_tuning()};
    if (bf16_here()) {
        assert_int_equal(st_net_create(&n, m, &bf), ST_OK);
        st_net_destroy(n);
    } else {
        assert_int_equal(st_net_create(&n, m, &bf), ST_ERR_INVALID);
        assert_non_null(strstr(st_last_error(), "native bf16"));
        assert_non_null(strstr(st_last_error(), st_nn_onednn_isa()));
        assert_null(n);
    }
    st_model_destroy(m);
}

/* --------------------------------------------------- layers, one at a time -- */

struct layer_case {
    const char *text;
    int layer;                  /* its node index */
    long inputs;                /* per sample: floats, or token ids */
    long k_fwd, k_data, k_rows; /* reduction lengths of the three passes (per sample for rows) */
};

static double tolerance(long k, bool bf16_output)
{
    return ldexp(1, -7) + ldexp(1, -15) + (double)(k + 2) * ldexp(1, -23) + (bf16_output ? ldexp(1, -8) : 0);
}

/* |got - want| <= tol(k) * bound elementwise, naming the first miss. */
static void within(const float *got, const float *want, const float *bound, size_t n, long k, bool bf16_output,
                   const char *what)
{
    const double tol = tolerance(k, bf16_output);
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol * bound[i] + 1e-30))
            fail_msg("%s[%zu]: %.9g vs the reference %.9g, allowed %.3g (S = %.4g, K = %ld)", what, i,
                     (double)got[i], (double)want[i], tol * bound[i], (double)bound[i], k);
}

struct pass_out {
    float *y, *dx, *grads;
};

/* Forward and backward from dy; outputs into o (dx only for image inputs). */
static void run(st_net *n, const void *input, const float *dy, bool image, struct pass_out *o)
{
    assert_int_equal(st_net_forward(n, input), ST_OK);
    assert_int_equal(st_net_output(n, o->y), ST_OK);
    assert_int_equal(st_net_backward_from(n, dy), ST_OK);
    if (image)
        assert_int_equal(st_net_input_grad(n, o->dx), ST_OK);
    size_t P;
    const float *g = st_net_grads(n, &P);
    memcpy(o->grads, g, P * sizeof(float));
}

static void check_layer(const struct layer_case *c, int batch, int threads, uint64_t seed)
{
    omp_set_num_threads(threads);
    st_model *m = parse(c->text);
    const bool image = !strstr(c->text, "tokens");
    st_net *ref = make_net(m, batch, ST_BACKEND_REFERENCE, ST_DTYPE_F32, image);
    st_net *bf = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, image);
    st_net *fp = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_F32, image);
    size_t P, out = st_net_output_size(ref), in = (size_t)batch * (size_t)c->inputs;
    st_net_init(ref, seed);
    float *params = st_net_params(ref, &P);
    memcpy(st_net_params(bf, NULL), params, P * sizeof(float));
    memcpy(st_net_params(fp, NULL), params, P * sizeof(float));
    float *x = malloc(in * sizeof(float)), *ax = malloc(in * sizeof(float));
    float *dy = malloc(out * sizeof(float)), *ady = malloc(out * sizeof(float));
    int32_t *ids = malloc(in * sizeof(int32_t));
    uint64_t s = seed;
    for (size_t i = 0; i < in; i++) {
        x[i] = frand(&s), ax[i] = fabsf(x[i]);
        ids[i] = (int32_t)(i * 7 % 13);
    }
    for (size_t i = 0; i < out; i++)
        dy[i] = frand(&s), ady[i] = fabsf(dy[i]);
    const void *input = image ? (const void *)x : (const void *)ids;
    struct pass_out r, b, f, a;
    struct pass_out *all[] = {&r, &b, &f, &a};
    for (int i = 0; i < 4; i++) {
        all[i]->y = malloc(out * sizeof(float));
        all[i]->dx = malloc(in * sizeof(float));
        all[i]->grads = malloc(P * sizeof(float));
    }
    run(ref, input, dy, image, &r);
    run(bf, input, dy, image, &b);
    run(fp, input, dy, image, &f);
    for (size_t i = 0; i < P; i++)  /* the bounds S: the reference on absolute values */
        params[i] = fabsf(params[i]);
    run(ref, image ? (const void *)ax : input, ady, image, &a);

    const long rows = (long)batch * c->k_rows;  /* the embed's gradients sum input gradients: k_data */
    within(b.y, r.y, a.y, out, c->k_fwd, false, "output");
    if (image)
        within(b.dx, r.dx, a.dx, in, c->k_data, true, "input gradient");
    within(b.grads, r.grads, a.grads, P, rows > c->k_data ? rows : c->k_data, !image, "parameter gradients");
    /* It ran bf16: the description says so, read back from oneDNN, and the
     * output is not the fp32 engine's to the bit. */
    char line[256];
    describe_node(bf, c->layer, line, sizeof line);
    if (!strstr(line, "bf16:"))
        fail_msg("layer %d did not run bf16: %s", c->layer, line);
    assert_memory_not_equal(b.y, f.y, out * sizeof(float));
    /* Weight gradients come out of the kernel in fp32: they have bits below
     * bf16's 8 (a bf16 gradient reordered to fp32 would have none; an
     * embedding's gradient, sums of a few bf16 input gradients, may not). */
    size_t fine = 0;
    for (size_t i = 0; i < P; i++) {
        uint32_t u;
        memcpy(&u, &b.grads[i], sizeof u);
        fine += (u & 0xffff) != 0;
    }
    if (fine * 3 < P)
        fail_msg("only %zu of %zu parameter gradients carry more than bf16's bits", fine, P);
    for (int i = 0; i < 4; i++)
        free(all[i]->y), free(all[i]->dx), free(all[i]->grads);
    free(x), free(ax), free(dy), free(ady), free(ids);
    st_net_destroy(ref), st_net_destroy(bf), st_net_destroy(fp);
    st_model_destroy(m);
}

/* tuning.bf16_any_isa: every bf16 layer on oneDNN's reference kernel (the
 * engine's choice, dn_pd_keep; on a CPU with the instructions the jit ones
 * come first, and on one without they would fault), and without it, where
 * the CPU has native bf16, never the reference. */
static void test_any_isa_takes_reference_kernels(void **state)
{
    (void)state;
    const bool native = st_nn_native(ST_DTYPE_BF16, NULL), hooked = getenv("LD_PRELOAD") != NULL;
    st_model *m = parse("input 8 8 8\nconv 16 k3 p1\nflatten\nlinear 10\n");
    st_net_config cfg = {.batch = 2, .precision = ST_DTYPE_BF16};
    for (int any_isa = native ? 0 : 1; any_isa <= 1; any_isa++) {
        cfg.tuning.bf16_any_isa = any_isa;
        if (!native && !hooked) {
            print_message("skipped: no native bf16 here, and the reference kernels need tests/bf16_any_isa.c\n");
            break;
        }
        st_net *n = NULL;
        assert_int_equal(st_net_create(&n, m, &cfg), ST_OK);
        const int bf16_nodes[] = {1, 3};  /* the convolution and the linear layer */
        for (int k = 0; k < 2; k++) {
            char line[256];
            describe_node(n, bf16_nodes[k], line, sizeof line);
            if (!strstr(line, "bf16: "))
                fail_msg("node %d does not compute in bf16: %s", bf16_nodes[k], line);
            if ((strstr(line, "ref") != NULL) != any_isa)
                fail_msg("%s: node %d's kernels %s", any_isa ? "bf16_any_isa" : "native", bf16_nodes[k], line);
        }
        st_net_destroy(n);
    }
    st_model_destroy(m);
}

/* Convolutions (strided, padded, without bias) and inner products (on
 * features, and on a sequence's rows after an embedding): every pass. */
static void test_layers_against_the_reference(void **state)
{
    (void)state;
    if (skipped())
        return;
    static const struct layer_case cases[] = {
        {"input 40\nlinear 24\n", 2, 40, 40, 24, 1},
        {"input 3 4 5\nlinear 16\n", 2, 60, 60, 16, 1},
        {"input 8 9 9\nconv 12 k3 p1\n", 1, 8 * 81, 8 * 9, 12 * 9, 81},
        {"input 6 11 11\nconv 16 k3 s2\n", 1, 6 * 121, 6 * 9, 16 * 9, 25},
        {"input 5 7 7\nconv 8 k3 p1 nobias\n", 1, 5 * 49, 5 * 9, 8 * 9, 49},
        {"input tokens 6\nembed 13 16\nlinear 24\n", 2, 6, 16, 24, 6},
    };
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            check_layer(&cases[i], 3, threads, 11 + i);
}

static double norm2(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += ((double)a[i] - (b ? b[i] : 0)) * ((double)a[i] - (b ? b[i] : 0));
    return sqrt(s);
}

/* The layer table's rule: a convolution of few input channels stays fp32
 * (it loses in bf16), the next one runs bf16. */
static void test_rule(void **state)
{
    (void)state;
    if (skipped())
        return;
    st_model *m = parse("input 1 12 12\nconv 8 k3\nrelu\nmaxpool k2\nconv 8 k3\nrelu\nlinear 10\n");
    st_net *bf = make_net(m, 4, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, false);
    char line[256];
    describe_node(bf, 1, line, sizeof line);
    if (strstr(line, "bf16"))
        fail_msg("a 1-channel convolution ran bf16: %s", line);
    describe_node(bf, 4, line, sizeof line);
    if (!strstr(line, "bf16:"))
        fail_msg("an 8-channel convolution did not run bf16: %s", line);
    st_net_destroy(bf);
    st_model_destroy(m);
}

/* A whole model's loss and gradient in bf16 against the reference: inputs
 * in [-1, 1) (or token ids), fixed labels. */
static void chain_close(const char *text, int batch, long inputs, long rows_per_sample)
{
    st_model *m = parse(text);
    st_net *bf = make_net(m, batch, ST_BACKEND_ONEDNN, ST_DTYPE_BF16, false);
    st_net *ref = make_net(m, batch, ST_BACKEND_REFERENCE, ST_DTYPE_F32, false);
    size_t P;
    st_net_init(ref, 3);
    const float *params = st_net_params(ref, &P);
    memcpy(st_net_params(bf, NULL), params, P * sizeof(float));
    const bool tokens = strstr(text, "tokens") != NULL;
    const size_t in = (size_t)batch * (size_t)inputs, rows = (size_t)batch * (size_t)rows_per_sample;
    float *x = malloc(in * sizeof(float));
    int32_t *ids = malloc(in * sizeof(int32_t));
    int *labels = malloc(rows * sizeof(int));
    uint64_t s = 5;
    for (size_t i = 0; i < in; i++)
        x[i] = frand(&s), ids[i] = (int32_t)(i * 7 % 11);
    for (size_t i = 0; i < rows; i++)
        labels[i] = (int)(i * 3 % 10);
    float lr, lb;
    st_net *nets[] = {ref, bf};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(st_net_forward(nets[i], tokens ? (const void *)ids : (const void *)x), ST_OK);
        assert_int_equal(st_net_loss(nets[i], labels, i ? &lb : &lr, NULL), ST_OK);
        assert_int_equal(st_net_backward(nets[i]), ST_OK);
    }
    const float *gr = st_net_grads(ref, NULL), *gb = st_net_grads(bf, NULL);
    const double off = norm2(gb, gr, P), scale = norm2(gr, NULL, P);
    print_message("bf16: gradient %.2g%% off the reference's (L2), loss %.6f vs %.6f\n", 100 * off / scale, lb, lr);
    if (!(off <= 0.2 * scale) || !(fabs(lb - lr) <= 0.005 * fabs(lr)))
        fail_msg("bf16 chain %s: gradient off by %.3g of %.3g, loss %.6f vs %.6f", text, off, scale, lb, lr);
    free(x), free(ids), free(labels);
    st_net_destroy(bf), st_net_destroy(ref);
    st_model_destroy(m);
}

/* Whole models through bf16 layers and the fp32 ones between them (ReLU,
 * max-pool, batch norm, residual adds; layer norm, attention, GELU and the
 * tied head): a check of the plumbing, not of the arithmetic (the bound
 * above is, per layer).  The loss agrees within 0.5% (measured: 1e-5).  The
 * gradient within 20% of the reference's in L2: each element's error is
 * bounded relative to the sum of |terms| behind it, but an early layer's
 * weight gradient is a sum with much cancellation (through ReLUs, a global
 * average and batch norm's mean subtraction), so relative to itself it
 * moves more: measured 0.2% (CNN), 0.2% (GPT) and 8% (the residual CNN
 * with batch norm) with oneDNN's reference kernels.  A plumbing fault (a
 * layout misread, a missed conversion) moves it by ~100%. */
static void test_chains(void **state)
{
    (void)state;
    if (skipped())
        return;
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        chain_close("input 1 12 12\nconv 8 k3\nrelu\nmaxpool k2\nconv 8 k3\nrelu\nlinear 10\n", 4, 144, 1);
        chain_close("input 4 8 8\nconv 8 k3 p1\nbatchnorm\nrelu\nsave r\nconv 8 k3 p1\nbatchnorm\nadd r\n"
                    "relu\nconv 16 k3 s2 p1\nbatchnorm\nrelu\navgpool global\nlinear 10\n", 16, 256, 1);
        chain_close("input tokens 8\nembed 11 16\nblock heads 2\nlayernorm\nhead tied\n", 3, 8, 8);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate),
        cmocka_unit_test(test_layers_against_the_reference),
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_chains),
        cmocka_unit_test(test_any_isa_takes_reference_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
