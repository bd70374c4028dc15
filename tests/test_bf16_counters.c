/* The bf16 dataflow, checked through the net's counters of conversions and
 * weight reorders and what it says each layer computes in
 * (st_net_counters, st_net_layer_compute).
 *
 * Every preset, forward + loss + backward three times: an fp32 net
 * converts nothing; a bf16 net counts the same every step, computes in
 * bf16 in every layer the layer table lets, and converts only at the
 * edges between an fp32-only layer and a bf16 one, which per_preset
 * states one by one.  Counting is checked against the
 * counters' definition on a one-layer net, whose moves are known: the
 * input converted on the way in, its gradient's conversion on the way
 * back, the logits' conversion out, each with its exact bytes.
 *
 * Natively where oneDNN has bf16; elsewhere the test_bf16_counters_any_isa
 * entry runs it on oneDNN's reference bf16 kernels (tests/bf16_any_isa.c),
 * which count the same moves. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nettest.h"
#include "shmtrain/nn.h"

static const char *const presets[] = {"mlp", "lenet", "cnn", "resnet", "gpt-mini"};

static bool skipped(void)
{
    if (bf16_here())
        return false;
    print_message("skipped: no native bf16 here; test_bf16_counters_any_isa runs this on oneDNN's reference "
                  "bf16 kernels\n");
    return true;
}

/* One training step's passes on a seeded batch: images or token ids. */
static void step(st_net *n, const st_model *m, int batch, uint64_t seed)
{
    st_shape shape;
    st_dtype in_type;
    st_model_input(m, &shape, &in_type);
    const size_t per = st_shape_elems(&shape), positions = (size_t)st_model_positions(m);
    void *input = malloc((size_t)batch * per * 4);
    int *labels = malloc((size_t)batch * positions * sizeof(int));
    assert_non_null(input);
    assert_non_null(labels);
    uint64_t s = seed;
    const int vocab = st_model_vocab(m), classes = st_model_classes(m);
    for (size_t i = 0; i < (size_t)batch * per; i++) {
        const float r = frand(&s);
        if (in_type == ST_DTYPE_I32)
            ((int *)input)[i] = (int)((r + 1) / 2 * (float)(vocab - 1));
        else
            ((float *)input)[i] = r;
    }
    for (size_t i = 0; i < (size_t)batch * positions; i++)
        labels[i] = (int)((frand(&s) + 1) / 2 * (float)(classes - 1));
    float loss;
    int correct;
    assert_int_equal(st_net_forward(n, input), ST_OK);
    assert_int_equal(st_net_loss(n, labels, &loss, &correct), ST_OK);
    assert_int_equal(st_net_backward(n), ST_OK);
    free(labels);
    free(input);
}

/* Three training steps on seeded batches of 2, each one's counters. */
static void three_steps(st_net *n, const st_model *m, st_net_counters *first, st_net_counters *second,
                        st_net_counters *third)
{
    st_net_counters *each[] = {first, second, third};
    for (int k = 0; k < 3; k++) {
        st_net_counters_reset(n);
        step(n, m, 2, (uint64_t)k + 1);
        st_net_counters_get(n, each[k]);
    }
}

static st_net *preset_net_on(const char *name, st_model **m, int batch, st_dtype precision, st_backend backend)
{
    assert_int_equal(st_model_load(m, name), ST_OK);
    st_net *n = NULL;
    const st_net_config c = {.batch = batch, .backend = backend, .precision = precision, .tuning = env_tuning()};
    if (st_net_create(&n, *m, &c) != ST_OK)
        fail_msg("%s: %s", name, st_last_error());
    return n;
}

static st_net *preset_net(const char *name, st_model **m, int batch, st_dtype precision)
{
    return preset_net_on(name, m, batch, precision, ST_BACKEND_ONEDNN);
}

static void test_fp32_converts_nothing(void **state)
{
    (void)state;
    for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
        st_model *m;
        st_net *n = preset_net(presets[p], &m, 2, ST_DTYPE_F32);
        step(n, m, 2, 1);
        st_net_counters c;
        st_net_counters_get(n, &c);
        if (c.conversions || c.converted_bytes)
            fail_msg("%s in fp32: %llu conversions, %llu bytes", presets[p], c.conversions, c.converted_bytes);
        assert_int_equal(st_net_lowp_layers(n), 0);
        st_net_destroy(n);
        st_model_destroy(m);
    }
}

/* Per preset in bf16: the layers that compute in bf16 and the conversions
 * a step makes, each an edge between an fp32-only layer and a bf16 one.
 *
 * mlp: 3 of 4 (the flatten reads the fp32 input as it is); 2 conversions:
 *   the input into the first linear layer, and the loss gradient into the
 *   last one's backward (the loss reads and writes fp32).
 * lenet: 7 of 10 (the first convolution reads 1 channel and stays fp32, so
 *   do the pool and ReLU after it); 3: the second convolution's input, the
 *   loss gradient, and that convolution's input gradient on its way back
 *   to the fp32 block, which on AVX512-BF16 only a bf16 kernel writes (6
 *   input channels; oneDNN's reference kernels and, where it has AMX, its
 *   jit:avx512_core_amx backward-data kernel write it in fp32 at once: 2).
 * cnn: 6 of 9, the same shape as lenet but 32 channels, whose kernel
 *   writes the fp32 input gradient itself: 2.
 * resnet: 22 of 22 (the model's 29 less 4 ReLUs inside their batch norms
 *   and 3 inside their adds; its stem reads 3 channels, RGB, which the rule lets
 *   compute in bf16, so the residual stream is bf16 from the start); 2: the
 *   input into the stem, the loss gradient into the last linear layer.
 * gpt-mini: 21 of 43 (4 blocks of 4 linear layers and a GELU between two of
 *   them, which carries their bf16, and the tied head; 25 where attention
 *   computes in bf16 too, on AVX512-BF16 and in the reference; the residual
 *   adds and the embeddings are fp32, and layer norm computes in fp32 but
 *   writes bf16 for its linear layers); 10: per block, the output gradients
 *   of the attention's output layer and of the MLP's second (from the fp32
 *   residual add), backward; and the head's, its input rows and its logits'
 *   gradient, once for its batch's one chunk (the loss computes the
 *   gradient where it computed the logits; the last layer norm writes fp32
 *   for it: the head rounds its rows itself).  Attention reads and writes
 *   bf16 where it computes in it; where it stays fp32 (no AVX512-BF16, under
 *   oneDNN's reference kernels) its edges with the linear layers around it
 *   convert too, 2 a block each way: 8 more (fp32_attention_conversions).
 *
 * Weight reorders after the first step: no bf16 weight is converted in a
 * step (the optimizer writes the copies; the first step writes each copy
 * once).  What is left: an fp32 convolution's 2 (its weights into the
 * kernel's layout, its gradient back: cnn's first, as in fp32; lenet's
 * first is the C stem, which reads and writes the flat buffers: 0), and,
 * natively, 1 per bf16 convolution (resnet has 9): oneDNN's bf16
 * backward-weights kernels write fp32 gradients only in a blocked layout,
 * reordered into the flat buffer (the reference kernels write it plain).
 * Linear layers read plain bf16 weights and write plain gradients: 0 (on
 * AMX a layer of 512 rows or more reorders its plain copy into the tiles'
 * blocked layout once a step: none of these presets at these batches). */
static const struct {
    const char *preset;
    int bf16_layers, conversions, amx_conversions, reference_conversions, weight_reorders, reference_weight_reorders;
    int attention_layers;  /* in bf16 too where the CPU has AVX512-BF16 (causal_bf16.c) */
    int fp32_attention_conversions;  /* more where attention stays fp32 */
    int reference_weight_copies;     /* one per layer computing low with weights (not attention, not GELU) */
} per_preset[] = {
    {"mlp", 3, 2, 2, 2, 0, 0, 0, 0, 3},
    {"lenet", 7, 3, 2, 2, 0 + 1, 0, 0, 0, 4},      /* its second convolution, 3 linear layers */
    {"cnn", 6, 2, 2, 2, 2 + 1, 2, 0, 0, 3},
    {"resnet", 22, 2, 2, 2, 9, 0, 0, 0, 10},       /* 9 convolutions, the linear layer; 4 ReLUs in their norms,
                                                      3 in their adds */
    {"gpt-mini", 21, 10, 10, 10, 0, 0, 4, 2 * 4, 17}, /* 4 blocks of 4 linear layers, the tied head */
};

static void test_bf16_counts_per_preset(void **state)
{
    (void)state;
    if (skipped())
        return;
    const bool reference = getenv("SHMTRAIN_BF16_ANY_ISA") != NULL;
    for (size_t p = 0; p < sizeof per_preset / sizeof *per_preset; p++) {
        const char *name = per_preset[p].preset;
        st_model *m;
        st_net *n = preset_net(name, &m, 2, ST_DTYPE_BF16);
        st_net_counters first, second, third;
        int ncopies;
        st_net_weight_copies(n, &ncopies);
        three_steps(n, m, &first, &second, &third);
        print_message("%-9s bf16 layers %d of %d; per step %llu conversions (%llu bytes), %llu weight reorders; "
                      "%d weight copies\n", name, st_net_lowp_layers(n), st_net_layers(n), second.conversions,
                      second.converted_bytes, second.weight_reorders, ncopies);
        /* a conversion is a fixed part of the plan, not a first-step cost;
         * the first step writes each weight copy once */
        assert_memory_equal(&second, &third, sizeof second);
        assert_int_equal(first.conversions, second.conversions);
        assert_int_equal(first.weight_reorders, second.weight_reorders + (unsigned)ncopies);
        const bool attention_low = __builtin_cpu_supports("avx512bf16");
        assert_int_equal(st_net_lowp_layers(n),
                         per_preset[p].bf16_layers + (attention_low ? per_preset[p].attention_layers : 0));
        assert_int_equal(second.conversions, (reference               ? per_preset[p].reference_conversions
                                              : st_nn_amx_supported() ? per_preset[p].amx_conversions
                                                                      : per_preset[p].conversions) +
                                                 (attention_low ? 0 : per_preset[p].fp32_attention_conversions));
        assert_int_equal(second.weight_reorders,
                         reference ? per_preset[p].reference_weight_reorders : per_preset[p].weight_reorders);
        st_net_destroy(n);
        st_model_destroy(m);
    }
}

/* One linear layer in bf16, 3 samples of 8 features to 4 outputs: its
 * forward converts its input (3x8 fp32: 96 bytes) to bf16 and its backward
 * its output gradient (3x4 fp32: 48 bytes); its output and input
 * gradient are fp32 (the loss and the caller read them).  Its weights are
 * a bf16 copy written once before the first forward pass, again only after
 * someone took a writable pointer to the parameters, never by a step. */
static void test_counts_by_definition(void **state)
{
    (void)state;
    if (skipped())
        return;
    st_model *m = parse("input 8\nlinear 4\n");
    st_net *n = NULL;
    const st_net_config c = {.batch = 3, .precision = ST_DTYPE_BF16, .input_grad = true, .tuning = env_tuning()};
    assert_int_equal(st_net_create(&n, m, &c), ST_OK);
    assert_int_equal(st_net_layers(n), 2);  /* a flatten (a view of the input), the linear layer */
    assert_int_equal(st_net_layer_compute(n, 0), ST_DTYPE_F32);
    assert_int_equal(st_net_layer_compute(n, 1), ST_DTYPE_BF16);
    float x[24], dy[12];
    uint64_t s = 7;
    for (int i = 0; i < 24; i++)
        x[i] = frand(&s);
    for (int i = 0; i < 12; i++)
        dy[i] = frand(&s);
    st_net_counters k;
    assert_int_equal(st_net_forward(n, x), ST_OK);
    st_net_counters_get(n, &k);
    assert_int_equal(k.conversions, 1);
    assert_int_equal(k.converted_bytes, 24 * 4);
    assert_int_equal(k.weight_reorders, 1);  /* the copy's first write */
    st_net_counters_reset(n);
    assert_int_equal(st_net_backward_from(n, dy), ST_OK);
    st_net_counters_get(n, &k);
    assert_int_equal(k.conversions, 1);
    assert_int_equal(k.converted_bytes, 12 * 4);
    assert_int_equal(k.weight_reorders, 0);
    st_net_counters_reset(n);
    assert_int_equal(st_net_forward(n, x), ST_OK);
    st_net_counters_get(n, &k);
    assert_int_equal(k.weight_reorders, 0);
    st_net_params(n, NULL)[0] = 0.5f;  /* a writer: the copy is written again */
    assert_true(st_net_weight_copies_differing(n) > 0);
    assert_int_equal(st_net_forward(n, x), ST_OK);
    st_net_counters_get(n, &k);
    assert_int_equal(k.weight_reorders, 1);
    assert_int_equal(st_net_weight_copies_differing(n), 0);
    st_net_destroy(n);
    st_model_destroy(m);
}

/* The optimizer keeps the copies: after every step of a 20-step run (SGD
 * with momentum, then AdamW), each bf16 weight equals a fresh conversion of
 * its fp32 master, bit for bit, and no step rewrote them itself. */
static void test_optimizer_keeps_the_copies(void **state)
{
    (void)state;
    if (skipped())
        return;
    const char *models[] = {"mlp", "lenet"};
    for (int kind = 0; kind < 2; kind++)
        for (int mi = 0; mi < 2; mi++) {
            st_model *m;
            st_net *n = preset_net(models[mi], &m, 4, ST_DTYPE_BF16);
            size_t P;
            float *params = st_net_params(n, &P);
            st_net_init(n, 5);
            st_optim *o;
            const st_optim_config oc = {.kind = kind ? ST_OPTIM_ADAMW : ST_OPTIM_SGD, .momentum = kind ? 0 : 0.9f};
            assert_int_equal(st_optim_create(&o, P, &oc), ST_OK);
            int ncopies;
            const st_weight_copy *copies = st_net_weight_copies(n, &ncopies);
            assert_true(ncopies > 0);
            st_optim_set_copies(o, copies, ncopies);
            for (int it = 0; it < 20; it++) {
                st_net_counters_reset(n);
                step(n, m, 4, 100 + (uint64_t)it);
                st_net_counters k;
                st_net_counters_get(n, &k);
                if (it > 0 && k.weight_reorders != (unsigned)per_preset[mi].reference_weight_reorders &&
                    k.weight_reorders != (unsigned)per_preset[mi].weight_reorders)
                    fail_msg("%s step %d: %llu weight reorders", models[mi], it, k.weight_reorders);
                st_optim_step(o, params, st_net_grads(n, NULL), 0.01f);
                const size_t differing = st_net_weight_copies_differing(n);
                if (differing)
                    fail_msg("%s, %s, step %d: %zu bf16 weights differ from their masters", models[mi],
                             kind ? "AdamW" : "SGD", it, differing);
            }
            st_optim_destroy(o);
            st_net_destroy(n);
            st_model_destroy(m);
        }
}

/* The reference backend defines a low-precision net (bf16 or fp16) on any
 * CPU, and plans it as oneDNN does: per preset, the same layers compute
 * low (attention too: the reference rounds its operands without the
 * instruction), and a step converts at the same edges as oneDNN's
 * reference bf16 kernels (reference_conversions above: the reference has
 * no kernel that writes a type it was not asked for), the same count every
 * step; its weights are copies in that type, written once before the
 * first step, then only by the optimizer.  Where oneDNN runs bf16 here,
 * its plan is the reference's, layer by layer. */
static void test_reference_counts_per_preset(void **state)
{
    (void)state;
    const st_dtype lows[] = {ST_DTYPE_BF16, ST_DTYPE_F16};
    for (size_t q = 0; q < 2; q++)
        for (size_t p = 0; p < sizeof per_preset / sizeof *per_preset; p++) {
            const char *name = per_preset[p].preset;
            st_model *m;
            st_net *n = preset_net_on(name, &m, 2, lows[q], ST_BACKEND_REFERENCE);
            st_net_counters first, second, third;
            int ncopies;
            st_net_weight_copies(n, &ncopies);
            three_steps(n, m, &first, &second, &third);
            print_message("%-9s reference %s: %d of %d layers; per step %llu conversions (%llu bytes), %d weight "
                          "copies\n", name, st_dtype_name(lows[q]), st_net_lowp_layers(n), st_net_layers(n),
                          second.conversions, second.converted_bytes, ncopies);
            assert_int_equal(st_net_lowp_layers(n), per_preset[p].bf16_layers + per_preset[p].attention_layers);
            assert_int_equal(second.conversions, per_preset[p].reference_conversions);
            assert_memory_equal(&second, &third, sizeof second);
            assert_int_equal(first.conversions, second.conversions);
            assert_int_equal(first.weight_reorders, (unsigned)ncopies);
            assert_int_equal(second.weight_reorders, 0);
            assert_int_equal(ncopies, per_preset[p].reference_weight_copies);
            if (lows[q] == ST_DTYPE_BF16 && bf16_here()) {
                st_model *m2;
                st_net *fast = preset_net(name, &m2, 2, ST_DTYPE_BF16);
                const bool attention_low = st_net_lowp_layers(fast) == st_net_lowp_layers(n);
                for (int i = 0; i < st_net_layers(n) && attention_low; i++)
                    if (st_net_layer_compute(fast, i) != st_net_layer_compute(n, i))
                        fail_msg("%s layer %d: oneDNN computes in %s, the reference in %s", name, i,
                                 st_dtype_name(st_net_layer_compute(fast, i)),
                                 st_dtype_name(st_net_layer_compute(n, i)));
                st_net_destroy(fast);
                st_model_destroy(m2);
            }
            st_net_destroy(n);
            st_model_destroy(m);
        }
}

/* A precision request is checked in one place, with one spelling. */
static void test_precision_request(void **state)
{
    (void)state;
    st_dtype t;
    assert_true(st_dtype_parse("fp32", &t) && t == ST_DTYPE_F32);
    assert_true(st_dtype_parse("bf16", &t) && t == ST_DTYPE_BF16);
    assert_false(st_dtype_parse("f32", &t));
    assert_false(st_dtype_parse("BF16", &t));
    assert_string_equal(st_dtype_name(ST_DTYPE_F32), "fp32");
    assert_int_equal(st_nn_precision_check(ST_DTYPE_F32, ST_BACKEND_REFERENCE, NULL), ST_OK);
    assert_true(st_dtype_parse("fp16", &t) && t == ST_DTYPE_F16);
    /* the reference defines both low precisions, on any CPU */
    assert_int_equal(st_nn_precision_check(ST_DTYPE_BF16, ST_BACKEND_REFERENCE, NULL), ST_OK);
    assert_int_equal(st_nn_precision_check(ST_DTYPE_F16, ST_BACKEND_REFERENCE, NULL), ST_OK);
    assert_int_equal(st_nn_precision_check(ST_DTYPE_F16, ST_BACKEND_ONEDNN, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "precision fp16"));
    assert_int_equal(st_nn_precision_check(ST_DTYPE_I32, ST_BACKEND_ONEDNN, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "precision i32"));
    assert_int_equal(st_nn_precision_check(ST_DTYPE_I64, ST_BACKEND_REFERENCE, NULL), ST_ERR_INVALID);
    const st_nn_tuning tuning = env_tuning();
    assert_int_equal(st_nn_precision_check(ST_DTYPE_BF16, ST_BACKEND_ONEDNN, &tuning),
                     bf16_here() ? ST_OK : ST_ERR_INVALID);
}

/* A plan-only net (st_net_config.plan_only, what --summary prints) says
 * what the built net does, layer by layer, for every preset in both
 * precisions; and nothing runs on it. */
static void test_the_plan_is_the_build(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++) {
        const st_dtype precision = q ? ST_DTYPE_BF16 : ST_DTYPE_F32;
        if (q && skipped())
            return;
        for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
            st_model *m;
            st_net *built = preset_net(presets[p], &m, 2, precision), *plan = NULL;
            const st_net_config c = {.batch = 2, .precision = precision, .tuning = env_tuning(), .plan_only = true};
            assert_int_equal(st_net_create(&plan, m, &c), ST_OK);
            assert_int_equal(st_net_layers(plan), st_net_layers(built));
            for (int i = 0; i < st_net_layers(built); i++) {
                if (st_net_layer_compute(plan, i) != st_net_layer_compute(built, i))
                    fail_msg("%s %s layer %d: planned %s, built %s", presets[p], st_dtype_name(precision), i,
                             st_dtype_name(st_net_layer_compute(plan, i)),
                             st_dtype_name(st_net_layer_compute(built, i)));
            }
            char *a = NULL, *b = NULL;
            size_t la = 0, lb = 0;
            FILE *fa = open_memstream(&a, &la), *fb = open_memstream(&b, &lb);
            st_net_describe_precision(plan, fa);
            st_net_describe_precision(built, fb);
            fclose(fa);
            fclose(fb);
            assert_string_equal(a, b);
            free(a);
            free(b);
            size_t count = 1;
            assert_null(st_net_params(plan, &count));
            int32_t ids[2048] = {0};
            assert_int_equal(st_net_forward(plan, ids), ST_ERR_INVALID);
            assert_non_null(strstr(st_last_error(), "plan only"));
            st_net_destroy(plan);
            st_net_destroy(built);
            st_model_destroy(m);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precision_request),
        cmocka_unit_test(test_fp32_converts_nothing),
        cmocka_unit_test(test_counts_by_definition),
        cmocka_unit_test(test_optimizer_keeps_the_copies),
        cmocka_unit_test(test_bf16_counts_per_preset),
        cmocka_unit_test(test_the_plan_is_the_build),
        cmocka_unit_test(test_reference_counts_per_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
