/* Exact long options and "did you mean" (include/shmtrain/flags.h).
 *
 * The suggestion is, in order: the same name with underscores as dashes
 * (nanoGPT and Hugging Face spell flags with underscores); another tool's
 * name from the caller's aliases; the option the word abbreviates; the
 * nearest name within a small edit distance.  Nothing is guessed silently:
 * each ends in an error the user reads. */
#include "shmtrain/flags.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 64

/* "--Max_Steps=5" -> "max-steps"; false when the name does not fit. */
static bool normalise(const char *word, char *out, size_t len)
{
    const char *name = word + 2;
    const size_t n = strcspn(name, "=");
    if (n + 1 > len)
        return false;
    for (size_t i = 0; i < n; i++)
        out[i] = name[i] == '_' ? '-' : (char)tolower((unsigned char)name[i]);
    out[n] = '\0';
    return true;
}

static const struct option *exact(const struct option *opts, const char *name, size_t n)
{
    for (const struct option *o = opts; o->name; o++)
        if (strlen(o->name) == n && !strncmp(o->name, name, n))
            return o;
    return NULL;
}

/* Levenshtein distance, capped: names are short. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[NAME_MAX_LEN + 1];
    if (la > NAME_MAX_LEN || lb > NAME_MAX_LEN)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            const size_t above = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best) best = above + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[lb];
}

/* Every option `name` abbreviates, "--test-images, --test-labels or
 * --test-subset" (at most four); 0 when none. */
static int prefixed(const char *name, const struct option *opts, char *buf, size_t len)
{
    int found = 0, total = 0;
    for (const struct option *o = opts; o->name; o++)
        total += !strncmp(o->name, name, strlen(name));
    buf[0] = '\0';
    for (const struct option *o = opts; o->name && found < 4; o++) {
        if (strncmp(o->name, name, strlen(name)))
            continue;
        found++;
        const char *joint = found == 1 ? "" : found == total || found == 4 ? " or " : ", ";
        const size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s--%s", joint, o->name);
    }
    return found;
}

/* The nearest option within two edits (and half the name), or NULL. */
static const struct option *nearest(const char *name, const struct option *opts)
{
    const struct option *best = NULL;
    size_t best_distance = (size_t)-1;
    for (const struct option *o = opts; o->name; o++) {
        const size_t d = distance(name, o->name);
        if (d < best_distance)
            best = o, best_distance = d;
    }
    return best_distance <= 2 && best_distance * 2 <= strlen(name) ? best : NULL;
}

static void unknown(const char *word, const struct option *opts, const st_flag_alias *aliases, char *why,
                    size_t len)
{
    const int shown = (int)strcspn(word, "=");
    char name[NAME_MAX_LEN + 1], list[4 * (NAME_MAX_LEN + 8)];
    const struct option *o;
    if (!normalise(word, name, sizeof name)) {
        snprintf(why, len, "unknown option '%.*s'", shown, word);
        return;
    }
    if ((o = exact(opts, name, strlen(name)))) {
        snprintf(why, len, "unknown option '%.*s' (did you mean --%s?)", shown, word, o->name);
        return;
    }
    for (const st_flag_alias *a = aliases; a && a->theirs; a++) {
        if (!strcmp(a->theirs, name)) {
            snprintf(why, len, "unknown option '%.*s' (did you mean %s?)", shown, word, a->ours);
            return;
        }
    }
    if (prefixed(name, opts, list, sizeof list))
        snprintf(why, len, "unknown option '%.*s' (did you mean %s? options are spelled in full)", shown, word,
                 list);
    else if ((o = nearest(name, opts)))
        snprintf(why, len, "unknown option '%.*s' (did you mean --%s?)", shown, word, o->name);
    else
        snprintf(why, len, "unknown option '%.*s'", shown, word);
}

/* The words a short-option cluster ("-n4", "-n 4", "-hq") takes: 1 or 2. */
static int short_words(const char *word, const char *shortopts, bool *is_next_value)
{
    *is_next_value = false;
    for (const char *c = word + 1; *c; c++) {
        const char *spec = *c == ':' ? NULL : strchr(shortopts, *c);
        if (spec && spec[1] == ':' && spec[2] != ':') {
            *is_next_value = c[1] == '\0';
            return *is_next_value ? 2 : 1;
        }
    }
    return 1;
}

int st_flags_check(int argc, char *const *argv, const char *shortopts, const struct option *longopts,
                   const st_flag_alias *aliases, bool stop_at_operand, char *why, size_t len)
{
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (!strcmp(w, "--"))
            return 0;
        if (w[0] != '-' || w[1] == '\0') {
            if (stop_at_operand)
                return 0;
            continue;
        }
        bool next_is_value;
        if (w[1] != '-') {
            i += short_words(w, shortopts, &next_is_value) - 1;
            continue;
        }
        const size_t n = strcspn(w + 2, "=");
        const struct option *o = exact(longopts, w + 2, n);
        if (!o) {
            unknown(w, longopts, aliases, why, len);
            return i;
        }
        if (o->has_arg == required_argument && w[2 + n] != '=')
            i++;
    }
    return 0;
}
