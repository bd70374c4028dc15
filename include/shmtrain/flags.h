/* Command lines spelled out in full.  getopt_long takes any unambiguous
 * prefix of a long option (--epoch for --epochs), so a flag added later can
 * change what an old command means; and it answers a typo or another tool's
 * spelling (--max_steps, --learning-rate, --nproc-per-node) with "unknown
 * option" alone.  st_flags_check reads the words first and says which
 * option was meant.  Implemented in src/common/flags.c (libc only). */
#ifndef SHMTRAIN_FLAGS_H
#define SHMTRAIN_FLAGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Another tool's name for one of ours: `theirs` written with dashes (an
 * underscore in the command line matches a dash here), `ours` as the user
 * should type it ("--lr", "-n"). */
typedef struct {
    const char *theirs;
    const char *ours;
} st_flag_alias;

/* Checks argv[1..argc) up to "--", and up to the first operand when
 * `stop_at_operand` (a launcher's command follows it), against `longopts`
 * (getopt_long's table) and `shortopts` (its optstring, for the values of
 * short options).  Every "--name" or "--name=value" must be a long option
 * exactly; the value of one that requires a value is skipped.  `aliases`
 * ends with {NULL, NULL} (or is NULL).  Returns 0, or the index of the
 * first bad word with `why` filled: "unknown option '--max_steps' (did you
 * mean --max-steps?)".  Does not reorder or keep argv. */
int st_flags_check(int argc, char *const *argv, const char *shortopts, const struct option *longopts,
                   const st_flag_alias *aliases, bool stop_at_operand, char *why, size_t len);

#ifdef __cplusplus
}
#endif
#endif
