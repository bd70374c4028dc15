/* Files a user hands us, written by an attacker or an unlucky tool: model
 * texts and checkpoints that once overran memory, each refused with one line
 * naming the file and what is wrong (issue 26's reproducers).  Under the
 * ASan build the old code's faults are reports; in a release build they were
 * silent successes, which the statuses asserted here rule out. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "shmtrain/ckpt.h"
#include "shmtrain/nn.h"
#include "shmtrain/train.h"

static char *text_of(const char *first, ...)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    va_list ap;
    va_start(ap, first);
    for (const char *line = first; line; line = va_arg(ap, const char *))
        fprintf(f, "%s\n", line);
    va_end(ap);
    fclose(f);
    return text;
}

static void expect_refused(const char *text, const char *fragment)
{
    st_model *m = (st_model *)0x1;
    const st_status st = st_model_parse(&m, text, "hostile.model");
    if (st != ST_ERR_FORMAT || m != NULL || !strstr(st_last_error(), fragment))
        fail_msg("status %d, message '%s', expected a refusal with '%s'", (int)st, st_last_error(), fragment);
}

/* The implicit flatten before a linear layer, appended just as the node
 * array grows from 16 to 32: the flatten read its source through a pointer
 * into the array it had just moved (ASan: heap-use-after-free). */
static void test_flatten_as_the_node_array_grows(void **state)
{
    (void)state;
    for (int relus = 13; relus <= 17; relus++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        fprintf(f, "input 2 5 7\n");
        for (int i = 0; i < relus; i++)
            fprintf(f, "relu\n");
        fprintf(f, "linear 10\n");
        fclose(f);
        st_model *m = NULL;
        assert_int_equal(st_model_parse(&m, text, "relus.model"), ST_OK);
        assert_int_equal(st_model_param_count(m), 70 * 10 + 10);
        st_model_destroy(m);
        free(text);
    }
}

/* Shapes whose sizes wrapped in int (UBSan: signed overflow), each refused
 * at the line that asks for it. */
static void test_sizes_past_a_tensor_are_refused_at_their_line(void **state)
{
    (void)state;
    expect_refused("input 65535 65535 65535\nlinear 10\n", "hostile.model:1: input: 65535 x 65535 x 65535 elements");
    expect_refused("input 1 40000 40000\nconv 1000 k1\nlinear 10\n", "hostile.model:2: conv: 1000 x 40000 x 40000");
    expect_refused("input 3 32 32\nconv 60000 k3\nconv 60000 k3\n", "hostile.model:3: conv: the weights: 60000 x 540000");
    expect_refused("input 1 1000 1000\nlinear 3000\n", "hostile.model:2: linear: the weights: 3000 x 1000000");
    expect_refused("input 1000000 1 1\nconv 1 k1000000 p1000000\n", "hostile.model:2: conv: a filter");
    expect_refused("input tokens 1000000\nembed 50 4000\n", "hostile.model:2: embed: the position table");
    expect_refused("input tokens 10000\nembed 50 48\nlinear 144\nattention heads 48\n",
                   "hostile.model:4: attention: the scores: 48 x 10000 x 10000");
    /* Each tensor within bounds, the model past them: 1e8 parameters a line. */
    char *many = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&many, &len);
    fprintf(f, "input 10000 1 1\n");
    for (int i = 0; i < 300; i++)
        fprintf(f, "linear 10000 nobias\n");
    fclose(f);
    expect_refused(many, "hostile.model:23: linear: the model would have 2100000000 + 100000000 parameters");
    free(many);
    /* 21 of them leave 47,483,647: 47,480,000 weights fit, their 4,748 biases do not. */
    f = open_memstream(&many, &len);
    fprintf(f, "input 10000 1 1\n");
    for (int i = 0; i < 21; i++)
        fprintf(f, "linear 10000 nobias\n");
    fprintf(f, "linear 4748\n");
    fclose(f);
    expect_refused(many, "hostile.model:23: linear: the model would have 2100000000 + 47484748 parameters");
    free(many);
}

/* A batch whose activation would pass the kernels' int indices. */
static void test_batch_past_a_tensor_is_refused(void **state)
{
    (void)state;
    st_model *m = NULL;
    assert_int_equal(st_model_parse(&m, "input 8 512 512\nconv 8 k1\n", "big.model"), ST_OK);
    st_net *net = (st_net *)0x1;
    st_net_config nc = {.batch = 1024, .backend = ST_BACKEND_REFERENCE};
    assert_int_equal(st_net_create(&net, m, &nc), ST_ERR_INVALID);
    assert_null(net);
    assert_non_null(strstr(st_last_error(), "batch size 1024: an activation of 2097152 elements"));
    st_model_destroy(m);
}

/* GPT-2 large has 36 blocks; names were a fixed table of 64 (32 blocks). */
static void test_deep_gpts_parse(void **state)
{
    (void)state;
    for (int blocks = 36; blocks <= 100; blocks += 64) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        fprintf(f, "input tokens 16\nembed 32 16\n");
        for (int i = 0; i < blocks; i++)
            fprintf(f, "block heads 2\n");
        fprintf(f, "layernorm\nhead tied\n");
        fclose(f);
        st_model *m = NULL;
        assert_int_equal(st_model_parse(&m, text, "deep.model"), ST_OK);
        const size_t c = 16, per_block = 12 * c * c + 13 * c;  /* nanoGPT's Block, biases on */
        assert_int_equal(st_model_param_count(m), 32 * c + 16 * c + (size_t)blocks * per_block + 2 * c);
        st_model_destroy(m);
        free(text);
    }
    expect_refused("input 1 4 4\nsave a_name_of_exactly_32_characters_\n", "at most 31 characters");
}

/* ---------------------------------------------------------- checkpoints -- */

#define GPT "input tokens 8", "embed 16 8", "block heads 2", "layernorm", "head tied"

static char dir[] = "/tmp/st-hostile-XXXXXX";

static char *path_in_dir(const char *name)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* A well-formed checkpoint (its CRC right) of `model` with `nparams`
 * parameters and the given alphabet. */
static const char *write_ckpt(const char *name, const char *model, size_t nparams, const char *alphabet)
{
    float *params = calloc(nparams + 1, sizeof *params);
    for (size_t i = 0; i < nparams; i++)  /* no two logits alike, so that no token ties another */
        params[i] = 0.05f * sinf(1.7f * (float)i);
    st_ckpt c = {.model_text = (char *)model, .params = params, .nparams = nparams,
                 .alphabet = (uint8_t *)alphabet, .nalphabet = alphabet ? (uint32_t)strlen(alphabet) : 0};
    const char *path = path_in_dir(name);
    assert_int_equal(st_ckpt_write(path, &c), ST_OK);
    free(params);
    return path;
}

static st_status sample_from(const char *path)
{
    st_sample_options o = {.checkpoint = path, .prompt = "ab", .tokens = 4, .top_k = 0, .temperature = 1, .seed = 1};
    FILE *out = fopen("/dev/null", "w");
    const st_status st = st_sample(&o, out);
    fclose(out);
    return st;
}

static void expect_sample_refused(const char *path, const char *fragment)
{
    const st_status st = sample_from(path);
    if (st == ST_OK || !strstr(st_last_error(), path) || !strstr(st_last_error(), fragment))
        fail_msg("sample from %s: status %d, message '%s', expected '%s'", path, (int)st, st_last_error(), fragment);
}

static void test_sample_checks_every_section_against_the_model(void **state)
{
    (void)state;
    st_model *m = NULL;
    char *gpt = text_of(GPT, NULL);
    assert_int_equal(st_model_parse(&m, gpt, "gpt"), ST_OK);
    const char *model = st_model_text(m);
    const size_t P = st_model_param_count(m);
    assert_int_equal(sample_from(write_ckpt("good.ckpt", model, P, "abcdefgh")), ST_OK);  /* the control */
    /* Longer: sample.c copied nparams floats into the net's P (heap overflow). */
    expect_sample_refused(write_ckpt("long.ckpt", model, P + 4096, "abcdefgh"), "parameters, the model has");
    /* Shorter: it sampled from parameters partly never written. */
    expect_sample_refused(write_ckpt("short.ckpt", model, P - 1, "abcdefgh"), "parameters, the model has");
    /* An alphabet past the embedding's 16 ids: pick read and wrote past a row. */
    expect_sample_refused(write_ckpt("wide.ckpt", model, P, "abcdefghijklmnopqrstuvwxyz"),
                          "its vocabulary has 26 symbols, the model's embedding 16");
    expect_sample_refused(write_ckpt("twice.ckpt", model, P, "abca"), "names a byte twice");
    expect_sample_refused(write_ckpt("none.ckpt", model, P, NULL), "trained on token files (--tokens-bin)");
    /* An image model's checkpoint with an alphabet section sampled text. */
    st_model *image = NULL;
    assert_int_equal(st_model_load(&image, "mlp"), ST_OK);
    expect_sample_refused(write_ckpt("image.ckpt", st_model_text(image), st_model_param_count(image), "ab"),
                          "reads images, not tokens");
    st_model_destroy(image);
    st_model_destroy(m);
    free(gpt);
}

/* A checkpoint written by hand: sections as given, the right CRC. */
static const char *write_sections(const char *name, const void *payload, uint64_t len)
{
    const char *path = path_in_dir(name);
    FILE *f = fopen(path, "wb");
    const uint32_t version = 1, zero = 0, crc = (uint32_t)crc32(crc32(0, NULL, 0), payload, (uInt)len);
    fwrite("SHMTCKPT", 1, 8, f);
    fwrite(&version, 4, 1, f);
    fwrite(&zero, 4, 1, f);
    fwrite(&len, 8, 1, f);
    fwrite(payload, 1, len, f);
    fwrite(&crc, 4, 1, f);
    fwrite("END!", 1, 4, f);
    fclose(f);
    return path;
}

static size_t put_section(uint8_t *at, const char tag[4], const void *p, uint64_t n)
{
    memcpy(at, tag, 4);
    memcpy(at + 4, &n, 8);
    memcpy(at + 12, p, n);
    return 12 + n;
}

static void test_reader_refuses_repeated_and_odd_sections(void **state)
{
    (void)state;
    uint8_t payload[1024], state_section[64] = {0};
    const float params[4] = {1, 2, 3, 4};
    size_t n = 0;
    n += put_section(payload + n, "MODL", "input 1 1 1\nlinear 1\n", 21);
    n += put_section(payload + n, "PARM", params, sizeof params);
    n += put_section(payload + n, "PARM", params, sizeof params);  /* the first copy leaked */
    n += put_section(payload + n, "BUFS", params, 0);
    n += put_section(payload + n, "OPTS", params, 0);
    n += put_section(payload + n, "STAT", state_section, 64);
    st_ckpt c;
    assert_int_equal(st_ckpt_read(write_sections("twice.ckpt", payload, n), &c), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "the parameters section appears twice"));
    n = 0;
    n += put_section(payload + n, "MODL", "input 1 1 1\nlinear 1\n", 21);
    n += put_section(payload + n, "PARM", params, 8);
    n += put_section(payload + n, "BUFS", params, 0);
    n += put_section(payload + n, "OPTS", params, 0);
    n += put_section(payload + n, "STAT", state_section, 63);  /* was skipped, then "missing" */
    assert_int_equal(st_ckpt_read(write_sections("state.ckpt", payload, n), &c), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "training state section of 63 bytes"));
    /* A last section claiming one byte more than remains. */
    n -= 12 + 63;
    const uint64_t one_more = 65;
    n += put_section(payload + n, "STAT", state_section, 64);
    memcpy(payload + n - 64 - 8, &one_more, 8);
    assert_int_equal(st_ckpt_read(write_sections("past.ckpt", payload, n), &c), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "a section runs past the end"));
}

/* Top-k keeps the k largest: with k = 2 at a high temperature the second
 * token is drawn about half the time, so the text is not the greedy one
 * (top-k 1 is greedy: the same text). */
static void test_top_k_keeps_k(void **state)
{
    (void)state;
    st_model *m = NULL;
    char *gpt = text_of(GPT, NULL);
    assert_int_equal(st_model_parse(&m, gpt, "gpt"), ST_OK);
    const char *path = write_ckpt("topk.ckpt", st_model_text(m), st_model_param_count(m), "abcdefgh");
    char texts[3][256];
    const struct { int top_k; double temperature; } runs[3] = {{0, 0}, {1, 100}, {2, 100}};
    for (int i = 0; i < 3; i++) {
        st_sample_options o = {.checkpoint = path, .prompt = "ab", .tokens = 60, .top_k = runs[i].top_k,
                               .temperature = runs[i].temperature, .seed = 3};
        FILE *out = fmemopen(texts[i], sizeof texts[i], "w");
        assert_int_equal(st_sample(&o, out), ST_OK);
        fclose(out);
    }
    assert_string_equal(texts[1], texts[0]);
    assert_string_not_equal(texts[2], texts[0]);
    st_model_destroy(m);
    free(gpt);
}

/* The vocabulary's bound exactly: 16 symbols fit an embedding of 16, 17 do not. */
static void test_alphabet_at_the_vocabulary(void **state)
{
    (void)state;
    st_model *m = NULL;
    char *gpt = text_of(GPT, NULL);
    assert_int_equal(st_model_parse(&m, gpt, "gpt"), ST_OK);
    assert_int_equal(sample_from(write_ckpt("sixteen.ckpt", st_model_text(m), st_model_param_count(m),
                                            "abcdefghijklmnop")), ST_OK);
    expect_sample_refused(write_ckpt("seventeen.ckpt", st_model_text(m), st_model_param_count(m),
                                     "abcdefghijklmnopq"), "its vocabulary has 17 symbols, the model's embedding 16");
    st_model_destroy(m);
    free(gpt);
}

/* A writer killed mid-write leaves PATH.tmp.PID, which the next write
 * removes; another live process's (a writer at work) stays. */
static void test_live_writers_temporary_is_kept(void **state)
{
    (void)state;
    const pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    const pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    int status;
    waitpid(dead, &status, 0);
    char base[512], live_tmp[600], dead_tmp[600];
    snprintf(base, sizeof base, "%s", path_in_dir("kept.ckpt"));
    snprintf(live_tmp, sizeof live_tmp, "%s.tmp.%d", base, (int)live);
    snprintf(dead_tmp, sizeof dead_tmp, "%s.tmp.%d", base, (int)dead);
    fclose(fopen(live_tmp, "w"));
    fclose(fopen(dead_tmp, "w"));
    float params[2] = {1, 2};
    st_ckpt c = {.model_text = "input 1 1 1\nlinear 1\n", .params = params, .nparams = 2};
    assert_int_equal(st_ckpt_write(base, &c), ST_OK);
    assert_int_equal(access(live_tmp, F_OK), 0);
    assert_int_not_equal(access(dead_tmp, F_OK), 0);
    kill(live, SIGKILL);
    waitpid(live, &status, 0);
    unlink(live_tmp);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flatten_as_the_node_array_grows),
        cmocka_unit_test(test_sizes_past_a_tensor_are_refused_at_their_line),
        cmocka_unit_test(test_batch_past_a_tensor_is_refused),
        cmocka_unit_test(test_deep_gpts_parse),
        cmocka_unit_test(test_sample_checks_every_section_against_the_model),
        cmocka_unit_test(test_reader_refuses_repeated_and_odd_sections),
        cmocka_unit_test(test_alphabet_at_the_vocabulary),
        cmocka_unit_test(test_top_k_keeps_k),
        cmocka_unit_test(test_live_writers_temporary_is_kept),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
