/* Language models end to end: the text reader's errors, learning a text
 * whose structure is known, N x b against 1 x Nb, determinism, resume, the
 * checkpoint's vocabulary, sampling.  Token files (nanoGPT's and llm.c's
 * .bin): test_token_files.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forkranks.h"
#include "textrun.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/data.h"
#include "shmtrain/text.h"

static double final_loss(const struct child_run *r)
{
    const char *at = strstr(r->out, "final validation loss ");
    if (!at)
        fail_msg("no final validation loss in:\n%s\n%s", r->out, r->err);
    return atof(at + strlen("final validation loss "));
}

/* ------------------------------------------------------------- tests -- */

static void test_learns_below_the_unigram_entropy(void **state)
{
    (void)state;
    struct child_run r = lm_run(0, "learn.ckpt", (char *[]){"--max-steps", "300", NULL});
    if (r.code != 0)
        fail_msg("training failed: %s", r.err);
    const double loss = final_loss(&r);
    /* ln 16 = 2.77 with no context, ln 2 = 0.69 at best */
    if (!(loss < 1.0))
        fail_msg("validation loss %.3f after 300 steps: the model did not learn the successor rule", loss);
    assert_non_null(strstr(r.out, "tokens/s"));
    assert_non_null(strstr(r.out, "bits per character"));
    child_run_free(&r);

    /* Greedy samples follow the rule: every generated transition is legal. */
    char ckpt[512];
    path_of(ckpt, sizeof ckpt, "learn.ckpt");
    struct child_run s = run_argv((char *[]){(char *)tr_shmtrain, "sample", "--checkpoint", ckpt, "--prompt", "abc",
                                       "--tokens", "100", "--temperature", "0", NULL}, 0);
    if (s.code != 0)
        fail_msg("sample failed: %s", s.err);
    assert_int_equal(strlen(s.out), 3 + 100 + 1);
    int legal = 0;
    for (int i = 3; i < 103; i++)
        legal += s.out[i] == markov_successor(s.out[i - 1], 0) || s.out[i] == markov_successor(s.out[i - 1], 1);
    assert_int_equal(legal, 100);
    child_run_free(&s);

    /* Sampling at a temperature: the seed decides, and decides alike twice. */
    char *argv[] = {(char *)tr_shmtrain, "sample", "--checkpoint", ckpt, "--prompt", "ab", "--tokens", "60", "--seed",
                    "5", NULL};
    struct child_run a = run_argv(argv, 0), b = run_argv(argv, 0);
    argv[9] = "6";
    struct child_run c = run_argv(argv, 0);
    assert_int_equal(a.code, 0);
    assert_string_equal(a.out, b.out);
    assert_string_not_equal(a.out, c.out);
    child_run_free(&a), child_run_free(&b), child_run_free(&c);

    struct child_run bad = run_argv((char *[]){(char *)tr_shmtrain, "sample", "--checkpoint", ckpt, "--prompt", "aZ", NULL},
                                    0);
    assert_int_equal(bad.code, 1);
    assert_non_null(strstr(bad.err, "--prompt: byte 0x5a ('Z') at offset 1 is not in the checkpoint's vocabulary of 16"));
    child_run_free(&bad);
}

/* Whether the last run's metrics.jsonl holds `needle`. */
static bool metrics_say(const char *needle)
{
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    char *text = slurp_or_empty(path);
    bool found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

static void test_two_ranks_equal_one_with_double_batch(void **state)
{
    (void)state;
    st_ckpt a = lm_ckpt(2, "a.ckpt", (char *[]){"--max-steps", "50", "--check-replicas", "10", NULL}, "2 x 8");
    st_ckpt b = lm_ckpt(1, "b.ckpt", (char *[]){"--max-steps", "50", "--batch-size", "16", NULL}, "1 x 16");
    assert_int_equal(a.step, 50);
    assert_same_training(&a, &b, "2 x 8 against 1 x 16");
    st_ckpt_free(&a), st_ckpt_free(&b);
}

/* --grad-accum N: N micro-batches per step, their mean gradient exchanged
 * once, trains like N times the batch: 1 x 8 x 2, 1 x 4 x 4 and 2 x 4 x 2
 * against 1 x 16 (the same 16 windows per step, summed in another order); with
 * buckets going during the last micro-batch's backward, 2 x 4 x 2 to the
 * bit as without (two ranks sum each element in the same order either
 * way, test_train's bucket test). */
static void test_gradient_accumulation(void **state)
{
    (void)state;
    st_ckpt whole = lm_ckpt(1, "acc16.ckpt", (char *[]){"--max-steps", "50", "--batch-size", "16", NULL}, "1 x 16");
    st_ckpt one = lm_ckpt(1, "acc1.ckpt", (char *[]){"--max-steps", "50", "--grad-accum", "2", NULL}, "1 x 8 x 2");
    st_ckpt two = lm_ckpt(2, "acc2.ckpt",
                          (char *[]){"--max-steps", "50", "--batch-size", "4", "--grad-accum", "2", NULL}, "2 x 4 x 2");
    assert_true(metrics_say("\"grad_accum\":2,") || metrics_say("\"grad_accum\":2}"));
    st_ckpt buckets = lm_ckpt(2, "acc3.ckpt",
                              (char *[]){"--max-steps", "50", "--batch-size", "4", "--grad-accum", "2",
                                         "--bucket-mb", "0.01", "--check-replicas", "10", NULL},
                              "2 x 4 x 2 with buckets");
    st_ckpt four = lm_ckpt(1, "acc4.ckpt", (char *[]){"--max-steps", "50", "--batch-size", "4", "--grad-accum", "4", NULL},
                           "1 x 4 x 4");
    assert_same_training(&one, &whole, "1 x 8 x 2 against 1 x 16");
    assert_same_training(&four, &whole, "1 x 4 x 4 against 1 x 16");
    assert_same_training(&two, &whole, "2 x 4 x 2 against 1 x 16");
    assert_memory_equal(buckets.params, two.params, two.nparams * sizeof(float));
    /* and not by accident: one micro-batch of 8 is another training */
    st_ckpt half = lm_ckpt(1, "acc8.ckpt", (char *[]){"--max-steps", "50", NULL}, "1 x 8");
    double scale;
    assert_true(ckpt_max_abs_diff(&half, &whole, &scale) > 1e-3);
    assert_false(metrics_say("grad_accum"));  /* one micro-batch: the record says nothing */

    /* stopped and resumed, it continues where it was: the same bits as straight through */
    st_ckpt_free(&half);
    half = lm_ckpt(1, "acc-r.ckpt", (char *[]){"--max-steps", "20", "--grad-accum", "2", NULL}, "1 x 8 x 2, 20 steps");
    st_ckpt_free(&half);
    half = lm_ckpt(1, "acc-r.ckpt", (char *[]){"--max-steps", "50", "--grad-accum", "2", "--resume", NULL},
                   "1 x 8 x 2, resumed");
    assert_int_equal(half.step, 50);
    assert_memory_equal(half.params, one.params, one.nparams * sizeof(float));
    struct child_run bad = lm_run(0, "bad.ckpt", (char *[]){"--grad-accum", "0", NULL});  /* no launcher: its own exit status */
    assert_int_equal(bad.code, 2);
    assert_non_null(strstr(bad.err, "--grad-accum"));
    child_run_free(&bad);
    st_ckpt_free(&whole), st_ckpt_free(&one), st_ckpt_free(&two), st_ckpt_free(&buckets), st_ckpt_free(&half);
    st_ckpt_free(&four);
}

static void test_deterministic_and_resumable(void **state)
{
    (void)state;
    char *straight[] = {"--max-steps", "60", "--seed", "4", NULL};
    struct child_run r1 = lm_run(2, "d1.ckpt", straight), r2 = lm_run(2, "d2.ckpt", straight);
    assert_int_equal(r1.code, 0);
    assert_int_equal(r2.code, 0);
    st_ckpt a = read_ckpt("d1.ckpt"), b = read_ckpt("d2.ckpt");
    assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
    assert_memory_equal(a.optim_state, b.optim_state, a.noptim * sizeof(float));
    assert_int_equal(a.nalphabet, 16);
    assert_memory_equal(a.alphabet, "abcdefghijklmnop", 16);

    struct child_run h1 = lm_run(2, "h.ckpt", (char *[]){"--max-steps", "25", "--seed", "4", NULL});
    struct child_run h2 = lm_run(2, "h.ckpt", (char *[]){"--max-steps", "60", "--seed", "4", "--resume", NULL});
    if (h1.code != 0 || h2.code != 0)
        fail_msg("stop and resume failed: %s%s", h1.err, h2.err);
    st_ckpt c = read_ckpt("h.ckpt");
    assert_int_equal(c.step, 60);
    assert_memory_equal(c.params, a.params, a.nparams * sizeof(float));
    st_ckpt_free(&c);

    /* Another alphabet: the checkpoint's ids would mean other characters. */
    make_markov("upper.txt", 20000, 9, 'a');
    char path[512];
    path_of(path, sizeof path, "upper.txt");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sed -i 's/a/A/g' %s", path);
    assert_int_equal(system(cmd), 0);
    struct child_run v = lm_run(1, "d1.ckpt", (char *[]){"--text", "upper.txt", "--resume", "--seed", "4", NULL});
    assert_int_equal(v.code, 1);
    assert_non_null(strstr(v.err, "its alphabet (16 symbols) differs from that of upper.txt (16)"));
    st_ckpt after = read_ckpt("d1.ckpt");  /* and the refused checkpoint is intact */
    assert_memory_equal(after.params, a.params, a.nparams * sizeof(float));
    st_ckpt_free(&after);
    st_ckpt_free(&a), st_ckpt_free(&b);
    child_run_free(&r1), child_run_free(&r2), child_run_free(&h1), child_run_free(&h2), child_run_free(&v);
}

static void test_bad_inputs_name_their_file(void **state)
{
    (void)state;
    write_bytes("empty.txt", "", 0);
    write_bytes("short.txt", "abcdefghij", 10);
    char wide[64];
    for (int i = 0; i < 64; i++)
        wide[i] = (char)(' ' + i % 40);  /* 40 distinct characters, the model has 32 */
    write_bytes("wide.txt", wide, 64);
    write_bytes("val.txt", "abcdefghijklmnopqrstuvwxyz", 26);
    char d[512];
    path_of(d, sizeof d, "nodir");
    mkdir(d, 0755);
    write_bytes("nodir/index.dat", "\0\1\2", 3);
    expect_error((char *[]){"--text", "missing.txt", NULL}, "--text missing.txt: No such file or directory");
    expect_error((char *[]){"--text", "empty.txt", NULL}, "--text empty.txt: empty");
    expect_error((char *[]){"--text", "short.txt", NULL},
                 "--text short.txt: the training split has 9 tokens, fewer than one window of context + 1 = 17");
    expect_error((char *[]){"--text", "wide.txt", NULL},
                 "--text wide.txt: 40 distinct tokens, more than model 'tiny.model''s vocabulary of 32");
    expect_error((char *[]){"--text", "markov.txt", "--text", "val.txt", NULL},
                 "--text val.txt: byte 0x71 at offset 16 does not occur in the training text markov.txt");
    expect_error((char *[]){"--text", "nodir", NULL}, "--text nodir: no text files in this directory");
    expect_error((char *[]){"--text", "markov.txt", "--model", "mlp", NULL}, "model 'mlp' is not a language model");
    /* a token model without text */
    char *argv[] = {(char *)tr_shmtrain, "--model", "gpt-mini", "--max-steps", "1", NULL};
    struct child_run r = run_argv(argv, 0);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "--model gpt-mini reads token ids: give it text (--text FILE)"));
    child_run_free(&r);
}

/* The reader itself: a directory in name order, skipping .dat files and
 * links; the 90/10 split; byte-level ids. */
static void test_reader(void **state)
{
    (void)state;
    char d[512], link[600], target[600];
    path_of(d, sizeof d, "corpus");
    mkdir(d, 0755);
    write_bytes("corpus/b", "world", 5);
    write_bytes("corpus/a", "hello ", 6);
    write_bytes("corpus/a.dat", "\0\0\0\1", 4);
    snprintf(link, sizeof link, "%s/a.u8", d);
    snprintf(target, sizeof target, "%s/a", d);
    assert_int_equal(symlink(target, link), 0);
    st_text *t;
    const char *paths[] = {d};
    assert_int_equal(st_text_load(&t, paths, 1, ST_TEXT_CHARS), ST_OK);
    assert_int_equal(st_text_tokens_in(t, ST_TEXT_TRAIN) + st_text_tokens_in(t, ST_TEXT_VAL), 11);
    assert_int_equal(st_text_tokens_in(t, ST_TEXT_VAL), 1);  /* 10% of 11 */
    assert_int_equal(st_text_vocab(t), 8);                   /* " dehlorw" */
    char decoded[12] = {0};
    for (int s = 0, at = 0; s < 2; s++)
        for (size_t i = 0; i < st_text_tokens_in(t, s); i++)
            decoded[at++] = (char)st_text_alphabet(t)[st_text_ids(t, s)[i]];
    assert_string_equal(decoded, "hello world");
    st_text_destroy(t);
    assert_int_equal(st_text_load(&t, paths, 1, ST_TEXT_BYTES), ST_OK);
    assert_int_equal(st_text_vocab(t), 256);
    assert_int_equal(st_text_ids(t, ST_TEXT_TRAIN)[0], 'h');
    st_text_destroy(t);
}

/* A text published once per machine is attached only when it is one: a
 * segment of the right owner and size whose magic is not written (a
 * publisher killed half way) or is another kind's (a dataset) is refused,
 * and nothing stays mapped. */
static void test_attach_checks_the_magic(void **state)
{
    (void)state;
    write_bytes("pub.txt", "abcabcabcabcabcabcabc", 21);
    char path[512], name[96], blank[96], message[256] = "";
    path_of(path, sizeof path, "pub.txt");
    const char *paths[] = {path};
    st_text *t, *back = NULL, *none = NULL;
    st_dataset *wrong = NULL;
    assert_int_equal(st_text_load(&t, paths, 1, ST_TEXT_CHARS), ST_OK);
    snprintf(name, sizeof name, "/st-test-text-%d", (int)getpid());
    snprintf(blank, sizeof blank, "/st-test-blank-%d", (int)getpid());
    /* every outcome first, the segments removed, then the checks: a failing
     * check leaves nothing in /dev/shm */
    const st_status shared = st_text_share(t, name), attached = st_text_attach(&back, name),
                    as_dataset = st_dataset_attach(&wrong, name);
    int fd = shm_open(blank, O_CREAT | O_EXCL | O_RDWR, 0600);
    const bool made = fd >= 0 && ftruncate(fd, 1 << 16) == 0;  /* zeros: no magic */
    if (fd >= 0)
        close(fd);
    const st_status blank_attach = st_text_attach(&none, blank);
    snprintf(message, sizeof message, "%s", st_last_error());
    shm_unlink(blank);
    shm_unlink(name);
    assert_int_equal(shared, ST_OK);
    assert_int_equal(attached, ST_OK);
    assert_int_equal(st_text_tokens_in(back, ST_TEXT_TRAIN), st_text_tokens_in(t, ST_TEXT_TRAIN));
    assert_int_equal(as_dataset, ST_ERR_FORMAT);  /* a text is not a dataset */
    assert_null(wrong);
    assert_true(made);
    assert_int_equal(blank_attach, ST_ERR_FORMAT);
    assert_non_null(strstr(message, "not a complete published text"));
    assert_null(none);
    st_text_destroy(back);
    st_text_destroy(t);
}

/* The evaluation scores each validation window once: 5 windows at batch 4
 * (a last batch of one window, padded with copies of it) give the loss the
 * same 5 at batch 5 give, from the same parameters (a learning rate too
 * small to move them). */
static void test_short_last_eval_batch(void **state)
{
    (void)state;
    double loss[2];
    for (int k = 0; k < 2; k++) {
        struct child_run r = lm_run(0, k ? "e5.ckpt" : "e4.ckpt",
                                (char *[]){"--max-steps", "1", "--lr", "1e-9", "--eval-windows", "5", "--batch-size",
                                           k ? "5" : "4", NULL});
        if (r.code != 0)
            fail_msg("training failed: %s", r.err);
        loss[k] = final_loss(&r);
        child_run_free(&r);
    }
    print_message("validation loss over 5 windows: %.4f at batch 4, %.4f at batch 5\n", loss[0], loss[1]);
    assert_true(fabs(loss[0] - loss[1]) <= 2e-4);
}

/* W ranks x b windows are 1 rank x W b's, dealt round-robin, all distinct,
 * and the next step draws others. */
static void test_windows_are_dealt_not_shared(void **state)
{
    (void)state;
    char path[512];
    path_of(path, sizeof path, "markov.txt");
    const char *paths[] = {path};
    st_text *t;
    assert_int_equal(st_text_load(&t, paths, 1, ST_TEXT_CHARS), ST_OK);
    enum { B = 4, T = 16 };
    int32_t one[2 * B * T], r0[B * T], r1[B * T], next[2 * B * T];
    int y1[2 * B * T], y[B * T];
    assert_int_equal(st_text_train_batch(t, 3, 7, 1, 0, 2 * B, T, one, y1), ST_OK);
    assert_int_equal(st_text_train_batch(t, 3, 7, 2, 0, B, T, r0, y), ST_OK);
    assert_int_equal(st_text_train_batch(t, 3, 7, 2, 1, B, T, r1, y), ST_OK);
    for (int i = 0; i < B; i++) {
        assert_memory_equal(r0 + i * T, one + (2 * i) * T, T * sizeof(int32_t));
        assert_memory_equal(r1 + i * T, one + (2 * i + 1) * T, T * sizeof(int32_t));
    }
    for (int i = 0; i < 2 * B; i++) {
        assert_memory_equal(y1 + i * T, one + i * T + 1, (T - 1) * sizeof(int32_t));  /* labels: the next tokens */
        for (int k = 0; k < i; k++)
            assert_memory_not_equal(one + i * T, one + k * T, T * sizeof(int32_t));
    }
    assert_int_equal(st_text_train_batch(t, 3, 8, 1, 0, 2 * B, T, next, y1), ST_OK);
    assert_memory_not_equal(next, one, sizeof one);
    st_text_destroy(t);

    /* A global batch near the number of starts: most draws collide, every
     * window still distinct (compared by their first tokens' positions via
     * a text whose 4-token windows are all different). */
    enum { N = 1200, W = 4, K = 1100 };
    char text[N + W];
    uint64_t z = 99;
    for (int i = 0; i < N + W; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        text[i] = (char)('a' + (z >> 59));  /* 32 letters: windows of 4 are nearly unique */
    }
    write_bytes("dense.txt", text, sizeof text);
    path_of(path, sizeof path, "dense.txt");
    const char *dense[] = {path, path};
    assert_int_equal(st_text_load(&t, dense, 2, ST_TEXT_CHARS), ST_OK);
    int32_t *xs = malloc((size_t)K * W * sizeof *xs);
    int *ys = malloc((size_t)K * W * sizeof *ys);
    assert_int_equal(st_text_train_batch(t, 1, 0, 1, 0, K, W, xs, ys), ST_OK);
    int same = 0;
    for (int i = 0; i < K; i++)
        for (int k = 0; k < i; k++)
            same += !memcmp(xs + i * W, xs + k * W, W * sizeof *xs) && !memcmp(ys + i * W, ys + k * W, W * sizeof *ys);
    assert_int_equal(same, 0);
    free(xs), free(ys);
    st_text_destroy(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_attach_checks_the_magic),
        cmocka_unit_test(test_short_last_eval_batch),
        cmocka_unit_test(test_windows_are_dealt_not_shared),
        cmocka_unit_test(test_bad_inputs_name_their_file),
        cmocka_unit_test(test_learns_below_the_unigram_entropy),
        cmocka_unit_test(test_two_ranks_equal_one_with_double_batch),
        cmocka_unit_test(test_gradient_accumulation),
        cmocka_unit_test(test_deterministic_and_resumable),
    };
    return TEXTRUN_GROUP("test_text", tests, argc, argv);
}
