/* shmtrain's config files: the text --config reads and a run folder's
 * config.txt holds.
 *
 * One setting a line, a flag's name without its dashes and its value:
 *
 *     model gpt-mini          # a comment: '#' at a line's start or after a space
 *     lr=1e-3                 # "key=value" and "key = value" read the same
 *     text "notes #2.txt"     # quoted: a value holding spaces at its ends, '#',
 *     augment                 #   quotes, backslashes or control characters
 *
 * A quoted value takes C's escapes \" \\ \n \t \r and \xHH.  A file holding
 * a NUL byte or a control character other than tab, CR and LF is not text
 * and is refused; a UTF-8 byte-order mark at its start is skipped.  Keys are
 * letters, digits, '-' and '_', starting with a letter or a digit (two
 * dashes before them allowed, as on a command line).  What each key means is the reader's (shmtrain's flags); this
 * module only reads and writes the text. */
#ifndef SHMTRAIN_CONFIG_TEXT_H
#define SHMTRAIN_CONFIG_TEXT_H

#include <stddef.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_CONFIG_MAX_BYTES (1u << 20)  /* a config is settings, not data */

typedef struct st_config_entry {
    char *key;     /* without leading dashes */
    char *value;   /* NULL: a key alone (a flag that takes no value) */
    int line;      /* 1-based, for messages */
} st_config_entry;

/* Reads `n` bytes of config text.  On success *entries (owned by the
 * caller: st_config_free) holds *count entries in file order.  On failure
 * ST_ERR_FORMAT with one line "NAME:LINE: what is wrong" (`name` is what
 * the user called the file). */
st_status st_config_parse(const char *text, size_t n, const char *name, st_config_entry **entries, int *count);
void st_config_free(st_config_entry *entries, int count);

/* `value` as config.txt writes it: bare where it reads back the same,
 * else quoted with escapes.  malloc'd; NULL when out of memory. */
char *st_config_quote(const char *value);

#ifdef __cplusplus
}
#endif
#endif
