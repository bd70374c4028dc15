/* Token files (nanoGPT's and llm.c's .bin) end to end: the reader, the
 * same ids trained from a token file and from text to the same bits (and
 * resumed, and on two ranks), and each malformed file refused with its
 * name and what is wrong. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textrun.h"
#include "shmtrain/text.h"

/* `n` uint16 ids as nanoGPT's prepare.py writes them (np.uint16 tofile),
 * or after llm.c's header (magic, version, count, 253 zeros). */
static void write_tokens(const char *name, const uint16_t *ids, size_t n, bool llmc)
{
    const size_t head = llmc ? 1024 : 0;
    uint8_t *buf = calloc(1, head + 2 * n);
    if (llmc) {
        const int32_t h[3] = {20240520, 1, (int32_t)n};
        memcpy(buf, h, sizeof h);
    }
    memcpy(buf + head, ids, 2 * n);
    write_bytes(name, buf, head + 2 * n);
    free(buf);
}

/* markov.txt's letters as ids 0..15 (what --text's alphabet numbers them) */
static uint16_t *markov_ids(size_t *n)
{
    char path[512];
    path_of(path, sizeof path, "markov.txt");
    char *text = slurp_or_empty(path);
    *n = strlen(text);
    uint16_t *ids = malloc(*n * sizeof *ids);
    for (size_t i = 0; i < *n; i++)
        ids[i] = (uint16_t)(text[i] - 'a');
    free(text);
    return ids;
}

static void test_token_file_reader(void **state)
{
    (void)state;
    enum { N = 1000 };
    uint16_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (uint16_t)(i * 977 % 50257);  /* GPT-2's ids need all 16 bits */
    write_tokens("gpt2.bin", ids, N, false);
    write_tokens("gpt2-llmc.bin", ids, N, true);
    write_tokens("gpt2-val.bin", ids + 900, 100, true);
    char a[512], b[512], v[512];
    path_of(a, sizeof a, "gpt2.bin"), path_of(b, sizeof b, "gpt2-llmc.bin"), path_of(v, sizeof v, "gpt2-val.bin");
    for (int form = 0; form < 2; form++) {
        st_text *t;
        assert_int_equal(st_text_load_tokens(&t, form ? b : a, NULL, 50257, true), ST_OK);
        assert_int_equal(st_text_tokens_in(t, ST_TEXT_TRAIN), 900);  /* the last 10% validates */
        assert_int_equal(st_text_tokens_in(t, ST_TEXT_VAL), 100);
        assert_memory_equal(st_text_ids(t, ST_TEXT_TRAIN), ids, 900 * sizeof *ids);
        assert_memory_equal(st_text_ids(t, ST_TEXT_VAL), ids + 900, 100 * sizeof *ids);
        assert_int_equal(st_text_vocab(t), 50257);
        assert_int_equal(st_text_alphabet_len(t), 0);
        assert_true(st_text_is_mapped(t));
        st_text_destroy(t);
    }
    st_text *t;
    assert_int_equal(st_text_load_tokens(&t, a, v, 50257, true), ST_OK);
    assert_int_equal(st_text_tokens_in(t, ST_TEXT_TRAIN), N);
    assert_memory_equal(st_text_ids(t, ST_TEXT_VAL), ids + 900, 100 * sizeof *ids);
    st_text_destroy(t);
    /* the largest id is the vocabulary's last: refused at one less, naming its first place */
    int top = 0, at = 0;
    for (int i = 0; i < N; i++)
        if (ids[i] > top)
            top = ids[i], at = i;
    char want[128];
    snprintf(want, sizeof want, "gpt2.bin: token %d is id %d, beyond the vocabulary of %d", at, top, top);
    assert_int_equal(st_text_load_tokens(&t, a, NULL, top, true), ST_ERR_FORMAT);
    if (!strstr(st_last_error(), want))
        fail_msg("wanted '%s' in '%s'", want, st_last_error());
    assert_int_equal(st_text_load_tokens(&t, a, NULL, top + 1, true), ST_OK);
    st_text_destroy(t);
}

/* The same ids from a token file and from text train to the same bits. */
static void test_token_files_train_as_text(void **state)
{
    (void)state;
    size_t n;
    uint16_t *ids = markov_ids(&n);
    write_tokens("markov.bin", ids, n, false);
    write_tokens("markov-llmc.bin", ids, n, true);
    free(ids);
    char *steps[] = {"--max-steps", "40", NULL};
    st_ckpt text = lm_ckpt(1, "t.ckpt", steps, "--text");
    st_ckpt bin = lm_ckpt(1, "b.ckpt", (char *[]){"--max-steps", "40", "--tokens-bin", "markov.bin", NULL},
                          "--tokens-bin (nanoGPT's)");
    st_ckpt llmc = lm_ckpt(1, "l.ckpt", (char *[]){"--max-steps", "40", "--tokens-bin", "markov-llmc.bin",
                                                     "--vocab", "16", NULL}, "--tokens-bin (llm.c's)");
    assert_int_equal(bin.step, 40);
    assert_memory_equal(bin.params, text.params, text.nparams * sizeof(float));
    assert_memory_equal(llmc.params, text.params, text.nparams * sizeof(float));
    assert_int_equal(bin.nalphabet, 0);  /* ids from elsewhere: no alphabet to decode them */
    st_ckpt_free(&llmc);  /* stopped and resumed: the same bits as straight through */
    llmc = lm_ckpt(1, "r.ckpt", (char *[]){"--max-steps", "15", "--tokens-bin", "markov.bin", NULL}, "15 steps");
    st_ckpt_free(&llmc);
    llmc = lm_ckpt(1, "r.ckpt", (char *[]){"--max-steps", "40", "--tokens-bin", "markov.bin", "--resume", NULL},
                   "resumed to 40");
    assert_memory_equal(llmc.params, bin.params, bin.nparams * sizeof(float));
    /* two ranks map the file and train as one with twice the batch */
    st_ckpt two = lm_ckpt(2, "2.ckpt", (char *[]){"--max-steps", "40", "--tokens-bin", "markov.bin", NULL}, "2 x 8");
    st_ckpt one = lm_ckpt(1, "1.ckpt", (char *[]){"--max-steps", "40", "--tokens-bin", "markov.bin",
                                                    "--batch-size", "16", NULL}, "1 x 16");
    assert_same_training(&two, &one, "token files, 2 x 8 against 1 x 16");
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "b.ckpt");
    struct child_run s = run_argv((char *[]){(char *)tr_shmtrain, "sample", "--checkpoint", ckpt, "--prompt", "ab",
                                             NULL}, 0);
    assert_int_equal(s.code, 1);
    assert_non_null(strstr(s.err, "trained on token files (--tokens-bin) from a tokenizer shmtrain does not have"));
    child_run_free(&s);
    st_ckpt_free(&text), st_ckpt_free(&bin), st_ckpt_free(&llmc), st_ckpt_free(&two), st_ckpt_free(&one);
}

static void test_bad_token_files(void **state)
{
    (void)state;
    uint16_t ids[400];
    for (int i = 0; i < 400; i++)
        ids[i] = (uint16_t)(i % 16);
    write_tokens("ok.bin", ids, 400, false);
    write_bytes("odd.bin", ids, 401);
    ids[123] = 40;
    write_tokens("big.bin", ids, 400, false);
    write_tokens("llmc.bin", ids, 400, true);
    char path[512];
    path_of(path, sizeof path, "llmc.bin");
    FILE *f = fopen(path, "r+b");
    const int32_t wrong_count = 401, wrong_version = 2;
    assert_true(f && fseek(f, 8, SEEK_SET) == 0 && fwrite(&wrong_count, 4, 1, f) == 1 && fclose(f) == 0);
    write_tokens("llmc2.bin", ids, 400, true);
    path_of(path, sizeof path, "llmc2.bin");
    f = fopen(path, "r+b");
    assert_true(f && fseek(f, 4, SEEK_SET) == 0 && fwrite(&wrong_version, 4, 1, f) == 1 && fclose(f) == 0);
    write_bytes("none.bin", "", 0);
    expect_error((char *[]){"--tokens-bin", "missing.bin", NULL}, "--tokens-bin missing.bin: cannot open: No such file");
    expect_error((char *[]){"--tokens-bin", "none.bin", NULL}, "--tokens-bin none.bin: empty");
    expect_error((char *[]){"--tokens-bin", "odd.bin", NULL},
                 "--tokens-bin odd.bin: 401 bytes is odd: not uint16 token ids");
    expect_error((char *[]){"--tokens-bin", "big.bin", NULL},
                 "--tokens-bin big.bin: token 123 is id 40, beyond the vocabulary of 32 (--vocab)");
    expect_error((char *[]){"--tokens-bin", "ok.bin", "--val-bin", "big.bin", NULL},
                 "--val-bin big.bin: token 123 is id 40, beyond the vocabulary of 32");
    expect_error((char *[]){"--tokens-bin", "ok.bin", "--vocab", "8", NULL},
                 "--tokens-bin ok.bin: token 8 is id 8, beyond the vocabulary of 8");
    expect_error((char *[]){"--tokens-bin", "llmc.bin", NULL},
                 "--tokens-bin llmc.bin: its llm.c header says 401 tokens (1826 bytes) but the file has 1824 bytes");
    expect_error((char *[]){"--tokens-bin", "llmc2.bin", NULL}, "--tokens-bin llmc2.bin: llm.c header version 2");
    expect_error((char *[]){"--tokens-bin", "ok.bin", "--vocab", "64", NULL},
                 "--vocab 64: more than model 'tiny.model''s vocabulary of 32");
    expect_error((char *[]){"--tokens-bin", "ok.bin", "--model", "mlp", NULL},
                 "--tokens-bin: model 'mlp' is not a language model");
    expect_error((char *[]){"--tokens-bin", "ok.bin", "--batch-size", "400", NULL},
                 "--tokens-bin ok.bin: 344 window starts are fewer than one global batch (400 windows)");
    struct child_run r = lm_run(0, "bad.ckpt", (char *[]){"--tokens-bin", "ok.bin", "--text", "markov.txt", NULL});
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--tokens-bin and --text: give the language model one of them"));
    child_run_free(&r);
    r = run_argv((char *[]){(char *)tr_shmtrain, "--model", "gpt-mini", "--val-bin", "ok.bin", NULL}, 0);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--val-bin belongs to --tokens-bin FILE"));
    child_run_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_file_reader),
        cmocka_unit_test(test_bad_token_files),
        cmocka_unit_test(test_token_files_train_as_text),
    };
    return TEXTRUN_GROUP("test_token_files", tests, argc, argv);
}
