/* fp32 attention's products as oneDNN matmul primitives (onednn_causal.c on
 * fp32 operands: an fp32 net's attention where causal_small.c's
 * short-context kernel, tested below, does not run) against the reference
 * backend's attention (ref_seq.c), forward and backward, in stripes of 32, 7 and 100
 * rows (the last past the transposed softmax's blocks of 64 queries), on
 * shapes that cut every stripe: T of 1, 7, 9, 33, 40, 70, 97 and 130,
 * head sizes 1 to 64, one head and several.
 *
 * Tolerance: test_nn.c's fp32 allowance against the reference, per element
 * e = 1e-5 + 1e-4 max|reference| of the array: the kernel sums the same
 * products in oneDNN's order over at most T terms (round-off of order
 * sqrt(T) 2^-24 of the largest, 1e-6 at T 130) and its softmax multiplies
 * by the sum's reciprocal (one more ulp); a product run on bf16 operands
 * is off by ~2^-9 of the values, past e, and the test asks that it is not
 * (operands are not bf16 values here).  P, kept where asked, is the
 * reference's within the same allowance and the same bits in the backward
 * pass as in the forward (made again from the forward's statistics).  On
 * bf16 rows the results are the fp32 rows' rounded, bit for bit. */
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

#include "kernels/causal_small.h"
#include "onednn/onednn_causal.h"
#include "ref/ref.h"
#include "shmtrain/bf16.h"
#include "shmtrain/nn.h"


static float value(uint64_t *s, float scale)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1) * scale;
}

static double max_abs(const float *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* Every element within e of the reference; the worst error returned. */
static double check(const char *what, const struct shape *sh, long stripe, const float *got, const float *want,
                    size_t n)
{
    const double e = 1e-5 + 1e-4 * max_abs(want, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        worst = fmax(worst, d);
        if (!(d <= e))
            fail_msg("T %d, head size %d, %d heads, stripes of %ld: %s[%zu] = %.7g, reference %.7g, allowed %.3g",
                     sh->t, sh->hs, sh->heads, stripe, what, i, got[i], want[i], e);
    }
    return worst;
}

/* One head after another through the kernel on rows of fp32 or bf16. */
static void heads(dn_causal *k, const struct shape *sh, bool bf16, void *y, void *dq, const void *qkv, const void *dy,
                  float *stats, void *scratch)
{
    const long hs = sh->hs, c = hs * sh->heads, es = bf16 ? 2 : 4;
    for (int h = 0; h < sh->heads; h++) {
        const dn_rows q = {(char *)qkv + h * hs * es, 3 * c, bf16};
        assert_int_equal(dn_causal_forward(k, 0, (dn_rows){(char *)y + h * hs * es, c, bf16}, NULL, q, stats, scratch),
                         ST_OK);
        assert_int_equal(dn_causal_backward(k, 0, (dn_rows){(char *)dq + h * hs * es, 3 * c, bf16}, NULL,
                                            (dn_rows){(char *)dy + h * hs * es, c, bf16}, q, stats, scratch),
                         ST_OK);
    }
}

/* On bf16 rows (an fp32 attention between bf16 layers) the products widen
 * what they read and round what they write once, from the same sums: the
 * results are the fp32 rows' on the same values, rounded, bit for bit. */
static void bf16_rows_are_fp32_rows_rounded(dn_causal *k, const struct shape *sh, const float *qkv, const float *dy,
                                            float *stats, void *scratch)
{
    const size_t nq = (size_t)sh->t * 3 * sh->hs * sh->heads, ny = nq / 3;
    st_bf16 *q16 = malloc(nq * 2), *dy16 = malloc(ny * 2), *y16 = calloc(ny, 2), *dq16 = calloc(nq, 2);
    float *qv = malloc(nq * 4), *dyv = malloc(ny * 4), *y = calloc(ny, 4), *dq = calloc(nq, 4);
    assert_true(q16 && dy16 && y16 && dq16 && qv && dyv && y && dq);
    st_bf16_from_f32_n(q16, qkv, nq), st_bf16_to_f32_n(qv, q16, nq);
    st_bf16_from_f32_n(dy16, dy, ny), st_bf16_to_f32_n(dyv, dy16, ny);
    heads(k, sh, false, y, dq, qv, dyv, stats, scratch);
    heads(k, sh, true, y16, dq16, q16, dy16, stats, scratch);
    for (size_t i = 0; i < nq; i++)
        if ((i < ny && y16[i] != st_bf16_from_f32(y[i])) || dq16[i] != st_bf16_from_f32(dq[i]))
            fail_msg("T %d, head size %d: bf16 rows' result %zu is not the fp32 rows' rounded", sh->t, sh->hs, i);
    free(q16), free(dy16), free(y16), free(dq16), free(qv), free(dyv), free(y), free(dq);
}

static void run_shape(const struct shape *sh, uint64_t seed, dnnl_engine_t engine, long stripe)
{
    const int t = sh->t, hs = sh->hs, c = hs * sh->heads, row = 3 * c;
    const size_t nq = (size_t)t * row, ny = (size_t)t * c, tt = (size_t)t * t;
    float *qkv = malloc(nq * 4), *dy = malloc(ny * 4), *att = malloc(sh->heads * tt * 4);
    float *y = calloc(ny, 4), *ry = calloc(ny, 4), *dq = calloc(nq, 4), *rdq = calloc(nq, 4);
    float *p = malloc(tt * 4), *p2 = malloc(tt * 4), *stats = malloc((size_t)t * 2 * 4);
    dn_causal *k = NULL;
    if (dn_causal_create(&k, engine, t, hs, stripe, 1, true) != ST_OK)
        fail_msg("%s", st_last_error());
    void *scratch = aligned_alloc(64, dn_causal_scratch_bytes(k) / 64 * 64 + 64);
    assert_true(qkv && dy && att && y && ry && dq && rdq && p && p2 && stats && scratch);
    uint64_t s = seed;
    for (size_t i = 0; i < nq; i++)
        qkv[i] = value(&s, 2.0f);  /* scores of a few units: a softmax far from uniform */
    for (size_t i = 0; i < ny; i++)
        dy[i] = value(&s, 1.0f);
    ref_attention_fwd(ry, att, qkv, 1, t, c, sh->heads, ST_DTYPE_F32);
    ref_attention_bwd(rdq, dy, qkv, att, 1, t, c, sh->heads, ST_DTYPE_F32);
    for (int h = 0; h < sh->heads; h++) {
        const dn_rows q = {qkv + h * hs, row, false};
        assert_int_equal(dn_causal_forward(k, 0, (dn_rows){y + h * hs, c, false}, p, q, stats, scratch), ST_OK);
        assert_int_equal(dn_causal_backward(k, 0, (dn_rows){dq + h * hs, row, false}, p2,
                                            (dn_rows){dy + h * hs, c, false}, q, stats, scratch),
                         ST_OK);
        if (memcmp(p, p2, tt * sizeof *p) != 0)
            fail_msg("T %d, head size %d: P in backward is not forward's bits", t, hs);
        check("P", sh, stripe, p, att + h * tt, tt);
    }
    const double wy = check("Y", sh, stripe, y, ry, ny), wdq = check("dQKV", sh, stripe, dq, rdq, nq);
    /* bf16 operands would be off by ~2^-9 of Y's scale: fp32's are ~2^-20 */
    if (t > 1 && (wy > 1e-5 * max_abs(ry, ny) || wdq > 1e-5 * max_abs(rdq, nq)))
        fail_msg("T %d, head size %d: worst error Y %.3g, dQKV %.3g: not fp32 products", t, hs, wy, wdq);
    bf16_rows_are_fp32_rows_rounded(k, sh, qkv, dy, stats, scratch);
    free(qkv), free(dy), free(att), free(y), free(ry), free(dq), free(rdq), free(p), free(p2), free(stats);
    free(scratch);
    dn_causal_destroy(k);
}

static void test_fp32_matmul_against_reference(void **state)
{
    (void)state;
    dnnl_engine_t engine;
    assert_int_equal(dnnl_engine_create(&engine, dnnl_cpu, 0), dnnl_success);
    for (size_t k = 0; k < NSTRIPES; k++)
        for (size_t i = 0; i < NSHAPES; i++)
            run_shape(&SHAPES[i], 3000 + i, engine, STRIPES[k]);
    dnnl_engine_destroy(engine);
}

/* causal_small.c's short-context kernel against the reference, with the
 * same allowance as the matmul (the same products over at most T terms in
 * another order, and the softmax's reciprocal): T that cut its blocks of 6
 * queries and its 16-key vectors (1, 5, 6, 7, 16, 17, 64, 97, 130, 256),
 * every head size it takes, one head and several, each head's rows where
 * the layer's lie (Q, K, V in [T, 3C] rows; dY in [T, C]), its scratch
 * NaNs to start with.  The same inputs give the same bits a second time
 * (a sum in a fixed order). */
static void run_small_shape(const struct shape *sh, uint64_t seed)
{
    const int t = sh->t, hs = sh->hs, c = hs * sh->heads, row = 3 * c;
    const size_t nq = (size_t)t * row, ny = (size_t)t * c;
    float *qkv = malloc(nq * 4), *dy = malloc(ny * 4), *att = malloc(sh->heads * (size_t)t * t * 4);
    float *y = calloc(ny, 4), *ry = calloc(ny, 4), *dq = calloc(nq, 4), *rdq = calloc(nq, 4), *dq2 = calloc(nq, 4);
    float *stats = malloc((size_t)t * 2 * 4);
    void *scratch = aligned_alloc(64, causal_small_scratch_bytes(t, hs) / 64 * 64 + 64);
    assert_true(qkv && dy && att && y && ry && dq && rdq && dq2 && stats && scratch);
    memset(scratch, 0xff, causal_small_scratch_bytes(t, hs));  /* NaNs: a read of scratch it never wrote shows */
    uint64_t s = seed;
    for (size_t i = 0; i < nq; i++)
        qkv[i] = value(&s, 2.0f);
    for (size_t i = 0; i < ny; i++)
        dy[i] = value(&s, 1.0f);
    ref_attention_fwd(ry, att, qkv, 1, t, c, sh->heads, ST_DTYPE_F32);
    ref_attention_bwd(rdq, dy, qkv, att, 1, t, c, sh->heads, ST_DTYPE_F32);
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < sh->heads; h++) {
            const float *q = qkv + h * hs;
            float *d = (pass ? dq2 : dq) + h * hs;
            causal_small_forward(y + h * hs, c, q, q + c, q + 2 * c, row, t, hs, stats, scratch, CAUSAL_SMALL_FP32);
            causal_small_backward(d, d + c, d + 2 * c, row, dy + h * hs, c, q, q + c, q + 2 * c, row, t, hs, stats,
                                  scratch, CAUSAL_SMALL_FP32);
        }
    check("Y", sh, 0, y, ry, ny);
    check("dQKV", sh, 0, dq, rdq, nq);
    if (memcmp(dq, dq2, nq * sizeof *dq) != 0)
        fail_msg("T %d, head size %d: the same inputs gave other bits", t, hs);
    free(qkv), free(dy), free(att), free(y), free(ry), free(dq), free(rdq), free(dq2), free(stats), free(scratch);
}

static void test_small_heads_against_reference(void **state)
{
    (void)state;
    if (!causal_small_fits(64, 32))
        skip();  /* no AVX-512 here: the layer takes the matmul (test_the_net_chooses_it) */
    static const int ts[] = {1, 5, 6, 7, 16, 17, 64, 97, 130, CAUSAL_SMALL_MAX_T};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        for (int hs = 16; hs <= 64; hs += 16) {
            const struct shape sh = {ts[i], hs, 1 + (int)(i + (size_t)hs / 16) % 3};
            assert_true(causal_small_fits(sh.t, sh.hs));
            run_small_shape(&sh, 7000 + i * 64 + (size_t)hs);
        }
    assert_false(causal_small_fits(CAUSAL_SMALL_MAX_T + 1, 32));
    assert_false(causal_small_fits(64, 24));
    assert_false(causal_small_fits(64, 80));
}

/* An fp32 net's attention runs the short-context kernel where it fits
 * (AVX-512; T 40, head size 32 here), the fp32 matmul under
 * SHMTRAIN_ATTENTION_MATMUL or where it does not fit (head size 24) and
 * causal.c's tiles under SHMTRAIN_ATTENTION_TILES (test_switches compares
 * what they compute); a bf16 net's attention made fp32
 * (SHMTRAIN_ATTENTION_FP32) runs the fp32 matmul (its edges may be bf16). */
static void test_the_net_chooses_it(void **state)
{
    (void)state;
    const bool small = causal_small_fits(40, 32);
    const struct {
        const char *width;
        st_dtype precision;
        st_nn_tuning tuning;
        const char *says;
    } cases[] = {
        {"64", ST_DTYPE_F32, {0}, small ? "causal fp32 short-context heads" : "causal fp32 oneDNN matmul"},
        {"48", ST_DTYPE_F32, {0}, "causal fp32 oneDNN matmul"},
        {"64", ST_DTYPE_F32, {.attention_matmul = true}, "causal fp32 oneDNN matmul"},
        {"64", ST_DTYPE_F32, {.attention_tiles = true}, "causal fp32 tiles"},
        {"64", ST_DTYPE_BF16, {.attention_fp32 = true}, "causal fp32 oneDNN matmul"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].precision == ST_DTYPE_BF16 && !__builtin_cpu_supports("avx512bf16"))
            continue;  /* a bf16 net needs native bf16 */
        char text[160];
        snprintf(text, sizeof text, "input tokens 40\nembed 13 %s\nlinear %d\nattention heads 2\nhead tied\n",
                 cases[i].width, 3 * atoi(cases[i].width));
        st_model *m = NULL;
        assert_int_equal(st_model_parse(&m, text, "test"), ST_OK);
        st_net_config cfg = {.batch = 2, .precision = cases[i].precision, .tuning = cases[i].tuning};
        st_net *n;
        assert_int_equal(st_net_create(&n, m, &cfg), ST_OK);
        char *said = net_description(n);
        if (!strstr(said, cases[i].says))
            fail_msg("case %zu: the net did not say \"%s\":\n%s", i, cases[i].says, said);
        free(said);
        st_net_destroy(n);
        st_model_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_matmul_against_reference),
        cmocka_unit_test(test_small_heads_against_reference),
        cmocka_unit_test(test_the_net_chooses_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
