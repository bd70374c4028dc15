#include "shmtrain/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void st_json_init(st_json *j, FILE *f)
{
    memset(j, 0, sizeof *j);
    j->f = f;
}

/* The comma and the key a member starts with. */
static void member(st_json *j, const char *key)
{
    if (j->comma[j->depth])
        fputc(',', j->f);
    j->comma[j->depth] = true;
    if (key) {
        fputc('"', j->f);
        fputs(key, j->f);  /* keys are the project's own identifiers */
        fputs("\":", j->f);
    }
}

static void open_nested(st_json *j, const char *key, char bracket)
{
    member(j, key);
    fputc(bracket, j->f);
    if (j->depth + 1 < ST_JSON_MAX_DEPTH)
        j->depth++;
    j->comma[j->depth] = false;
}

static void close_nested(st_json *j, char bracket)
{
    fputc(bracket, j->f);
    if (j->depth > 0)
        j->depth--;
}

void st_json_object_begin(st_json *j, const char *key) { open_nested(j, key, '{'); }
void st_json_object_end(st_json *j) { close_nested(j, '}'); }
void st_json_array_begin(st_json *j, const char *key) { open_nested(j, key, '['); }
void st_json_array_end(st_json *j) { close_nested(j, ']'); }

void st_json_string(st_json *j, const char *key, const char *value)
{
    member(j, key);
    if (!value) {
        fputs("null", j->f);
        return;
    }
    fputc('"', j->f);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(j->f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(j->f, "\\u%04x", *p);
        else
            fputc(*p, j->f);
    }
    fputc('"', j->f);
}

void st_json_int(st_json *j, const char *key, long long value)
{
    member(j, key);
    fprintf(j->f, "%lld", value);
}

void st_json_uint(st_json *j, const char *key, unsigned long long value)
{
    member(j, key);
    fprintf(j->f, "%llu", value);
}

void st_json_number(st_json *j, const char *key, double value, const char *format)
{
    member(j, key);
    if (!isfinite(value)) {
        fputs("null", j->f);
        return;
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    fprintf(j->f, format, value);
#pragma GCC diagnostic pop
}

void st_json_bool(st_json *j, const char *key, bool value)
{
    member(j, key);
    fputs(value ? "true" : "false", j->f);
}

/* ------------------------------------------------------------- reading -- */

const char *st_json_find(const char *record, const char *key)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = record ? strstr(record, pattern) : NULL;
    if (!p)
        return NULL;
    p += strlen(pattern);
    while (*p == ' ')
        p++;
    return p;
}

double st_json_get_number(const char *record, const char *key)
{
    const char *p = st_json_find(record, key);
    if (!p)
        return NAN;
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

void st_json_get_string(const char *record, const char *key, char *out, size_t len)
{
    const char *p = st_json_find(record, key);
    size_t n = 0;
    if (p && *p == '"')
        for (p++; *p && *p != '"' && n + 1 < len; p++) {
            if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            out[n++] = *p;
        }
    if (len)
        out[n] = '\0';
}
