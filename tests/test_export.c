/* The model going out: an export read by the safetensors layout alone (its
 * header against the spec, a forward from it against shmtrain's), and
 * export -> --init-from bit for bit for every preset. */
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

#include "trainrun.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/nn.h"

static char *run_ok(char *const argv[])
{
    struct child_run r = run_argv(argv, 0);
    if (r.code != 0)
        fail_msg("%s %s: exit %d: %s", argv[0], argv[1], r.code, r.err);
    char *out = strdup(r.out);
    child_run_free(&r);
    return out;
}

static void export_ckpt(const char *ckpt, const char *out)
{
    char c[512], o[512];
    path_of(c, sizeof c, ckpt), path_of(o, sizeof o, out);
    free(run_ok((char *[]){(char *)tr_shmtrain, "export", "--checkpoint", c, "--out", o, NULL}));
}

struct tensor {
    char name[64];
    long shape[4];
    int ndims;
    size_t begin, end;
};

/* The header by the format's definition alone: {"NAME":{"dtype":"F32",
 * "shape":[...],"data_offsets":[BEGIN,END]},...,"__metadata__":{...}}. */
static int parse_header(const char *h, struct tensor *t, int cap)
{
    int n = 0;
    for (const char *at = strstr(h, "\"dtype\":"); at; at = strstr(at + 1, "\"dtype\":")) {
        assert_true(n < cap);
        const char *open = at - 1;  /* the '{' after "NAME": */
        assert_int_equal(*open, '{');
        assert_memory_equal(open - 2, "\":", 2);
        const char *q = open - 2, *start = q;
        while (start > h && start[-1] != '"')
            start--;
        snprintf(t[n].name, sizeof t[n].name, "%.*s", (int)(q - start), start);
        assert_memory_equal(at, "\"dtype\":\"F32\"", 13);  /* every tensor: 4-byte floats */
        const char *sh = strstr(at, "\"shape\":[") + 9;
        t[n].ndims = 0;
        while (*sh != ']') {
            t[n].shape[t[n].ndims++] = strtol(sh, (char **)&sh, 10);
            sh += *sh == ',';
        }
        const char *off = strstr(at, "\"data_offsets\":[") + 16;
        char *end;
        t[n].begin = strtoull(off, &end, 10);
        t[n].end = strtoull(end + 1, NULL, 10);
        n++;
    }
    return n;
}

/* mlp's export: header per spec (8-aligned length, offsets from 0, sorted,
 * contiguous, no overlap, each END - BEGIN = 4 x the shape's product, the
 * last END the data's length); then its forward computed here from the
 * file (the 784-256-128-10 perceptron, in double) against shmtrain's
 * logits from the same checkpoint.  Tolerance: shmtrain sums each of the
 * 784-, 256- and 128-term dot products in fp32 in its own order; such
 * rounding errors grow as sqrt(n) eps sum|terms| (the worst case, n eps
 * sum|terms|, is 30x that), about 7e-5 for the first layer here (|w| ~
 * 0.036, |x| ~ 1.5), so 2e-4; measured 4e-7.  A weight transposed or one
 * element off moves the logits by 1e-2 and more. */
static void test_export_is_safetensors(void **state)
{
    (void)state;
    struct data_files f = synthetic_files();
    free(run_ok((char *[]){(char *)tr_shmtrain, "--model", "mlp", "--train-images", f.tri, "--train-labels", f.trl,
                           "--test-images", f.tei, "--test-labels", f.tel, "--max-steps", "20", "--checkpoint",
                           "mlp.ckpt", "--quiet", "--metrics", "m.jsonl", NULL}));
    export_ckpt("mlp.ckpt", "mlp.safetensors");
    char path[512];
    path_of(path, sizeof path, "mlp.safetensors");
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    const size_t file = (size_t)ftell(fp);
    rewind(fp);
    uint8_t *blob = malloc(file);
    assert_int_equal(fread(blob, 1, file, fp), file);
    fclose(fp);
    uint64_t hlen;
    memcpy(&hlen, blob, 8);
    assert_true(hlen % 8 == 0 && 8 + hlen <= file);
    char *header = strndup((char *)blob + 8, hlen);
    assert_int_equal(header[0], '{');
    struct tensor t[16];
    const int n = parse_header(header, t, 16);
    assert_int_equal(n, 6);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t count = 1;
        for (int d = 0; d < t[i].ndims; d++)
            count *= (size_t)t[i].shape[d];
        assert_int_equal(t[i].begin, at);  /* sorted, contiguous, no overlap */
        assert_int_equal(t[i].end - t[i].begin, 4 * count);
        at = t[i].end;
    }
    assert_int_equal(8 + hlen + at, file);
    const float *data = (const float *)(blob + 8 + hlen);
    const char *names[6] = {"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"};
    const int width[4] = {784, 256, 128, 10};
    const float *layer[6];
    for (int i = 0; i < 6; i++) {
        int k = 0;
        while (k < n && strcmp(t[k].name, names[i]))
            k++;
        if (k == n)
            fail_msg("no tensor %s in %s", names[i], header);
        layer[i] = data + t[k].begin / 4;
        assert_int_equal(t[k].shape[0], width[i / 2 + 1]);  /* PyTorch's out x in */
        if (i % 2 == 0)
            assert_int_equal(t[k].shape[1], width[i / 2]);
    }
    enum { B = 8 };
    float *x = malloc(B * 784 * sizeof *x), logits[B * 10];
    uint64_t z = 3;
    for (int i = 0; i < B * 784; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((z >> 40) % 6000) / 1000.0f - 3.0f;
    }
    st_model *m = NULL;
    st_net *net = NULL;
    st_ckpt c = read_ckpt("mlp.ckpt");
    const st_net_config nc = {.batch = B};
    assert_int_equal(st_model_load(&m, "mlp"), ST_OK);
    assert_int_equal(st_net_create(&net, m, &nc), ST_OK);
    size_t np;
    memcpy(st_net_params(net, &np), c.params, c.nparams * sizeof(float));
    assert_int_equal(np, c.nparams);
    st_net_set_training(net, false);
    assert_int_equal(st_net_forward(net, x), ST_OK);
    assert_int_equal(st_net_output(net, logits), ST_OK);
    double worst = 0;
    for (int b = 0; b < B; b++) {
        double act[784], next[256];
        for (int i = 0; i < 784; i++)
            act[i] = x[b * 784 + i];
        for (int l = 0; l < 3; l++) {
            const float *w = layer[2 * l], *bias = layer[2 * l + 1];
            for (int o = 0; o < width[l + 1]; o++) {
                double s = bias[o];
                for (int i = 0; i < width[l]; i++)
                    s += (double)w[(size_t)o * width[l] + i] * act[i];
                next[o] = l < 2 && s < 0 ? 0 : s;  /* ReLU after the first two */
            }
            memcpy(act, next, width[l + 1] * sizeof *act);
        }
        for (int o = 0; o < 10; o++) {
            const double d = fabs(act[o] - logits[b * 10 + o]);
            worst = d > worst ? d : worst;
        }
    }
    print_message("    mlp's logits from the file alone: largest difference %.3g\n", worst);
    if (!(worst < 2e-4))
        fail_msg("the exported mlp's logits differ from shmtrain's by %.3g", worst);
    st_net_destroy(net);
    st_model_destroy(m);
    st_ckpt_free(&c);
    free(x), free(header), free(blob);
}

/* Export, then --init-from at lr 0: the same parameters bit for bit, for
 * every preset (each on data of its input: grey 28 x 28, RGB 32 x 32 as
 * arrays, text). */
static void test_every_preset_round_trips(void **state)
{
    (void)state;
    struct data_files f = synthetic_files();
    enum { NRGB = 64 };
    uint8_t *rgb = malloc(NRGB * 3 * 32 * 32);
    int64_t lab[NRGB];
    for (int i = 0; i < NRGB * 3 * 32 * 32; i++)
        rgb[i] = (uint8_t)(i * 2654435761u >> 24);
    for (int i = 0; i < NRGB; i++)
        lab[i] = i % 10;
    write_npy("rgb.npy", "|u1", "(64, 3, 32, 32)", rgb, NRGB * 3 * 32 * 32, false);
    write_npy("rgb-labels.npy", "<i8", "(64,)", lab, sizeof lab, false);
    free(rgb);
    char text[4000];
    for (int i = 0; i < (int)sizeof text; i++)
        text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    write_bytes("text.txt", text, sizeof text);
    char rgb_path[512], lab_path[512], text_path[512];
    path_of(rgb_path, sizeof rgb_path, "rgb.npy"), path_of(lab_path, sizeof lab_path, "rgb-labels.npy");
    path_of(text_path, sizeof text_path, "text.txt");
    char *grey[] = {"--train-images", f.tri, "--train-labels", f.trl, "--test-images", f.tei, "--test-labels", f.tel, NULL};
    char *colour[] = {"--npy-images", rgb_path, "--npy-labels", lab_path, "--val-fraction", "0.25", NULL};
    char *words[] = {"--text", text_path, "--eval-windows", "2", NULL};
    const struct { const char *model; char **data; } presets[] = {
        {"mlp", grey}, {"lenet", grey}, {"cnn", grey}, {"resnet", colour}, {"gpt-mini", words}};
    for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
        for (int pass = 0; pass < 2; pass++) {
            char *argv[32];
            int k = 0;
            const char *base[] = {tr_shmtrain, "--model", presets[p].model, "--batch-size", "8", "--quiet",
                                  "--metrics", "rt.jsonl", "--overwrite", "--checkpoint", pass ? "rt2.ckpt" : "rt.ckpt"};
            for (size_t i = 0; i < sizeof base / sizeof *base; i++)
                argv[k++] = (char *)base[i];
            for (int i = 0; presets[p].data[i]; i++)
                argv[k++] = presets[p].data[i];
            char out[512];
            path_of(out, sizeof out, "rt.safetensors");
            const char *tail[] = {"--max-steps", pass ? "1" : "3", "--lr", pass ? "0" : "0.01", "--init-from", out};
            for (size_t i = 0; i < (pass ? 6u : 4u); i++)
                argv[k++] = (char *)tail[i];
            argv[k] = NULL;
            free(run_ok(argv));
            if (!pass)
                export_ckpt("rt.ckpt", "rt.safetensors");
        }
        st_ckpt a = read_ckpt("rt.ckpt"), b = read_ckpt("rt2.ckpt");
        assert_int_equal(a.nparams, b.nparams);
        if (memcmp(a.params, b.params, a.nparams * sizeof(float)))
            fail_msg("%s: export -> --init-from changed the parameters", presets[p].model);
        st_ckpt_free(&a), st_ckpt_free(&b);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_is_safetensors),
        cmocka_unit_test(test_every_preset_round_trips),
    };
    return TRAINRUN_GROUP("test_export", tests, argc, argv);
}
