/* Language models end to end: the text reader's errors, learning a text
 * whose structure is known, N x b against 1 x Nb, determinism, resume, the
 * checkpoint's vocabulary, sampling, and token files (nanoGPT's and llm.c's
 * .bin) against the same ids read as text. */
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
#include "trainrun.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/data.h"
#include "shmtrain/text.h"

/* A tiny GPT: one block, context 16, vocabulary 32. */
static const char *const MODEL = "input tokens 16\nembed 32 32\nblock heads 2\nlayernorm\nhead tied\n";

/* Letters a..p, each followed by one of exactly two successors chosen by a
 * fair coin: the unigram entropy is ln 16 = 2.77 nats per character, the
 * best possible loss ln 2 = 0.69. */
static char successor(char c, int coin) { return (char)('a' + ((c - 'a') * (coin ? 3 : 5) + (coin ? 1 : 2)) % 16); }

static void make_markov(const char *name, size_t n, uint64_t seed, char first)
{
    char *t = malloc(n);
    t[0] = first;
    for (size_t i = 1; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = successor(t[i - 1], (int)(seed >> 63));
    }
    write_bytes(name, t, n);
    free(t);
}

/* shmrun -n N -- shmtrain --model tiny.model --text markov.txt ... extra;
 * N = 0: shmtrain alone, its output kept. */
static struct child_run lm(int n, const char *ckpt, char *const extra[])
{
    char *argv[64], nbuf[8];
    int k = 0;
    snprintf(nbuf, sizeof nbuf, "%d", n);
    const char *launch[] = {tr_shmrun, "-n", nbuf, "--quiet", "--log-dir", "logs", "--"};
    const char *base[] = {tr_shmtrain, "--model", "tiny.model",
                          "--checkpoint", ckpt, "--metrics", "metrics.jsonl", "--overwrite", "--log-every", "1000",
                          "--eval-windows", "64", "--batch-size", "8", "--optimizer", "adamw", "--lr", "3e-3"};
    for (size_t i = 0; n > 0 && i < sizeof launch / sizeof *launch; i++)
        argv[k++] = (char *)launch[i];
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[k++] = (char *)base[i];
    bool has_text = false;
    for (int i = 0; extra[i]; i++)
        has_text |= !strcmp(extra[i], "--text") || !strcmp(extra[i], "--tokens-bin");
    if (!has_text)
        argv[k++] = "--text", argv[k++] = "markov.txt";
    for (int i = 0; extra[i]; i++)
        argv[k++] = extra[i];
    argv[k] = NULL;
    return run_argv(argv, 0);
}

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
    struct child_run r = lm(0, "learn.ckpt", (char *[]){"--max-steps", "300", NULL});
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
        legal += s.out[i] == successor(s.out[i - 1], 0) || s.out[i] == successor(s.out[i - 1], 1);
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

/* Runs `n` ranks with `extra` into `ckpt`, failing the test with `what`
 * if the run fails; returns the checkpoint. */
static st_ckpt lm_ckpt(int n, const char *ckpt, char *const extra[], const char *what)
{
    struct child_run r = lm(n, ckpt, extra);
    if (r.code != 0)
        fail_msg("%s failed (exit %d): %s", what, r.code, r.err);
    child_run_free(&r);
    return read_ckpt(ckpt);
}

/* The same windows, their gradients summed in another order: fp32
 * round-off (~1e-7 relative) in each step's gradient, which AdamW's
 * normalised step (lr x m / sqrt(v)) passes on about 1:1 and 50 steps
 * compound; measured 2.4e-5 of the largest parameter here (2 x 8 against
 * 1 x 16), and 2e-4 leaves 8x room (a rank that trained on its own
 * gradients alone, or on other windows, is off by 1e-2 and more). */
static void assert_same_training(const st_ckpt *a, const st_ckpt *b, const char *what)
{
    assert_int_equal(a->step, b->step);
    double scale, worst = ckpt_max_abs_diff(a, b, &scale);
    if (!(worst < 2e-4 * scale))
        fail_msg("%s: parameters differ by %.3g (scale %.3g) after %llu steps", what, worst, scale,
                 (unsigned long long)a->step);
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
    struct child_run bad = lm(0, "bad.ckpt", (char *[]){"--grad-accum", "0", NULL});  /* no launcher: its own exit status */
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
    struct child_run r1 = lm(2, "d1.ckpt", straight), r2 = lm(2, "d2.ckpt", straight);
    assert_int_equal(r1.code, 0);
    assert_int_equal(r2.code, 0);
    st_ckpt a = read_ckpt("d1.ckpt"), b = read_ckpt("d2.ckpt");
    assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
    assert_memory_equal(a.optim_state, b.optim_state, a.noptim * sizeof(float));
    assert_int_equal(a.nalphabet, 16);
    assert_memory_equal(a.alphabet, "abcdefghijklmnop", 16);

    struct child_run h1 = lm(2, "h.ckpt", (char *[]){"--max-steps", "25", "--seed", "4", NULL});
    struct child_run h2 = lm(2, "h.ckpt", (char *[]){"--max-steps", "60", "--seed", "4", "--resume", NULL});
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
    struct child_run v = lm(1, "d1.ckpt", (char *[]){"--text", "upper.txt", "--resume", "--seed", "4", NULL});
    assert_int_equal(v.code, 1);
    assert_non_null(strstr(v.err, "its alphabet (16 symbols) differs from that of upper.txt (16)"));
    st_ckpt after = read_ckpt("d1.ckpt");  /* and the refused checkpoint is intact */
    assert_memory_equal(after.params, a.params, a.nparams * sizeof(float));
    st_ckpt_free(&after);
    st_ckpt_free(&a), st_ckpt_free(&b);
    child_run_free(&r1), child_run_free(&r2), child_run_free(&h1), child_run_free(&h2), child_run_free(&v);
}

static void expect_error(char *const extra[], const char *needle)
{
    struct child_run r = lm(1, "bad.ckpt", extra);
    if (r.code == 0 || !strstr(r.err, needle))
        fail_msg("exit %d, wanted '%s' in:\n%s", r.code, needle, r.err);
    child_run_free(&r);
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
        struct child_run r = lm(0, k ? "e5.ckpt" : "e4.ckpt",
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

/* ------------------------------------------------------- token files -- */

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
    struct child_run r = lm(0, "bad.ckpt", (char *[]){"--tokens-bin", "ok.bin", "--text", "markov.txt", NULL});
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--tokens-bin and --text: give the language model one of them"));
    child_run_free(&r);
    r = run_argv((char *[]){(char *)tr_shmtrain, "--model", "gpt-mini", "--val-bin", "ok.bin", NULL}, 0);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--val-bin belongs to --tokens-bin FILE"));
    child_run_free(&r);
}

static int setup(void **state)
{
    (void)state;
    if (trainrun_setup("test_text") != 0)
        return -1;
    make_markov("markov.txt", 60000, 7, 'a');
    write_bytes("tiny.model", MODEL, strlen(MODEL));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return test_dir_remove(tr_dir);
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
        cmocka_unit_test(test_token_file_reader),
        cmocka_unit_test(test_bad_token_files),
        cmocka_unit_test(test_token_files_train_as_text),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, setup, teardown);
}
