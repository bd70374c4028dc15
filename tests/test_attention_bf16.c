/* Attention's products in bf16 against the reference backend's attention
 * (ref_seq.c), forward and backward: both kernels, causal_bf16.c's dot
 * products and onednn_causal.c's oneDNN matmul primitives (in stripes of
 * 32, of 7 and of 100 rows, the last past the transposed softmax's blocks
 * of 64 queries), on shapes that cut every tile and stripe: T of 1, 7,
 * 9, 33, 40, 70, 97 and 130 (the dot products' tiles are 8 rows by 32
 * columns, pairs of k, their stripes 32 rows), head sizes 1, 3, 5, 7, 9,
 * 16, 17 and 64, one head and several.
 *
 * Tolerance, per element, stated.  Q, K, V and dY are bf16 values (exact in
 * fp32), so the kernel rounds only what it computes: P before P V and
 * P^T dY, dS before dS K and dS^T Q.  A rounding to bf16 is off by at most
 * u = 2^-8 of the value (8 significant bits, to nearest), the products of
 * pairs are exact in fp32, so a result sum_k R_k X_k with R rounded is off
 * by at most u sum_k |R_k X_k|, computed here in double from the
 * reference's P and dS (Y: u sum_j P_ij |V_jd|; dQ: u sum_j |dS_ij K_jd|;
 * dK: u sum_i |dS_ij Q_id|; dV: u sum_i P_ij |dY_id|), plus the fp32
 * engine's allowance against the reference, e = 1e-5 + 1e-4 max|reference|
 * (test_nn.c's, for the sums' order and the fp32 softmax).  And P, which
 * the kernel makes a stripe of rows at a time and keeps where asked, must be
 * the reference's within that fp32 allowance (its scores' operands are
 * bf16 values: nothing rounds) and the same bits in the backward pass as
 * in the forward. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_shapes.h"
#include "nettest.h"

#include "kernels/causal_bf16.h"
#include "kernels/causal_small.h"
#include "onednn/onednn_causal.h"
#include "ref/ref.h"
#include "shmtrain/bf16.h"
#include "shmtrain/nn.h"

static const double U = 1.0 / 256;

static float bf16_value(uint64_t *s, float scale)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    const float v = (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1) * scale;
    return st_bf16_to_f32(st_bf16_from_f32(v));
}


struct head_case {
    int t, hs, c;
    const float *qkv, *dy, *att;  /* att: the reference's P of this head */
    int h;
};

static double max_abs(const float *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

/* Q, K, V, dY of head h at (row, dim); dS of the reference in double. */
static double at(const struct head_case *k, int which, int i, int d)
{
    return which < 3 ? k->qkv[(size_t)i * 3 * k->c + (size_t)which * k->c + (size_t)k->h * k->hs + d]
                     : k->dy[(size_t)i * k->c + (size_t)k->h * k->hs + d];
}

static double ds_of(const struct head_case *k, int i, int j)
{
    const float *p = k->att + (size_t)i * k->t;
    double inner = 0, dp_j = 0;
    for (int l = 0; l <= i; l++) {
        double dp = 0;
        for (int d = 0; d < k->hs; d++)
            dp += at(k, 3, i, d) * at(k, 2, l, d);
        inner += dp * p[l];
        if (l == j)
            dp_j = dp;
    }
    return j <= i ? p[j] * (dp_j - inner) / sqrt((double)k->hs) : 0;
}

/* |got - want| <= u * bound + e, element by element (bound in double). */
static void check(const char *what, const struct shape *sh, const float *got, const float *want, const double *bound,
                  size_t n)
{
    const double e = 1e-5 + 1e-4 * max_abs(want, n);
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= U * bound[i] + e))
            fail_msg("T %d, head size %d, %d heads: %s[%zu] = %.7g, reference %.7g, allowed %.3g", sh->t, sh->hs,
                     sh->heads, what, i, got[i], want[i], U * bound[i] + e);
}

static void bounds(const struct head_case *k, double *by, double *bdq)
{
    const int t = k->t, hs = k->hs, c = k->c, row = 3 * c, col = k->h * hs;
    double *ds = malloc((size_t)t * t * sizeof *ds);
    for (int i = 0; i < t; i++)
        for (int j = 0; j < t; j++)
            ds[(size_t)i * t + j] = ds_of(k, i, j);
    for (int i = 0; i < t; i++)
        for (int d = 0; d < hs; d++) {
            double y = 0, dq = 0, dk = 0, dv = 0;
            for (int j = 0; j < t; j++) {
                y += k->att[(size_t)i * t + j] * fabs(at(k, 2, j, d));
                dq += fabs(ds[(size_t)i * t + j] * at(k, 1, j, d));
                dk += fabs(ds[(size_t)j * t + i] * at(k, 0, j, d));   /* i as the key */
                dv += k->att[(size_t)j * t + i] * fabs(at(k, 3, j, d));
            }
            by[(size_t)i * c + col + d] = y;
            bdq[(size_t)i * row + col + d] = dq;
            bdq[(size_t)i * row + c + col + d] = dk;
            bdq[(size_t)i * row + 2 * c + col + d] = dv;
        }
    free(ds);
}

/* The reference's bf16 attention (the same operands rounded, sums in
 * double) is the kernel's definition: the kernel is nearer it than to
 * fp32's attention by 16x at least in root mean square (measured: 100x to
 * 10^5x; what is left is fp32's summation order and, rarely, a P or dS
 * element rounded the other way from a value one fp32 ulp apart). */
static void nearer_its_definition(const struct shape *sh, const float *qkv, const float *dy, const float *y,
                                  const float *ry, const float *dq, const float *rdq)
{
    const int t = sh->t, c = sh->hs * sh->heads;
    const size_t nq = (size_t)t * 3 * c, ny = (size_t)t * c;
    float *att = malloc((size_t)sh->heads * t * t * 4), *ly = malloc(ny * 4), *ldq = malloc(nq * 4);
    assert_true(att && ly && ldq);
    ref_attention_fwd(ly, att, qkv, 1, t, c, sh->heads, ST_DTYPE_BF16);
    ref_attention_bwd(ldq, dy, qkv, att, 1, t, c, sh->heads, ST_DTYPE_BF16);
    const double y_def = rms_diff(y, ly, ny), y_fp32 = rms_diff(y, ry, ny);
    const double dq_def = rms_diff(dq, ldq, nq), dq_fp32 = rms_diff(dq, rdq, nq);
    print_message("T %2d, head size %2d: rms from the bf16 definition / from fp32: Y %.3g / %.3g, dQKV %.3g / %.3g\n",
                  t, sh->hs, y_def, y_fp32, dq_def, dq_fp32);
    if (t > 1 && (y_def * 16 > y_fp32 || dq_def * 16 > dq_fp32))
        fail_msg("T %d, head size %d: the kernel is not nearer the reference's bf16 attention", t, sh->hs);
    free(att), free(ly), free(ldq);
}

/* The kernel under test: causal_bf16.c's (matmul NULL), onednn_causal.c's,
 * or causal_small.c's with bf16 operands (small; it keeps no P to look at). */
struct kernel {
    dn_causal *matmul;
    bool small;
    void *scratch;
    float *stats;  /* matmul, small: the head's softmax statistics, from its forward pass to its backward */
};

/* stripe: the matmul's rows a stripe; 0: the dot products; SMALL: causal_small.c. */
enum { SMALL = -1 };

static struct kernel kernel_for(dnnl_engine_t engine, long stripe, long t, long hs)
{
    struct kernel k = {NULL, stripe == SMALL, NULL, malloc((size_t)t * 2 * sizeof(float))};
    assert_non_null(k.stats);
    if (stripe > 0 && dn_causal_create(&k.matmul, engine, t, hs, stripe, 1, false) != ST_OK)
        fail_msg("%s", st_last_error());
    const size_t bytes = k.matmul ? dn_causal_scratch_bytes(k.matmul)
                         : k.small ? causal_small_scratch_bytes(t, hs)
                                   : causal_bf16_scratch_bytes(t, hs);
    k.scratch = aligned_alloc(64, bytes / 64 * 64 + 64);
    assert_non_null(k.scratch);
    memset(k.scratch, 0xff, bytes);  /* NaNs: a read of scratch never written shows */
    return k;
}

static void forward(const struct kernel *k, float *y, long ldy, float *p, const float *q, long ld, long t, long hs)
{
    if (k->small)
        causal_small_forward(y, ldy, q, q + ld / 3, q + 2 * ld / 3, ld, t, hs, k->stats, k->scratch,
                             CAUSAL_SMALL_BF16);
    else if (k->matmul)
        assert_int_equal(dn_causal_forward(k->matmul, 0, (dn_rows){y, ldy, false}, p, (dn_rows){(float *)q, ld, false},
                                           k->stats, k->scratch),
                         ST_OK);
    else
        causal_bf16_forward(y, ldy, p, q, ld, t, hs, k->scratch);
}

static void backward(const struct kernel *k, float *dq, float *p, const float *dy, long ldy, const float *q, long ld,
                     long t, long hs)
{
    if (k->small)
        causal_small_backward(dq, dq + ld / 3, dq + 2 * ld / 3, ld, dy, ldy, q, q + ld / 3, q + 2 * ld / 3, ld, t, hs,
                              k->stats, k->scratch, CAUSAL_SMALL_BF16);
    else if (k->matmul)
        assert_int_equal(dn_causal_backward(k->matmul, 0, (dn_rows){dq, ld, false}, p, (dn_rows){(float *)dy, ldy, false},
                                            (dn_rows){(float *)q, ld, false}, k->stats, k->scratch),
                         ST_OK);
    else
        causal_bf16_backward(dq, p, dy, ldy, q, ld, t, hs, k->scratch);
}

static st_bf16 *rounded(const float *v, size_t n)
{
    st_bf16 *r = malloc(n * sizeof *r);
    assert_non_null(r);
    st_bf16_from_f32_n(r, v, n);
    return r;
}

/* The matmul kernel on bf16 rows (a bf16 net's edges): Q, K, V and dY read
 * as the bf16 values they are, Y and dQKV written rounded once from the same
 * sums, so each is the fp32 rows' result rounded, bit for bit. */
static void bf16_rows_are_fp32_rows_rounded(const struct kernel *k, const struct shape *sh, const float *qkv,
                                            const float *dy, const float *y, const float *dq)
{
    const int t = sh->t, hs = sh->hs, c = hs * sh->heads, row = 3 * c;
    const size_t nq = (size_t)t * row, ny = (size_t)t * c;
    st_bf16 *q16 = rounded(qkv, nq), *dy16 = rounded(dy, ny), *want_y = rounded(y, ny), *want_dq = rounded(dq, nq);
    st_bf16 *y16 = calloc(ny, sizeof *y16), *dq16 = calloc(nq, sizeof *dq16);
    assert_true(y16 && dq16);
    for (int h = 0; h < sh->heads; h++) {
        assert_int_equal(dn_causal_forward(k->matmul, 0, (dn_rows){y16 + h * hs, c, true}, NULL,
                                           (dn_rows){q16 + h * hs, row, true}, k->stats, k->scratch),
                         ST_OK);
        assert_int_equal(dn_causal_backward(k->matmul, 0, (dn_rows){dq16 + h * hs, row, true}, NULL,
                                            (dn_rows){dy16 + h * hs, c, true}, (dn_rows){q16 + h * hs, row, true},
                                            k->stats, k->scratch),
                         ST_OK);
    }
    for (size_t i = 0; i < ny; i++)
        if (y16[i] != want_y[i])
            fail_msg("T %d, head size %d: bf16 Y[%zu] %04x, the fp32 rows' rounded %04x", t, hs, i, y16[i], want_y[i]);
    for (size_t i = 0; i < nq; i++)
        if (dq16[i] != want_dq[i])
            fail_msg("T %d, head size %d: bf16 dQKV[%zu] %04x, the fp32 rows' rounded %04x", t, hs, i, dq16[i],
                     want_dq[i]);
    free(q16), free(dy16), free(want_y), free(want_dq), free(y16), free(dq16);
}

static void run_shape(const struct shape *sh, uint64_t seed, dnnl_engine_t engine, long stripe)
{
    const int t = sh->t, hs = sh->hs, c = hs * sh->heads, row = 3 * c;
    const size_t nq = (size_t)t * row, ny = (size_t)t * c;
    float *qkv = malloc(nq * sizeof *qkv), *dy = malloc(ny * sizeof *dy), *att = malloc((size_t)sh->heads * t * t * 4);
    float *y = calloc(ny, 4), *ry = calloc(ny, 4), *dq = calloc(nq, 4), *rdq = calloc(nq, 4);
    float *p = malloc((size_t)t * t * 4), *p2 = malloc((size_t)t * t * 4);
    double *by = calloc(ny, sizeof *by), *bdq = calloc(nq, sizeof *bdq);
    double *no_rounding = calloc((size_t)t * t, sizeof *no_rounding);  /* P's operands are bf16 values */
    const struct kernel kn = kernel_for(engine, stripe, t, hs);
    assert_true(qkv && dy && att && y && ry && dq && rdq && p && p2 && by && bdq && no_rounding);
    uint64_t s = seed;
    for (size_t i = 0; i < nq; i++)
        qkv[i] = bf16_value(&s, 2.0f);  /* scores of a few units: a softmax far from uniform */
    for (size_t i = 0; i < ny; i++)
        dy[i] = bf16_value(&s, 1.0f);
    ref_attention_fwd(ry, att, qkv, 1, t, c, sh->heads, ST_DTYPE_F32);
    ref_attention_bwd(rdq, dy, qkv, att, 1, t, c, sh->heads, ST_DTYPE_F32);
    for (int h = 0; h < sh->heads; h++) {
        forward(&kn, y + h * hs, c, p, qkv + h * hs, row, t, hs);
        backward(&kn, dq + h * hs, p2, dy + h * hs, c, qkv + h * hs, row, t, hs);
        if (!kn.small && memcmp(p, p2, (size_t)t * t * sizeof *p) != 0)
            fail_msg("T %d, head size %d: P in backward is not forward's bits", t, hs);
        if (!kn.small)
            check("P", sh, p, att + (size_t)h * t * t, no_rounding, (size_t)t * t);
        const struct head_case k = {t, hs, c, qkv, dy, att + (size_t)h * t * t, h};
        bounds(&k, by, bdq);
    }
    check("Y", sh, y, ry, by, ny);
    check("dQKV", sh, dq, rdq, bdq, nq);
    nearer_its_definition(sh, qkv, dy, y, ry, dq, rdq);
    if (kn.matmul)
        bf16_rows_are_fp32_rows_rounded(&kn, sh, qkv, dy, y, dq);
    /* and it did round: some output off by more than fp32's allowance (past one position) */
    const double e = 1e-5 + 1e-4 * max_abs(ry, ny);
    bool rounded = t == 1;
    for (size_t i = 0; i < ny && !rounded; i++)
        rounded = fabs((double)y[i] - ry[i]) > e;
    if (!rounded)
        fail_msg("T %d, head size %d: Y within fp32's allowance everywhere: were P and V rounded to bf16?", t, hs);
    free(qkv), free(dy), free(att), free(y), free(ry), free(dq), free(rdq), free(p), free(p2);
    free(by), free(bdq), free(no_rounding), free(kn.scratch), free(kn.stats);
    dn_causal_destroy(kn.matmul);
}

static void test_attention_bf16_against_reference(void **state)
{
    (void)state;
    if (!causal_bf16_available()) {
        print_message("this CPU has no AVX512-BF16: attention stays fp32 in a bf16 net, nothing to check\n");
        skip();
    }
    for (size_t i = 0; i < NSHAPES; i++)
        run_shape(&SHAPES[i], 1000 + i, NULL, 0);
}

/* The products as oneDNN's matmul primitives, on whatever kernel oneDNN
 * has for this CPU (AMX, AVX512-BF16; its reference ones elsewhere). */
static void test_matmul_products_against_reference(void **state)
{
    (void)state;
    dnnl_engine_t engine;
    assert_int_equal(dnnl_engine_create(&engine, dnnl_cpu, 0), dnnl_success);
    for (size_t k = 0; k < NSTRIPES; k++)
        for (size_t i = 0; i < NSHAPES; i++)
            run_shape(&SHAPES[i], 2000 + i, engine, STRIPES[k]);
    dnnl_engine_destroy(engine);
}

/* causal_small.c's kernel with bf16 operands (P and dS rounded) on every
 * head size it takes and T that cut its blocks of 6 queries and its
 * 16-key vectors, against the same allowance: it rounds what the dot
 * products round, and sums the same exact products in fp32 in another
 * order. */
static void test_small_heads_against_reference(void **state)
{
    (void)state;
    if (!causal_bf16_available() || !causal_small_fits(64, 32))
        skip();  /* no bf16 attention here, or no AVX-512 for the kernel */
    static const int ts[] = {1, 7, 17, 64, 130};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        for (int hs = 16; hs <= 64; hs += 16) {
            const struct shape sh = {ts[i], hs, 1 + (int)(i + (size_t)hs / 16) % 2};
            run_shape(&sh, 5000 + i * 64 + (size_t)hs, NULL, SMALL);
        }
}

/* In a bf16 net the attention layer runs the bf16 kernel in both passes:
 * its output and every gradient differ (bit for bit) from the same net with
 * SHMTRAIN_ATTENTION_FP32, and the layer says bf16: the short-context
 * kernel where it fits (AVX-512; T 40, head size 32 here: 1280 of its
 * 4096), else oneDNN's matmul where oneDNN has AMX or T is up to 256 (T 80
 * x 64) and the dot products elsewhere (T 272); the dot
 * products under SHMTRAIN_ATTENTION_DOT and the matmul under _MATMUL
 * (test_switches compares what they compute with the default's). */
static void test_the_net_runs_it_both_ways(void **state)
{
    (void)state;
    if (!causal_bf16_available())
        skip();
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, "input tokens 40\nembed 13 64\nlinear 192\nattention heads 2\nhead tied\n",
                                    "test"), ST_OK);
    st_net_config cfg = {.batch = 2, .precision = ST_DTYPE_BF16};
    st_net *nets[2];
    for (int k = 0; k < 2; k++) {
        cfg.tuning.attention_fp32 = k;
        assert_int_equal(st_net_create(&nets[k], m, &cfg), ST_OK);
    }
    assert_int_equal(st_net_layer_compute(nets[0], 2), ST_DTYPE_BF16);
    assert_int_equal(st_net_layer_compute(nets[1], 2), ST_DTYPE_F32);
    const char *dot = "bf16 dot products", *matmul = "bf16 oneDNN matmul";
    const char *chosen = causal_small_fits(40, 32) ? "bf16 short-context heads" : matmul;
    const struct {
        st_nn_tuning tuning;
        const char *says;
    } asked[] = {{{.attention_dot = true}, dot}, {{.attention_matmul = true}, matmul}};
    char *said = net_description(nets[0]);
    if (!strstr(said, chosen))
        fail_msg("the attention layer should say %s:\n%s", chosen, said);
    free(said);
    /* past the short kernel's area (T 80 x 64 dimensions: 5120) the matmul; past T 256 too
     * (272 x 16) only where oneDNN has AMX, the dot products elsewhere */
    const struct {
        const char *text, *says;
    } past[] = {{"input tokens 80\nembed 13 128\nlinear 384\nattention heads 2\nhead tied\n", matmul},
                {"input tokens 272\nembed 13 32\nlinear 96\nattention heads 2\nhead tied\n",
                 st_nn_amx_supported() ? matmul : dot}};
    cfg.tuning = (st_nn_tuning){0};
    for (size_t i = 0; i < sizeof past / sizeof *past; i++) {
        st_model *wide = NULL;
        st_net *net;
        assert_int_equal(st_model_parse(&wide, past[i].text, "test"), ST_OK);
        assert_int_equal(st_net_create(&net, wide, &cfg), ST_OK);
        said = net_description(net);
        if (!strstr(said, past[i].says))
            fail_msg("this head should take the %s:\n%s\n%s", past[i].says, past[i].text, said);
        free(said);
        st_net_destroy(net);
        st_model_destroy(wide);
    }
    for (size_t i = 0; i < sizeof asked / sizeof *asked; i++) {
        st_net *other;
        cfg.tuning = asked[i].tuning;
        assert_int_equal(st_net_create(&other, m, &cfg), ST_OK);
        said = net_description(other);
        if (!strstr(said, asked[i].says))
            fail_msg("asked for the %s, the attention layer said:\n%s", asked[i].says, said);
        free(said);
        st_net_destroy(other);
    }
    size_t P;
    st_net_init(nets[0], 3);
    float *params = st_net_params(nets[1], &P);
    memcpy(params, st_net_params(nets[0], NULL), P * sizeof(float));
    int32_t ids[80];
    int labels[80], correct;
    for (int i = 0; i < 80; i++)
        ids[i] = (i * 7) % 13, labels[i] = (i * 5) % 13;
    const size_t out = st_net_output_size(nets[0]);
    float *y[2] = {malloc(out * sizeof(float)), malloc(out * sizeof(float))}, loss;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(st_net_forward(nets[k], ids), ST_OK);
        st_net_output(nets[k], y[k]);
        assert_int_equal(st_net_loss(nets[k], labels, &loss, &correct), ST_OK);
        assert_int_equal(st_net_backward(nets[k]), ST_OK);
    }
    if (!memcmp(y[0], y[1], out * sizeof(float)))
        fail_msg("the forward pass is fp32's bits: attention did not run in bf16");
    if (!memcmp(st_net_grads(nets[0], NULL), st_net_grads(nets[1], NULL), P * sizeof(float)))
        fail_msg("the gradients are fp32's bits: attention's backward did not run in bf16");
    free(y[0]), free(y[1]);
    st_net_destroy(nets[0]), st_net_destroy(nets[1]);
    st_model_destroy(m);
}

/* Two head shapes in one net (64 columns as 2 heads of 32, then as 4 of
 * 16): under SHMTRAIN_ATTENTION_MATMUL each layer runs primitives made for
 * its own shape.  Against SHMTRAIN_ATTENTION_DOT (the same bf16 operands):
 * loss and gradients within test_switches' bf16 allowance, 4u of
 * the largest (each rounded operand off by u = 2^-8 of itself, a few
 * products chained between the loss and a gradient); primitives of the
 * other shape read past or short of a head and are off by far more. */
static void test_two_head_shapes_in_one_net(void **state)
{
    (void)state;
    if (!causal_bf16_available())
        skip();
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, "input tokens 40\nembed 13 64\nlinear 192\nattention heads 2\n"
                                        "linear 192\nattention heads 4\nhead tied\n", "test"), ST_OK);
    st_net_config cfg = {.batch = 2, .precision = ST_DTYPE_BF16};
    st_net *nets[2];
    float loss[2];
    int32_t ids[80];
    int labels[80], correct;
    for (int i = 0; i < 80; i++)
        ids[i] = (i * 7) % 13, labels[i] = (i * 5) % 13;
    size_t P;
    for (int k = 0; k < 2; k++) {
        cfg.tuning = (st_nn_tuning){.attention_dot = !k, .attention_matmul = k};
        assert_int_equal(st_net_create(&nets[k], m, &cfg), ST_OK);
        float *params = st_net_params(nets[k], &P);
        if (k == 0)
            st_net_init(nets[0], 5);
        else
            memcpy(params, st_net_params(nets[0], NULL), P * sizeof(float));
        assert_int_equal(st_net_forward(nets[k], ids), ST_OK);
        assert_int_equal(st_net_loss(nets[k], labels, &loss[k], &correct), ST_OK);
        assert_int_equal(st_net_backward(nets[k]), ST_OK);
    }
    const double tol = 4.0 / 256;
    size_t at;
    double scale;
    const double worst = max_diff(st_net_grads(nets[1], NULL), st_net_grads(nets[0], NULL), P, 0, &at, &scale);
    print_message("two head shapes: loss %.7g / %.7g, gradients within %.2g of %.2g\n", loss[1], loss[0], worst,
                  scale);
    if (!(fabs(loss[1] - loss[0]) <= tol * fmax(1.0, fabs(loss[0]))) || !(worst <= tol * scale))
        fail_msg("under SHMTRAIN_ATTENTION_MATMUL: loss %.7g (the dot products %.7g), gradient %zu off by %g of %g", loss[1],
                 loss[0], at, worst, scale);
    st_net_destroy(nets[0]), st_net_destroy(nets[1]);
    st_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_bf16_against_reference),
        cmocka_unit_test(test_matmul_products_against_reference),
        cmocka_unit_test(test_small_heads_against_reference),
        cmocka_unit_test(test_the_net_runs_it_both_ways),
        cmocka_unit_test(test_two_head_shapes_in_one_net),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
