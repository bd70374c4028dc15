/* The oneDNN backend's own plumbing, below the layers: where a layout puts
 * each element (dn_layout_offset, the engine's own arithmetic, checked
 * against hand-written formulas), the reorder check that catches a oneDNN
 * reorder putting elements in the wrong place (handed mismatched layouts,
 * it must say no), and weight reorders to the blocked layouts convolutions
 * use, for output counts that are not a multiple of 16 (where Debian 13's
 * oneDNN 3.7.2 misplaced a third of them): the data must land right, by a
 * direct reorder or the engine's two-step replacement. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <dnnl_debug.h>

#include "nettest.h"
#include "onednn/onednn_internal.h"

/* Any small net: its engine and stream are what the helpers need. */
static st_net *small_net(st_model **m)
{
    *m = parse("input 2 4 4\nconv 3 k3");
    st_net *n = NULL;
    const st_net_config cfg = {.batch = 1, .backend = ST_BACKEND_ONEDNN};
    if (st_net_create(&n, *m, &cfg) != ST_OK)
        fail_msg("net: %s", st_last_error());
    dn_net(n)->cur = -1;
    return n;
}

static dnnl_memory_desc_t md_of(dnnl_dim_t a, dnnl_dim_t b, dnnl_dim_t c, dnnl_dim_t d, dnnl_data_type_t dt,
                                dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {a, b, c, d};
    assert_int_equal(dnnl_memory_desc_create_with_tag(&md, 4, dims, dt, tag), dnnl_success);
    return md;
}

static dnnl_dim_t offset_of(const_dnnl_memory_desc_t md, dnnl_dim_t a, dnnl_dim_t b, dnnl_dim_t c, dnnl_dim_t d)
{
    struct dn_layout l;
    assert_true(dn_layout_of(md, &l));
    const dnnl_dim_t idx[4] = {a, b, c, d};
    return dn_layout_offset(&l, idx);
}

/* Every element of a 20 x 35 x 3 x 2 tensor where the layout's definition
 * (oneDNN's documentation of each tag) puts it. */
static void test_layout_offsets(void **state)
{
    (void)state;
    enum { A = 20, B = 35, C = 3, D = 2, PA = 32, PB = 48 };  /* padded to 16 */
    dnnl_memory_desc_t nchw = md_of(A, B, C, D, dnnl_f32, dnnl_abcd), nhwc = md_of(A, B, C, D, dnnl_f32, dnnl_acdb),
                       blk = md_of(A, B, C, D, dnnl_f32, dnnl_aBcd16b),
                       wts = md_of(A, B, C, D, dnnl_f32, dnnl_ABcd16a16b),
                       two = md_of(A, B, C, D, dnnl_f32, dnnl_ABcd4b16a4b);
    for (dnnl_dim_t a = 0; a < A; a++)
        for (dnnl_dim_t b = 0; b < B; b++)
            for (dnnl_dim_t c = 0; c < C; c++)
                for (dnnl_dim_t d = 0; d < D; d++) {
                    assert_int_equal(offset_of(nchw, a, b, c, d), ((a * B + b) * C + c) * D + d);
                    assert_int_equal(offset_of(nhwc, a, b, c, d), ((a * C + c) * D + d) * B + b);
                    assert_int_equal(offset_of(blk, a, b, c, d), (((a * PB / 16 + b / 16) * C + c) * D + d) * 16 + b % 16);
                    const dnnl_dim_t outer = ((a / 16 * PB / 16 + b / 16) * C + c) * D + d;
                    assert_int_equal(offset_of(wts, a, b, c, d), outer * 256 + a % 16 * 16 + b % 16);
                    /* two blocks on b: 4b (outer), 16a, 4b (inner) */
                    assert_int_equal(offset_of(two, a, b, c, d), outer * 256 + b % 16 / 4 * 64 + a % 16 * 4 + b % 4);
                }
    (void)PA;
    dnnl_memory_desc_t all[] = {nchw, nhwc, blk, wts, two};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dnnl_memory_desc_destroy(all[i]);
}

static dnnl_primitive_t reorder(st_net *n, dnnl_memory_desc_t from, dnnl_memory_desc_t to)
{
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t r;
    assert_int_equal(dnnl_reorder_primitive_desc_create(&pd, from, dn_net(n)->eng, to, dn_net(n)->eng, NULL), dnnl_success);
    assert_int_equal(dnnl_primitive_create(&r, pd), dnnl_success);
    dnnl_primitive_desc_destroy(pd);
    return r;
}

static bool verified(st_net *n, dnnl_primitive_t r, dnnl_memory_desc_t from, dnnl_memory_desc_t to)
{
    bool right = false;
    assert_int_equal(dn_reorder_verify(n, r, from, to, &right), ST_OK);
    return right;
}

/* A reorder checked against the layouts it was made for passes; against a
 * destination layout it does not write (another block size, another
 * order, or a type it does not produce), the check says it is wrong. */
static void test_reorder_check_says_no_to_a_wrong_reorder(void **state)
{
    (void)state;
    st_model *m;
    st_net *n = small_net(&m);
    dnnl_memory_desc_t plain = md_of(10, 6, 3, 3, dnnl_f32, dnnl_abcd), b16 = md_of(10, 6, 3, 3, dnnl_f32, dnnl_aBcd16b),
                       b8 = md_of(10, 6, 3, 3, dnnl_f32, dnnl_aBcd8b), nhwc = md_of(10, 6, 3, 3, dnnl_f32, dnnl_acdb),
                       b16_bf16 = md_of(10, 6, 3, 3, dnnl_bf16, dnnl_aBcd16b),
                       b8_bf16 = md_of(10, 6, 3, 3, dnnl_bf16, dnnl_aBcd8b);
    dnnl_primitive_t to_b16 = reorder(n, plain, b16), to_nhwc = reorder(n, plain, nhwc),
                     to_bf16 = reorder(n, plain, b16_bf16);
    assert_true(verified(n, to_b16, plain, b16));
    assert_true(verified(n, to_nhwc, plain, nhwc));
    assert_true(verified(n, to_bf16, plain, b16_bf16));
    assert_false(verified(n, to_b16, plain, b8));        /* same size, another block: the elements move */
    assert_false(verified(n, to_nhwc, plain, plain));    /* a transpose read as a copy */
    assert_false(verified(n, to_bf16, plain, b8_bf16));  /* bf16 (hashed values) */
    dnnl_primitive_t prims[] = {to_b16, to_nhwc, to_bf16};
    for (size_t i = 0; i < 3; i++)
        dnnl_primitive_destroy(prims[i]);
    dnnl_memory_desc_t mds[] = {plain, b16, b8, nhwc, b16_bf16, b8_bf16};
    for (size_t i = 0; i < 6; i++)
        dnnl_memory_desc_destroy(mds[i]);
    st_net_destroy(n);
    st_model_destroy(m);
}

/* Plain weights, through the engine's reorder (direct, or two steps where
 * the direct one is wrong; with `two_steps`, two steps in any case), to
 * each blocked layout a convolution's passes use, with output counts that
 * are not a multiple of 16: every value where the layout says, the padding
 * zero. */
static void weight_reorders_land_right(bool two_steps)
{
    static const dnnl_dim_t shapes[][4] = {{10, 6, 3, 3}, {6, 1, 3, 3}, {20, 32, 3, 3}, {24, 16, 5, 5}, {16, 16, 3, 3}};
    static const dnnl_format_tag_t tags[] = {dnnl_ABcd16a16b, dnnl_ABcd16b16a, dnnl_Acdb16a, dnnl_aBcd16b,
                                             dnnl_ABcd8a8b, dnnl_ABcd8b8a};
    st_model *m;
    st_net *n = small_net(&m);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t t = 0; t < sizeof tags / sizeof *tags; t++) {
            const dnnl_dim_t *d = shapes[s];
            const_dnnl_memory_desc_t plain_md, blocked_md;
            assert_int_equal(dn_md_tag(n, &plain_md, 4, d, dnnl_f32, dnnl_abcd), ST_OK);
            assert_int_equal(dn_md_tag(n, &blocked_md, 4, d, dnnl_f32, tags[t]), ST_OK);
            dnnl_memory_t plain, blocked;
            assert_int_equal(dn_mem_new(n, &plain, plain_md, NULL), ST_OK);
            assert_int_equal(dn_mem_new(n, &blocked, blocked_md, NULL), ST_OK);
            float *p = dn_mem_ptr(plain), *b = dn_mem_ptr(blocked);
            const size_t count = (size_t)(d[0] * d[1] * d[2] * d[3]), bytes = dnnl_memory_desc_get_size(blocked_md);
            for (size_t i = 0; i < count; i++)
                p[i] = (float)i + 1.0f;
            memset(b, 0xff, bytes);  /* NaN: where nothing is written */
            struct oplist ops = {0};
            bool done = true;
            if (two_steps)
                assert_int_equal(dn_add_reorder_two_step(n, &ops, plain, blocked, &done), ST_OK);
            else
                assert_int_equal(dn_add_reorder(n, &ops, plain, blocked), ST_OK);
            assert_true(done);
            assert_true(two_steps ? ops.n == 2 : ops.n == 1 || ops.n == 2);
            if (ops.n == 2 && !two_steps)
                print_message("%lldx%lldx%lldx%lld to %s: two steps (the direct reorder is wrong)\n",
                              (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3],
                              dnnl_fmt_tag2str(tags[t]));
            for (int i = 0; i < ops.n; i++)
                assert_int_equal(dnnl_primitive_execute(ops.v[i].prim, dn_net(n)->strm, ops.v[i].nargs, ops.v[i].args),
                                 dnnl_success);
            assert_int_equal(dnnl_stream_wait(dn_net(n)->strm), dnnl_success);
            double sum = 0;
            for (size_t i = 0; i < bytes / sizeof(float); i++)
                sum += b[i];  /* padding counts: it must be 0, not NaN */
            assert_true(sum == (double)count * (count + 1) / 2);
            for (dnnl_dim_t o = 0; o < d[0]; o++)
                for (dnnl_dim_t i = 0; i < d[1]; i++)
                    for (dnnl_dim_t y = 0; y < d[2]; y++)
                        for (dnnl_dim_t x = 0; x < d[3]; x++)
                            assert_true(b[offset_of(blocked_md, o, i, y, x)] ==
                                        p[((o * d[1] + i) * d[2] + y) * d[3] + x]);
            free(ops.v);
        }
    st_net_destroy(n);
    st_model_destroy(m);
}

static void test_weight_reorders_land_right(void **state)
{
    (void)state;
    weight_reorders_land_right(false);
}

/* The path a wrong oneDNN reorder takes, taken on purpose. */
static void test_two_step_reorders_land_right(void **state)
{
    (void)state;
    weight_reorders_land_right(true);
}

/* A layout rebuilt with another batch and data type (oneDNN 3 has no
 * setters): the same strides and blocks as a fresh descriptor of that
 * tag, dims and type, for plain, permuted and blocked layouts. */
static void test_md_like_keeps_the_layout(void **state)
{
    (void)state;
    st_model *m;
    st_net *n = small_net(&m);
    static const dnnl_format_tag_t tags[] = {dnnl_abcd, dnnl_acdb, dnnl_aBcd16b, dnnl_aBcd8b, dnnl_ABcd16b16a};
    for (size_t t = 0; t < sizeof tags / sizeof *tags; t++) {
        dnnl_memory_desc_t from = md_of(64, 20, 7, 5, dnnl_f32, tags[t]), want = md_of(16, 20, 7, 5, dnnl_bf16, tags[t]),
                           same = md_of(64, 20, 7, 5, dnnl_bf16, tags[t]);
        const_dnnl_memory_desc_t got, got_same;
        assert_int_equal(dn_md_like(n, &got, from, 16, dnnl_bf16), ST_OK);
        assert_int_equal(dn_md_like(n, &got_same, from, 0, dnnl_bf16), ST_OK);
        if (!dn_same(got, want) || !dn_same(got_same, same))
            fail_msg("dn_md_like changed the layout of %s", dnnl_fmt_tag2str(tags[t]));
        dnnl_memory_desc_destroy(from), dnnl_memory_desc_destroy(want), dnnl_memory_desc_destroy(same);
    }
    st_net_destroy(n);
    st_model_destroy(m);
}

/* The engine's one allocator takes calloc's (count, size): whole cache
 * lines from a line's start, zeroed to the last line's end when asked, and
 * NULL where count x size (or its rounding up to a line) does not fit. */
static void test_lines_alloc_takes_counts_as_calloc(void **state)
{
    (void)state;
    unsigned char *p = nn_lines_alloc(3, 5, true);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (int i = 0; i < 64; i++)
        assert_int_equal(p[i], 0);
    free(p);
    assert_null(nn_lines_alloc(SIZE_MAX / 4 + 1, 4, false));    /* the product wraps to 0 */
    assert_null(nn_lines_alloc(SIZE_MAX / 4 - 1, 4, false));    /* fits, but not rounded up to a line */
    assert_null(nn_lines_alloc(1, SIZE_MAX - 62, false));
    p = nn_lines_alloc(0, 4, true);                            /* calloc(0, ...): a block free() takes */
    assert_non_null(p);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_alloc_takes_counts_as_calloc),
        cmocka_unit_test(test_layout_offsets),
        cmocka_unit_test(test_md_like_keeps_the_layout),
        cmocka_unit_test(test_reorder_check_says_no_to_a_wrong_reorder),
        cmocka_unit_test(test_weight_reorders_land_right),
        cmocka_unit_test(test_two_step_reorders_land_right),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
