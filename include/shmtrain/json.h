/* A small JSON writer and a reader for flat records.
 *
 * The writer streams compact JSON (no spaces) to a FILE: objects and arrays
 * nest, keys come out in the order written, numbers with the printf format
 * the caller gives (a NaN or infinity is written as null).  Every JSON this
 * project writes goes through it: plans, the launcher's report, metrics,
 * sweep reports.  The reader finds a key in one flat record (one line of a
 * metrics file, a report), which is all the project reads.
 */
#ifndef SHMTRAIN_JSON_H
#define SHMTRAIN_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST_JSON_MAX_DEPTH 16

typedef struct st_json {
    FILE *f;
    int depth;
    bool comma[ST_JSON_MAX_DEPTH];  /* the next member at this depth needs a comma */
} st_json;

void st_json_init(st_json *j, FILE *f);

/* `key` names the member inside an object; NULL at the top level and
 * inside arrays. */
void st_json_object_begin(st_json *j, const char *key);
void st_json_object_end(st_json *j);
void st_json_array_begin(st_json *j, const char *key);
void st_json_array_end(st_json *j);
void st_json_string(st_json *j, const char *key, const char *value);  /* NULL -> null */
void st_json_int(st_json *j, const char *key, long long value);
void st_json_uint(st_json *j, const char *key, unsigned long long value);
void st_json_number(st_json *j, const char *key, double value, const char *format);  /* e.g. "%.3f" */
void st_json_bool(st_json *j, const char *key, bool value);

/* Reading one flat record (keys unique in it).  The value of `key` as text
 * (pointing into `record`), or NULL when absent. */
const char *st_json_find(const char *record, const char *key);
/* The number at `key`, or NAN when absent or not a number. */
double st_json_get_number(const char *record, const char *key);
/* The string at `key` into out (empty when absent); escapes are kept as
 * written except \" and \\. */
void st_json_get_string(const char *record, const char *key, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif
