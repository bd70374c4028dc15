/* Config text (include/shmtrain/config_text.h). */
#define _GNU_SOURCE
#include "shmtrain/config_text.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* A NUL or another control byte than tab, CR and LF: the file is not text
 * (a binary file named by mistake), said before any line is read. */
static st_status check_text(const char *text, size_t n, const char *name)
{
    if (n > ST_CONFIG_MAX_BYTES)
        return st_fail(ST_ERR_FORMAT, "%s: %zu bytes; a config is at most %u (settings, one a line)", name, n,
                       ST_CONFIG_MAX_BYTES);
    int line = 1;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (c == '\n')
            line++;
        else if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
            return st_fail(ST_ERR_FORMAT, "%s:%d: byte 0x%02x: not a text file", name, line, c);
    }
    return ST_OK;
}

/* A quoted value from just past its opening quote; *end just past the
 * closing one.  NULL with `why` set when it does not close or an escape is
 * not one of \" \\ \n \t \r \xHH. */
static char *unquote(const char *p, const char *limit, const char **end, const char **why)
{
    char *out = malloc((size_t)(limit - p) + 1), *o = out;
    if (!out) {
        *why = "out of memory";
        return NULL;
    }
    for (; p < limit && *p != '"'; p++) {
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        if (++p >= limit)
            break;
        const char *pairs = "\"\"\\\\n\nt\tr\r", *k = strchr(pairs, *p);
        if (k && (k - pairs) % 2 == 0) {
            *o++ = k[1];
        } else if (*p == 'x' && limit - p > 2 && is_hex(p[1]) && is_hex(p[2])) {
            char hex[3] = {p[1], p[2], 0};
            const char byte = (char)strtol(hex, NULL, 16);
            if (!byte) {
                *why = "\\x00 in a value";
                free(out);
                return NULL;
            }
            *o++ = byte;
            p += 2;
        } else {
            *why = "an escape other than \\\" \\\\ \\n \\t \\r \\xHH";
            free(out);
            return NULL;
        }
    }
    if (p >= limit) {
        *why = "a quoted value without its closing quote";
        free(out);
        return NULL;
    }
    *o = '\0';
    *end = p + 1;
    return out;
}

/* The value after a key: NULL `*value` for none; -1 with `why` when bad. */
static int read_value(const char *p, const char *limit, char **value, const char **why)
{
    *value = NULL;
    while (p < limit && is_blank(*p))
        p++;
    if (p == limit || *p == '#')
        return 0;
    if (*p == '"') {
        const char *end;
        if (!(*value = unquote(p + 1, limit, &end, why)))
            return -1;
        while (end < limit && is_blank(*end))
            end++;
        if (end < limit && *end != '#') {
            *why = "text after a quoted value";
            free(*value);
            *value = NULL;
            return -1;
        }
        return 0;
    }
    const char *stop = p;  /* up to a comment: '#' after a blank */
    while (stop < limit && !(*stop == '#' && is_blank(stop[-1])))
        stop++;
    while (stop > p && is_blank(stop[-1]))
        stop--;
    if (!(*value = strndup(p, (size_t)(stop - p)))) {
        *why = "out of memory";
        return -1;
    }
    return 0;
}

/* One line into e (e->key NULL for a blank or comment line). */
static st_status read_line(const char *p, const char *limit, const char *name, int line, st_config_entry *e)
{
    *e = (st_config_entry){.line = line};
    while (p < limit && is_blank(*p))
        p++;
    if (p == limit || *p == '#')
        return ST_OK;
    const char *key = p + (limit - p >= 2 && p[0] == '-' && p[1] == '-' ? 2 : 0), *k = key;
    while (k < limit && is_key_char(*k))
        k++;
    const bool starts_well = k > key && *key != '-' && *key != '_';  /* "--name": its dashes are no part of it */
    if (!starts_well || (k < limit && !is_blank(*k) && *k != '=' && *k != '#')) {
        const char *word_end = p;
        while (word_end < limit && !is_blank(*word_end))
            word_end++;
        return st_fail(ST_ERR_FORMAT, "%s:%d: '%.*s' is not a setting's name (a flag's name without its dashes, "
                       "then its value)", name, line, (int)(word_end - p > 60 ? 60 : word_end - p), p);
    }
    const char *v = k;
    while (v < limit && is_blank(*v))
        v++;
    const bool assigned = v < limit && *v == '=';
    const char *why = NULL;
    if (read_value(v + assigned, limit, &e->value, &why) != 0)
        return st_fail(ST_ERR_FORMAT, "%s:%d: %s", name, line, why);
    if (assigned && !e->value && !(e->value = strdup("")))
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", name);
    if (!(e->key = strndup(key, (size_t)(k - key)))) {
        free(e->value);
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", name);
    }
    return ST_OK;
}

st_status st_config_parse(const char *text, size_t n, const char *name, st_config_entry **entries, int *count)
{
    *entries = NULL;
    *count = 0;
    st_status st = check_text(text, n, name);
    if (st != ST_OK)
        return st;
    if (n >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))  /* UTF-8's byte-order mark, as editors on Windows write */
        text += 3, n -= 3;
    int cap = 0, line = 0;
    for (const char *p = text, *limit = text + n; p < limit;) {
        const char *eol = memchr(p, '\n', (size_t)(limit - p));
        const char *end = eol ? eol : limit;
        line++;
        st_config_entry e;
        if ((st = read_line(p, end > p && end[-1] == '\r' ? end - 1 : end, name, line, &e)) != ST_OK)
            break;
        if (e.key) {
            if (*count == cap) {
                cap = cap ? 2 * cap : 16;
                st_config_entry *grown = realloc(*entries, (size_t)cap * sizeof *grown);
                if (!grown) {
                    free(e.key);
                    free(e.value);
                    st = st_fail(ST_ERR_NOMEM, "%s: out of memory", name);
                    break;
                }
                *entries = grown;
            }
            (*entries)[(*count)++] = e;
        }
        p = eol ? eol + 1 : limit;
        if (!eol)
            break;
    }
    if (st != ST_OK) {
        st_config_free(*entries, *count);
        *entries = NULL;
        *count = 0;
    }
    return st;
}

void st_config_free(st_config_entry *entries, int count)
{
    for (int i = 0; i < count; i++) {
        free(entries[i].key);
        free(entries[i].value);
    }
    free(entries);
}

/* Would `value`, written bare, read back as itself? */
static bool reads_back_bare(const char *value)
{
    const size_t n = strlen(value);
    if (!n || is_blank(value[0]) || is_blank(value[n - 1]) || value[0] == '=' || value[0] == '"')
        return false;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p == '#' || *p == '\\' || *p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

char *st_config_quote(const char *value)
{
    if (reads_back_bare(value))
        return strdup(value);
    char *out = malloc(4 * strlen(value) + 3), *o = out;
    if (!out)
        return NULL;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        const char *escape = *p == '"' ? "\\\"" : *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '\t' ? "\\t"
                           : *p == '\r' ? "\\r" : NULL;
        if (escape)
            o += sprintf(o, "%s", escape);
        else if (*p < 0x20 || *p == 0x7f)
            o += sprintf(o, "\\x%02x", *p);
        else
            *o++ = (char)*p;
    }
    *o++ = '"';
    *o = '\0';
    return out;
}
