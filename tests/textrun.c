/* A tiny language model's runs (textrun.h). */
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

/* A tiny GPT: one block, context 16, vocabulary 32. */
const char *const TEXTRUN_MODEL = "input tokens 16\nembed 32 32\nblock heads 2\nlayernorm\nhead tied\n";

/* Letters a..p, each followed by one of exactly two successors chosen by a
 * fair coin: the unigram entropy is ln 16 = 2.77 nats per character, the
 * best possible loss ln 2 = 0.69. */
char markov_successor(char c, int coin) { return (char)('a' + ((c - 'a') * (coin ? 3 : 5) + (coin ? 1 : 2)) % 16); }

void make_markov(const char *name, size_t n, uint64_t seed, char first)
{
    char *t = malloc(n);
    t[0] = first;
    for (size_t i = 1; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = markov_successor(t[i - 1], (int)(seed >> 63));
    }
    write_bytes(name, t, n);
    free(t);
}

/* shmrun -n N -- shmtrain --model tiny.model --text markov.txt ... extra;
 * N = 0: shmtrain alone, its output kept. */
struct child_run lm_run(int n, const char *ckpt, char *const extra[])
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

/* Runs `n` ranks with `extra` into `ckpt`, failing the test with `what`
 * if the run fails; returns the checkpoint. */
st_ckpt lm_ckpt(int n, const char *ckpt, char *const extra[], const char *what)
{
    struct child_run r = lm_run(n, ckpt, extra);
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
void assert_same_training(const st_ckpt *a, const st_ckpt *b, const char *what)
{
    assert_int_equal(a->step, b->step);
    double scale, worst = ckpt_max_abs_diff(a, b, &scale);
    if (!(worst < 2e-4 * scale))
        fail_msg("%s: parameters differ by %.3g (scale %.3g) after %llu steps", what, worst, scale,
                 (unsigned long long)a->step);
}

void expect_error(char *const extra[], const char *needle)
{
    struct child_run r = lm_run(1, "bad.ckpt", extra);
    if (r.code == 0 || !strstr(r.err, needle))
        fail_msg("exit %d, wanted '%s' in:\n%s", r.code, needle, r.err);
    child_run_free(&r);
}

int textrun_setup(const char *name)
{
    if (trainrun_setup(name) != 0)
        return -1;
    make_markov("markov.txt", 60000, 7, 'a');
    write_bytes("tiny.model", TEXTRUN_MODEL, strlen(TEXTRUN_MODEL));
    return 0;
}

static const char *group_name;

static int group_setup(void **state)
{
    (void)state;
    return textrun_setup(group_name);
}

static int group_teardown(void **state)
{
    (void)state;
    return trainrun_teardown();
}

int textrun_group(const char *name, const struct CMUnitTest *tests, size_t count, int argc, char **argv)
{
    group_name = name;
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return _cmocka_run_group_tests(name, tests, count, group_setup, group_teardown);
}
