/* The words every shmtrain subcommand reads (training, sample, export): a
 * number, a flag spelled in full, and the one-line refusal.  A bad flag ends
 * the program with exit status 2 and one line naming it (the program's
 * contract, docs/training.md), so these functions exit rather than return.
 * Below the training flags (shmtrain_options.c) and the merged line
 * (shmtrain_line.c), which both use them. */
#ifndef SHMTRAIN_WORDS_H
#define SHMTRAIN_WORDS_H

#include <getopt.h>

void shmtrain_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A whole number / a number in [min, max], or exit 2 naming `flag`. */
long shmtrain_whole(const char *flag, const char *v, long min, long max);
double shmtrain_number(const char *flag, const char *v, double min, double max);

/* Exit 2 unless every word of argv is one of `opts` spelled in full (the
 * names other tools give a knob answered with ours). */
void shmtrain_check_spelling(int argc, char **argv, const struct option *opts, const char *program);

#endif
