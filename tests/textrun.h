/* Test helper: a tiny GPT trained on a text whose structure is known, as
 * its users run it (shmrun -n N -- shmtrain --model tiny.model --text
 * markov.txt ...), shared by test_text.c and test_token_files.c.  Built on
 * trainrun.h: call from the test runner, not from a forked child. */
#ifndef SHMTRAIN_TESTS_TEXTRUN_H
#define SHMTRAIN_TESTS_TEXTRUN_H

#include <stdint.h>

#include "trainrun.h"
#include "shmtrain/ckpt.h"

/* tiny.model's text: one block, context 16, vocabulary 32. */
extern const char *const TEXTRUN_MODEL;

/* Letters a..p, each followed by one of exactly two successors chosen by a
 * fair coin (`coin`): the unigram entropy is ln 16 = 2.77 nats per
 * character, the best possible loss ln 2 = 0.69. */
char markov_successor(char c, int coin);
/* tr_dir/name: n such letters from `first`, the coins from `seed`. */
void make_markov(const char *name, size_t n, uint64_t seed, char first);

/* shmrun -n N -- shmtrain --model tiny.model --text markov.txt ... extra
 * (extra's --text or --tokens-bin replaces markov.txt); N = 0: shmtrain
 * alone.  The caller frees the result (child_run_free). */
struct child_run lm_run(int n, const char *ckpt, char *const extra[]);
/* lm_run into `ckpt`, failing the test with `what` if it fails; the
 * checkpoint read back (the caller frees it, st_ckpt_free). */
st_ckpt lm_ckpt(int n, const char *ckpt, char *const extra[], const char *what);
/* Both trained the same windows, summed in another order (the tolerance's
 * origin where it is defined, textrun.c). */
void assert_same_training(const st_ckpt *a, const st_ckpt *b, const char *what);
/* One rank with `extra` fails, `needle` in its stderr. */
void expect_error(char *const extra[], const char *needle);

/* trainrun_setup(name), then markov.txt (60,000 letters) and tiny.model. */
int textrun_setup(const char *name);
/* The group's tests in that directory, removed after; argv[1] filters the
 * cases by name (cmocka's filter). */
int textrun_group(const char *name, const struct CMUnitTest *tests, size_t count, int argc, char **argv);
#define TEXTRUN_GROUP(name, tests, argc, argv) textrun_group(name, tests, sizeof(tests) / sizeof *(tests), argc, argv)

#endif
