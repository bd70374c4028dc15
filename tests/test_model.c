/* The model text: the parser's errors (file:line: what), shapes and the
 * text it gives back, and the preset files under models/ equal to the
 * built-in presets. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"  /* model_layer_flops: the layer table's `flops` column */
#include "shmtrain/nn.h"

static void test_parser_errors(void **state)
{
    (void)state;
    const struct {
        const char *text, *fragment;
    } bad[] = {
        {"", "empty model"},
        {"# only a comment\n", "empty model"},
        {"input 1 28 28\n", "no layers"},
        {"conv 3 k3\n", "test:1: the first layer must be 'input"},
        {"input 1 28\nrelu", "test:1: input: expected"},
        {"input 1 28 28\ninput 1 28 28", "test:2: input: declared twice"},
        {"input 1 28 28\nfoo 3", "test:2: unknown layer 'foo'"},
        {"input 1 28 28\nconv k3", "test:2: conv: first argument"},
        {"input 1 28 28\nconv 8", "test:2: conv: missing kernel"},
        {"input 1 28 28\nconv 8 k3 q2", "test:2: conv: bad argument 'q2'"},
        {"input 1 28 28\nconv 8 k3 s0", "stride must be at least 1"},
        {"input 1 4 4\nconv 8 k5", "test:2: conv: kernel 5 is larger than its 4x4 input"},
        {"input 1 28 28\nconv 0 k3", "output channels"},
        {"input 1 28 28\nmaxpool", "missing kernel"},
        {"input 1 28 28\nmaxpool k2 p1", "padding 1 must be less than half the kernel"},
        {"input 1 2 2\nmaxpool k3", "kernel 3 is larger"},
        {"input 1 28 28\nlinear", "linear: first argument"},
        {"input 1 28 28\nlinear 10 bias", "bad argument 'bias'"},
        {"input 1 28 28\nlinear 10\nconv 3 k1", "test:3: conv needs an image input"},
        {"input 1 28 28\nlinear 10\nbatchnorm", "batchnorm (2-d) needs an image"},
        {"input 1 28 28\ndropout", "needs one probability"},
        {"input 1 28 28\ndropout 1.5", "must be a number in [0, 1)"},
        {"input 1 28 28\nrelu 3", "relu: takes no arguments"},
        {"input 1 28 28\nlinear 3\nflatten", "already flat"},
        {"input 1 28 28\nadd a", "no activation was saved as 'a'"},
        {"input 1 28 28\nsave a\nsave a", "already used"},
        {"input 1 8 8\nsave a\nconv 4 k3 p1\nadd a", "shapes differ"},
        {"input 1 8 8\nsave a\nconv 4 k3 p1\nadd a project", "add: use 'add NAME'"},
        {"input 1 28 28\nconv 8 k3 s1 p1 a b c d e f g h i j k l m n o p q r s t u v w x y z 1 2 3", "too many arguments"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        st_model *m = (st_model *)0x1;
        st_status st = st_model_parse(&m, bad[i].text, "test");
        if (st != ST_ERR_FORMAT || m != NULL || !strstr(st_last_error(), bad[i].fragment))
            fail_msg("case %zu (%s): status %d, message '%s'", i, bad[i].fragment, (int)st, st_last_error());
    }
    st_model *m = (st_model *)0x1;
    assert_int_equal(st_model_load(&m, "/no/such/model"), ST_ERR_IO);
    assert_non_null(strstr(st_last_error(), "--model /no/such/model"));
}

static void test_parser_shapes_and_text(void **state)
{
    (void)state;
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, "lenet"), ST_OK);
    assert_int_equal(st_model_param_count(m), 61706);  /* torch: LeNet-5 with padding 2 */
    assert_int_equal(st_model_classes(m), 10);
    st_shape in;
    st_dtype dtype;
    st_model_input(m, &in, &dtype);
    char shape[32];
    st_shape_str(&in, shape, sizeof shape);
    assert_string_equal(shape, "1x28x28");
    assert_int_equal(in.ndims, 3);
    assert_int_equal(st_shape_elems(&in), 784);
    assert_int_equal(st_model_input_size(m), 784);
    assert_int_equal(dtype, ST_DTYPE_F32);
    assert_string_equal(st_dtype_name(dtype), "fp32");
    assert_int_equal(st_dtype_size(ST_DTYPE_BF16), 2);
    assert_non_null(strstr(st_model_text(m), "conv 6 k5 s1 p2\nrelu\nmaxpool k2 s2 p0\n"));
    st_model *again = NULL;  /* the canonical text parses to the same text */
    assert_int_equal(st_model_parse(&again, st_model_text(m), "canonical"), ST_OK);
    assert_string_equal(st_model_text(again), st_model_text(m));
    st_model_destroy(again);
    st_model_destroy(m);
    assert_int_equal(st_model_load(&m, "mlp"), ST_OK);
    assert_int_equal(st_model_param_count(m), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    st_model_destroy(m);
    assert_int_equal(st_model_load(&m, "cnn"), ST_OK);
    assert_int_equal(st_model_param_count(m), 320 + 18496 + 1600 * 128 + 128 + 1290);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    st_model_summary(m, f);
    fclose(f);
    assert_non_null(strstr(text, "64x5x5"));
    assert_non_null(strstr(text, "total parameters: 225034"));
    free(text);
    st_model_destroy(m);
    assert_int_equal(st_model_load(&m, "resnet"), ST_OK);
    assert_int_equal(st_model_classes(m), 10);
    st_model_destroy(m);
}

/* A model's train line: its recipe, word for word, and not part of the
 * canonical text (a checkpoint's model is its architecture); what a
 * train line may not say, each with its line. */
static void test_train_line(void **state)
{
    (void)state;
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, "# a recipe\ntrain optimizer adamw lr 2e-3 batch-size 12\ninput 4\nlinear 2\n",
                                    "r.model"), ST_OK);
    assert_string_equal(st_model_recipe(m), "optimizer adamw lr 2e-3 batch-size 12");
    assert_null(strstr(st_model_text(m), "train"));
    st_model_destroy(m);
    assert_int_equal(st_model_parse(&m, "input 4\nlinear 2\n", "r.model"), ST_OK);
    assert_null(st_model_recipe(m));
    st_model_destroy(m);
    assert_int_equal(st_model_load(&m, "gpt-mini"), ST_OK);
    assert_non_null(strstr(st_model_recipe(m), "optimizer adamw lr 1e-3"));
    st_model_destroy(m);
    static const struct {
        const char *text, *error;
    } bad[] = {
        {"train lr\ninput 4\nlinear 2\n", "r.model:1: train: expected KEY VALUE pairs"},
        {"train learning-rate 1\ninput 4\nlinear 2\n", "r.model:1: train: unknown key 'learning-rate'"},
        {"train lr fast\ninput 4\nlinear 2\n", "r.model:1: train: lr 'fast': expected a number"},
        {"train optimizer adam\ninput 4\nlinear 2\n", "r.model:1: train: optimizer 'adam': expected sgd adamw"},
        {"train lr 1\ntrain lr 2\ninput 4\nlinear 2\n", "r.model:2: train: a model has one train line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(st_model_parse(&m, bad[i].text, "r.model"), ST_ERR_FORMAT);
        if (!strstr(st_last_error(), bad[i].error))
            fail_msg("'%s': got '%s', want '%s'", bad[i].text, st_last_error(), bad[i].error);
    }
}

/* PyTorch's names and shapes for every parameter, in flat-buffer order and
 * covering it: nanoGPT's keys for gpt-mini, nn.Sequential's for lenet, batch
 * norm's statistics in the buffers. */
static const st_tensor_ref *find(const st_tensor_ref *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name))
            return &t[i];
    fail_msg("no tensor named %s", name);
    return NULL;
}

static void test_tensor_names(void **state)
{
    (void)state;
    st_model *m = NULL;
    st_tensor_ref *t = NULL;
    int n = 0;
    assert_int_equal(st_model_load(&m, "gpt-mini"), ST_OK);
    assert_int_equal(st_model_tensors(m, &t, &n), ST_OK);
    assert_int_equal(n, 2 + 4 * 12 + 2 + 1);  /* wte, wpe; 12 per block; ln_f; lm_head */
    const st_tensor_ref *c_attn = find(t, n, "transformer.h.2.attn.c_attn.weight"),
                        *c_proj = find(t, n, "transformer.h.3.mlp.c_proj.weight"),
                        *wte = find(t, n, "transformer.wte.weight"), *head = find(t, n, "lm_head.weight");
    assert_int_equal(c_attn->dims[0], 384);
    assert_int_equal(c_attn->dims[1], 128);
    assert_int_equal(c_proj->dims[0], 128);
    assert_int_equal(c_proj->dims[1], 512);
    assert_int_equal(find(t, n, "transformer.wpe.weight")->dims[0], 64);
    assert_int_equal(head->offset, wte->offset);  /* tied */
    find(t, n, "transformer.ln_f.bias");
    size_t covered = 0;  /* in order and covering the parameters, the tied head aside */
    for (int i = 0; i < n - 1; i++) {
        assert_int_equal(t[i].offset, covered);
        covered += t[i].count;
    }
    assert_int_equal(covered, st_model_param_count(m));
    free(t);
    st_model_destroy(m);
    /* gpt2 is nanoGPT's GPT-2 small: per block 12 d^2 + 13 d (ln_1, c_attn,
     * c_proj, ln_2, c_fc, c_proj), then wte, wpe and ln_f; 124,475,904 with
     * vocabulary 50304 (nanoGPT prints 123.69M: it leaves out wpe). */
    assert_int_equal(st_model_load(&m, "gpt2"), ST_OK);
    const size_t d = 768;
    assert_int_equal(st_model_param_count(m), 12 * (12 * d * d + 13 * d) + 50304 * d + 1024 * d + 2 * d);
    assert_int_equal(st_model_param_count(m), 124475904);
    assert_int_equal(st_model_tensors(m, &t, &n), ST_OK);
    assert_int_equal(find(t, n, "transformer.h.11.attn.c_attn.weight")->dims[0], 2304);
    free(t);
    st_model_destroy(m);
    assert_int_equal(st_model_load(&m, "lenet"), ST_OK);
    assert_int_equal(st_model_tensors(m, &t, &n), ST_OK);
    assert_int_equal(n, 10);
    assert_string_equal(t[0].name, "0.weight");
    assert_int_equal(t[0].ndims, 4);
    assert_int_equal(t[0].dims[1], 1);
    assert_int_equal(t[0].dims[2], 5);
    assert_int_equal(find(t, n, "7.weight")->dims[1], 400);
    assert_string_equal(t[n - 1].name, "11.bias");
    free(t);
    st_model_destroy(m);
    assert_int_equal(st_model_parse(&m, "input 3 8 8\nconv 4 k3 nobias\nbatchnorm\nrelu\nlinear 2\n", "bn"), ST_OK);
    assert_int_equal(st_model_tensors(m, &t, &n), ST_OK);
    const st_tensor_ref *var = find(t, n, "1.running_var");
    assert_true(var->buffer && var->offset == 4 && var->count == 4);
    assert_false(find(t, n, "1.weight")->buffer);
    free(t);
    st_model_destroy(m);
}

/* The preset files under models/ are the built-in presets. */
static void test_model_files_match_presets(void **state)
{
    (void)state;
    const char *dir = getenv("MODELS_DIR");
    if (!dir)
        fail_msg("MODELS_DIR is not set (ctest sets it)");
    const char *names[] = {"mlp", "lenet", "cnn", "resnet", "gpt-mini", "gpt", "gpt2"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.model", dir, names[i]);
        st_model *file = NULL, *preset = NULL;
        if (st_model_load(&file, path) != ST_OK)
            fail_msg("%s", st_last_error());
        assert_int_equal(st_model_load(&preset, names[i]), ST_OK);
        assert_string_equal(st_model_text(file), st_model_text(preset));
        if (st_model_recipe(preset) || st_model_recipe(file))
            assert_string_equal(st_model_recipe(file), st_model_recipe(preset));
        st_model_destroy(file);
        st_model_destroy(preset);
    }
}

/* The FLOPs the roofline sets layers against, counted by hand: a
 * multiply-add is two, attention's products over the causal pairs. */
static void test_layer_flops(void **state)
{
    (void)state;
    st_model *m = NULL;
    /* 32 outputs of 26 x 26, each 9 products of a 3x3 one-channel filter */
    assert_int_equal(st_model_parse(&m, "input 1 28 28\nconv 32 k3\nflatten\nlinear 10\n", "flops"), ST_OK);
    assert_true(model_layer_flops(m, 1, false, false) == 2.0 * 9 * 32 * 26 * 26);
    assert_true(model_layer_flops(m, 1, true, false) == 2.0 * 9 * 32 * 26 * 26);  /* weights only */
    assert_true(model_layer_flops(m, 1, true, true) == 2 * 2.0 * 9 * 32 * 26 * 26);
    assert_true(model_layer_flops(m, 2, false, true) == 0);                       /* flatten moves data */
    assert_true(model_layer_flops(m, 3, false, true) == 2.0 * 32 * 26 * 26 * 10);
    st_model_destroy(m);
    /* a GPT block on 8 tokens of 4 features, 2 heads: qkv 4->12, attention,
     * proj 4->4, MLP 4->16->4 at every position; the tied head 4->16 */
    assert_int_equal(st_model_parse(&m, "input tokens 8\nembed 16 4\nblock heads 2\nlayernorm\nhead tied\n", "flops"),
                     ST_OK);
    double forward = 0, attention = 0;
    for (int i = 0; i < m->n; i++) {
        forward += model_layer_flops(m, i, false, true);
        if (m->nodes[i].kind == NODE_ATTENTION) {
            attention = model_layer_flops(m, i, false, true);
            assert_true(model_layer_flops(m, i, true, true) == 2 * attention);
        }
    }
    assert_true(attention == 2.0 * 2 * 4 * (8 * 9 / 2));
    assert_true(forward == 8 * 2.0 * (4 * 12 + 4 * 4 + 4 * 16 + 16 * 4 + 4 * 16) + attention);
    st_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parser_errors),
        cmocka_unit_test(test_parser_shapes_and_text),
        cmocka_unit_test(test_model_files_match_presets),
        cmocka_unit_test(test_train_line),
        cmocka_unit_test(test_tensor_names),
        cmocka_unit_test(test_layer_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
