/* AMX's pair layouts of the bf16 weight copies (copy_layouts.c), which the
 * optimizer writes in place of a plain copy and a reorder each step.
 *
 * The definition is oneDNN's own reorder of the plain bf16 copy into the
 * layout (a permutation: the same words at other places, its padding
 * zeros): every shape below, written whole and in ranges cut anywhere
 * (inside a row, inside a 64-row group, at a group's edge), gives the
 * reorder's bytes, and st_weight_copy_place finds every element.  The
 * values include ties, NaN, infinities and denormals, so a writer rounding
 * otherwise than st_bf16_from_f32 fails too.  This part runs on any CPU
 * (oneDNN reorders into these layouts without AMX).
 *
 * Through a net, where oneDNN has AMX: gpt-mini at 512 rows a step writes
 * its linear layers' and its head's blocked weights so (no weight reorder
 * a step), every copy equal to its master after each optimizer step, and
 * training the same bits as the reorders (SHMTRAIN_ONEDNN_REORDERED_COPIES). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/copy_layouts.h"
#include "nettest.h"
#include "shmtrain/bf16.h"
#include "shmtrain/nn.h"

#define DN(call) assert_int_equal((call), dnnl_success)

/* The layout's bytes as oneDNN's reorder makes them from the plain bf16
 * rows (rows x cols, row-major): `tag` over [rows, cols], or over
 * [cols, rows] from the plain rows read transposed.  *bytes: its size. */
static uint16_t *onednn_reorder(const st_bf16 *plain, long rows, long cols, dnnl_format_tag_t tag, bool transposed,
                                size_t *bytes)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    const dnnl_dims_t dims = {transposed ? cols : rows, transposed ? rows : cols};
    dnnl_memory_desc_t from, to;
    DN(dnnl_memory_desc_create_with_tag(&from, 2, dims, dnnl_bf16, transposed ? dnnl_ba : dnnl_ab));
    DN(dnnl_memory_desc_create_with_tag(&to, 2, dims, dnnl_bf16, tag));
    *bytes = dnnl_memory_desc_get_size(to);
    uint16_t *out = calloc(*bytes, 1);
    assert_non_null(out);
    dnnl_memory_t src, dst;
    DN(dnnl_memory_create(&src, from, eng, (void *)plain));
    DN(dnnl_memory_create(&dst, to, eng, out));
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t reorder;
    DN(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL));
    DN(dnnl_primitive_create(&reorder, pd));
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    DN(dnnl_primitive_execute(reorder, stream, 2, args));
    DN(dnnl_stream_wait(stream));
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(src);
    dnnl_memory_destroy(dst);
    dnnl_memory_desc_destroy(from);
    dnnl_memory_desc_destroy(to);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return out;
}

/* Weights with every rounding case among them. */
static float *weights(long rows, long cols, uint64_t seed)
{
    const size_t count = (size_t)(rows * cols);
    float *w = malloc(count * sizeof *w);
    assert_non_null(w);
    fill_rand(w, count, seed);
    const uint32_t special[] = {0x3f808000u /* a tie, to even */, 0x3f818000u /* a tie, up */, 0x7fc00001u,
                                0xff800000u, 0x00000001u /* denormal */, 0x807fffffu, 0x7f7fffffu};
    for (size_t k = 0; k < sizeof special / sizeof *special; k++)
        memcpy(&w[(k * 7919u) % count], &special[k], sizeof special[k]);
    return w;
}

/* Cuts: the whole copy at once, then in ranges ending at each cut. */
static void write_in_ranges(const st_weight_copy *c, const float *w, const size_t *cuts, int ncuts)
{
    size_t from = 0;
    for (int k = 0; k <= ncuts; k++) {
        const size_t to = k < ncuts && cuts[k] < c->count ? cuts[k] : c->count;
        nn_copy_write(c, w, from, to);
        from = to;
    }
}

static void check_shape(long rows, long cols, st_copy_layout layout, dnnl_format_tag_t tag, bool transposed)
{
    const size_t count = (size_t)(rows * cols);
    float *w = weights(rows, cols, (uint64_t)(rows * 1000 + cols));
    st_bf16 *plain = malloc(count * sizeof *plain);
    assert_non_null(plain);
    st_bf16_from_f32_n(plain, w, count);
    size_t bytes;
    uint16_t *want = onednn_reorder(plain, rows, cols, tag, transposed, &bytes);
    uint16_t *mine = aligned_alloc(64, (bytes + 63) / 64 * 64);  /* a copy's buffer, as oneDNN's: streamed stores */
    assert_non_null(mine);
    const st_weight_copy c = {.offset = 0, .count = count, .dst = mine, .type = ST_DTYPE_BF16, .layout = layout,
                              .rows = rows, .cols = cols};
    const size_t group = 64 * (size_t)cols;
    const size_t splits[][4] = {
        {count},                                      /* whole */
        {1, (size_t)cols + 3, group, group + 1},      /* a row cut, a group's edge, one past it */
        {group / 2, 2 * group - 5, 2 * group + cols}, /* inside groups */
    };
    for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
        memset(mine, 0, bytes);
        write_in_ranges(&c, w, splits[s], 4);
        if (memcmp(mine, want, bytes)) {
            size_t at = 0;
            while (mine[at] == want[at])
                at++;
            fail_msg("%ld x %ld, layout %d, split %zu: word %zu is %04x, oneDNN's reorder %04x", rows, cols,
                     (int)layout, s, at, mine[at], want[at]);
        }
    }
    for (size_t i = 0; i < count; i++)
        if (mine[st_weight_copy_place(&c, i)] != plain[i])
            fail_msg("%ld x %ld, layout %d: element %zu not at its place", rows, cols, (int)layout, i);
    free(w), free(plain), free(want), free(mine);
}

/* Shapes: one block, fewer rows and columns than a block, a last group cut
 * short, columns past a 256-column slab and not a block's multiple, two
 * 64-row groups of a real layer's width. */
static const long SHAPES[][2] = {{64, 32}, {10, 20}, {100, 50}, {130, 70}, {257, 96}, {64, 293}, {128, 768}};

static void test_layouts_are_onednns(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof SHAPES / sizeof *SHAPES; k++) {
        const long rows = SHAPES[k][0], cols = SHAPES[k][1];
        check_shape(rows, cols, ST_COPY_PAIRS_ALONG_ROWS, dnnl_AB16b64a2b, false);
        check_shape(rows, cols, ST_COPY_PAIRS_ALONG_ROWS, dnnl_BA16a64b2a, true);
        check_shape(rows, cols, ST_COPY_PAIRS_DOWN_COLUMNS, dnnl_BA16a64b2a, false);
    }
}

/* ------------------------------------------------------ through a net -- */

/* steps SGD-with-momentum steps of gpt-mini in bf16 at batch 8 (512 rows:
 * AMX's blocked weights), the optimizer keeping the copies; the
 * parameters after them. */
static float *train(bool reordered, int steps, size_t *count, int *paired, unsigned long long *reorders)
{
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, "gpt-mini"), ST_OK);
    st_net_config cfg = {.batch = 8, .precision = ST_DTYPE_BF16, .tuning = env_tuning()};
    cfg.tuning.reordered_copies = reordered;
    st_net *n = NULL;
    if (st_net_create(&n, m, &cfg) != ST_OK)
        fail_msg("net: %s", st_last_error());
    st_net_init(n, 3);
    float *params = st_net_params(n, count);
    int ncopies;
    const st_weight_copy *copies = st_net_weight_copies(n, &ncopies);
    *paired = 0;
    for (int k = 0; k < ncopies; k++)
        *paired += copies[k].layout != ST_COPY_LISTED;
    st_optim *o;
    const st_optim_config oc = {.kind = ST_OPTIM_SGD, .momentum = 0.9f};
    assert_int_equal(st_optim_create(&o, *count, &oc), ST_OK);
    st_optim_set_copies(o, copies, ncopies);
    const size_t rows = 8 * (size_t)st_model_positions(m);
    int32_t *ids = malloc(rows * sizeof *ids);
    int *labels = malloc(rows * sizeof *labels);
    assert_non_null(ids);
    assert_non_null(labels);
    for (int s = 0; s < steps; s++) {
        const size_t vocab = (size_t)st_model_vocab(m);
        for (size_t i = 0; i < rows; i++) {
            ids[i] = (int32_t)((i * 31 + (size_t)s * 7) % vocab);
            labels[i] = (int)((i * 13 + 5) % vocab);
        }
        st_net_counters_reset(n);
        float loss;
        int correct;
        assert_int_equal(st_net_forward(n, ids), ST_OK);
        assert_int_equal(st_net_loss(n, labels, &loss, &correct), ST_OK);
        assert_int_equal(st_net_backward(n), ST_OK);
        st_net_counters k;
        st_net_counters_get(n, &k);
        *reorders = k.weight_reorders;
        st_optim_step(o, params, st_net_grads(n, NULL), 0.05f);
        const size_t differing = st_net_weight_copies_differing(n);
        if (differing)
            fail_msg("step %d%s: %zu bf16 weights differ from their masters", s, reordered ? " (reordered)" : "",
                     differing);
    }
    float *out = malloc(*count * sizeof *out);
    assert_non_null(out);
    memcpy(out, params, *count * sizeof *out);
    free(ids), free(labels);
    st_optim_destroy(o);
    st_net_destroy(n);
    st_model_destroy(m);
    return out;
}

static void test_optimizer_writes_amx_layouts(void **state)
{
    (void)state;
    if (!bf16_here() || !st_nn_amx_supported()) {
        print_message("skipped: oneDNN has no AMX here, so no blocked bf16 weights\n");
        return;
    }
    size_t pa, pb;
    int paired, paired_reordered;
    unsigned long long reorders, reorders_reordered;
    float *a = train(false, 4, &pa, &paired, &reorders);
    float *b = train(true, 4, &pb, &paired_reordered, &reorders_reordered);
    print_message("gpt-mini, 512 rows: %d copies in pair layouts, %llu weight reorders a step (reordered: %d, %llu)\n",
                  paired, reorders, paired_reordered, reorders_reordered);
    assert_int_equal(paired, 4 * 4 + 2);  /* 4 blocks of 4 linear layers, the head's two tables */
    assert_int_equal(reorders, 0);
    assert_int_equal(paired_reordered, 0);
    assert_int_equal(reorders_reordered, 4 * 4 + 2);
    assert_int_equal(pa, pb);
    assert_memory_equal(a, b, pa * sizeof *a);
    free(a), free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts_are_onednns),
        cmocka_unit_test(test_optimizer_writes_amx_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
