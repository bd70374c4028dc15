/* A safetensors header, read and checked (safetensors_header.h). */
#include "safetensors_header.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct reader {
    const char *p, *end;
    const char *flag, *path;
    const char *start;  /* the header's first byte, for positions in messages */
    st_status failed;   /* the first failure, its message set */
};

static bool fail_at(struct reader *r, const char *what)
{
    if (r->failed == ST_OK)
        r->failed = st_fail(ST_ERR_FORMAT, "%s %s: header: %s at byte %zu of the JSON", r->flag, r->path, what,
                            (size_t)(r->p - r->start));
    return false;
}

static void skip_ws(struct reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool take(struct reader *r, char c)
{
    skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static bool expect(struct reader *r, char c, const char *what)
{
    return take(r, c) || fail_at(r, what);
}

/* Valid UTF-8, as the reference requires of the whole header. */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const unsigned char c = s[i];
        const int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 && c >= 0xc2 ? 2 : (c & 0xf0) == 0xe0 ? 3
                      : (c & 0xf8) == 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + (size_t)len > n)
            return false;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        const bool overlong_or_surrogate = len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff));
        if (overlong_or_surrogate || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        i += (size_t)len;
    }
    return true;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* Code point cp as UTF-8 into out[*n], up to cap - 1 bytes (longer names are an error). */
static bool put_utf8(char *out, size_t cap, size_t *n, uint32_t cp)
{
    unsigned char b[4];
    int len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (int k = len - 1; k > 0; k--, cp >>= 6)
        b[k] = (unsigned char)(0x80 | (cp & 0x3f));
    b[0] = (unsigned char)(len == 1 ? cp : (0xf0 << (4 - len)) | cp);
    if (*n + (size_t)len >= cap)
        return false;
    memcpy(out + *n, b, (size_t)len);
    *n += (size_t)len;
    return true;
}

/* One escape after the backslash at r->p; its code point into *cp. */
static bool escape(struct reader *r, uint32_t *cp)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = r->p < r->end ? strchr(from, *r->p) : NULL;
    if (k && *k) {
        *cp = (unsigned char)to[k - from];
        r->p++;
        return true;
    }
    if (r->p >= r->end || *r->p != 'u' || r->end - r->p < 5 || hex4(r->p + 1) < 0)
        return fail_at(r, "a bad escape in a string");
    *cp = (uint32_t)hex4(r->p + 1);
    r->p += 5;
    if (*cp >= 0xd800 && *cp <= 0xdbff) {  /* a surrogate pair */
        const int lo = r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u' ? hex4(r->p + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return fail_at(r, "a lone surrogate in a string");
        *cp = 0x10000 + ((*cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
        r->p += 6;
    } else if (*cp >= 0xdc00 && *cp <= 0xdfff) {
        return fail_at(r, "a lone surrogate in a string");
    }
    return true;
}

/* A string into out (cap bytes with its NUL), its escapes decoded; with
 * out NULL, read through and kept nowhere. */
static bool string_into(struct reader *r, char *out, size_t cap)
{
    if (!expect(r, '"', "a string expected"))
        return false;
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        const unsigned char c = (unsigned char)*r->p++;
        uint32_t cp = c;
        if (c < 0x20)
            return fail_at(r, "a control character in a string");
        if (c == '\\' && !escape(r, &cp))
            return false;
        if (!out)
            continue;
        const bool fits = c == '\\' ? put_utf8(out, cap, &n, cp) : n + 1 < cap && (out[n++] = (char)c, true);
        if (!fits)
            return fail_at(r, "a tensor name longer than this reader takes (255 bytes)");
    }
    if (r->p >= r->end)
        return fail_at(r, "a string that never ends");
    r->p++;
    if (out)
        out[n] = '\0';
    return true;
}

/* A JSON number that is a whole number >= 0 (the format's usize). */
static bool whole(struct reader *r, uint64_t *v)
{
    skip_ws(r);
    if (r->p >= r->end || *r->p < '0' || *r->p > '9')
        return fail_at(r, "a whole number >= 0 expected");
    if (*r->p == '0' && r->end - r->p > 1 && r->p[1] >= '0' && r->p[1] <= '9')
        return fail_at(r, "a number with a leading zero");
    *v = 0;
    for (; r->p < r->end && *r->p >= '0' && *r->p <= '9'; r->p++) {
        if (*v > (UINT64_MAX - 9) / 10)
            return fail_at(r, "a number too large");
        *v = *v * 10 + (uint64_t)(*r->p - '0');
    }
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
        return fail_at(r, "a whole number expected, not a fraction");
    return true;
}

/* A JSON number, read through. */
static bool skip_number(struct reader *r)
{
    const char *from = r->p;
    if (r->p < r->end && *r->p == '-')
        r->p++;
    bool digits = false;
    for (; r->p < r->end && strchr("0123456789.eE+-", *r->p); r->p++)
        digits |= *r->p >= '0' && *r->p <= '9';
    return digits || (r->p = from, fail_at(r, "a value expected"));
}

/* Any JSON value (a tensor's fields this reader does not use, as serde
 * ignores them), nested at most 32 deep. */
static bool skip_value(struct reader *r, int depth)
{
    skip_ws(r);
    if (depth > 32)
        return fail_at(r, "values nested too deep");
    if (r->p >= r->end)
        return fail_at(r, "a value expected");
    if (*r->p == '"')
        return string_into(r, NULL, 0);
    if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))
        return skip_number(r);
    for (const char *word = "true\0false\0null\0"; *word; word += strlen(word) + 1)
        if ((size_t)(r->end - r->p) >= strlen(word) && !memcmp(r->p, word, strlen(word))) {
            r->p += strlen(word);
            return true;
        }
    const char open = *r->p, close = open == '[' ? ']' : '}';
    if (open != '[' && open != '{')
        return fail_at(r, "a value expected");
    r->p++;
    if (take(r, close))
        return true;
    do {
        if (open == '{' && (!string_into(r, NULL, 0) || !expect(r, ':', "':' expected")))
            return false;
        if (!skip_value(r, depth + 1))
            return false;
    } while (take(r, ','));
    return expect(r, close, open == '[' ? "',' or ']' expected" : "',' or '}' expected");
}

/* [n, n, ...] into v (at most max), their count into *n. */
static bool wholes(struct reader *r, uint64_t *v, int max, int *n, const char *what)
{
    *n = 0;
    if (!expect(r, '[', what))
        return false;
    if (take(r, ']'))
        return true;
    do {
        if (*n == max)
            return fail_at(r, what);
        if (!whole(r, &v[(*n)++]))
            return false;
    } while (take(r, ','));
    return expect(r, ']', "',' or ']' expected");
}

/* "__metadata__": null, or an object of strings. */
static bool metadata(struct reader *r)
{
    skip_ws(r);
    if ((size_t)(r->end - r->p) >= 4 && !memcmp(r->p, "null", 4)) {
        r->p += 4;
        return true;
    }
    if (!expect(r, '{', "__metadata__ must be an object of strings"))
        return false;
    if (take(r, '}'))
        return true;
    char key[SFT_MAX_NAME];
    do {
        if (!string_into(r, key, sizeof key) || !expect(r, ':', "':' expected"))
            return false;
        skip_ws(r);
        if (r->p < r->end && *r->p != '"') {
            if (r->failed == ST_OK)
                r->failed = st_fail(ST_ERR_FORMAT, "%s %s: header: __metadata__ '%s' is not a string (the format's "
                                                   "metadata maps strings to strings)", r->flag, r->path, key);
            return false;
        }
        if (!string_into(r, NULL, 0))
            return false;
    } while (take(r, ','));
    return expect(r, '}', "',' or '}' expected in __metadata__");
}

/* ------------------------------------------------------------- tensors -- */

static const struct {
    const char *name;
    unsigned bytes;
} DTYPES[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
};

static unsigned dtype_bytes(const char *name)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
        if (!strcmp(DTYPES[i].name, name))
            return DTYPES[i].bytes;
    return 0;
}

/* One tensor's object: dtype, shape and data_offsets, each once; other
 * fields are read through. */
static bool tensor_info(struct reader *r, struct sft_tensor *t)
{
    bool seen[3] = {false, false, false};
    if (!expect(r, '{', "a tensor's entry must be an object"))
        return false;
    if (!take(r, '}')) {
        do {
            char key[32];
            int n;
            uint64_t off[2];
            if (!string_into(r, key, sizeof key) || !expect(r, ':', "':' expected"))
                return false;
            const int k = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1 : !strcmp(key, "data_offsets") ? 2 : -1;
            if (k >= 0 && seen[k])
                return fail_at(r, "a tensor's field given twice");
            if (k >= 0)
                seen[k] = true;
            if (k == 0 && !string_into(r, t->dtype, sizeof t->dtype))
                return false;
            if (k == 1 && !wholes(r, t->shape, SFT_MAX_DIMS, &t->ndims, "shape: up to 8 whole numbers"))
                return false;
            if (k == 2 && !wholes(r, off, 2, &n, "data_offsets: [begin, end]"))
                return false;
            if (k == 2 && n != 2)
                return fail_at(r, "data_offsets: [begin, end]");
            if (k == 2)
                t->begin = off[0], t->end = off[1];
            if (k < 0 && !skip_value(r, 0))
                return false;
        } while (take(r, ','));
        if (!expect(r, '}', "',' or '}' expected in a tensor's entry"))
            return false;
    }
    if (!seen[0] || !seen[1] || !seen[2])
        return fail_at(r, "a tensor without its dtype, shape or data_offsets");
    return true;
}

static bool grow(struct sft_header *h, int *cap)
{
    if (h->count < *cap)
        return true;
    struct sft_tensor *t = realloc(h->tensors, (size_t)(*cap = *cap ? 2 * *cap : 64) * sizeof *t);
    if (!t)
        return false;
    h->tensors = t;
    return true;
}

/* The top-level object: tensors and "__metadata__", every name once. */
static bool header_object(struct reader *r, struct sft_header *h)
{
    int cap = 0;
    bool had_metadata = false;
    if (r->p >= r->end || *r->p != '{')  /* the reference allows nothing before it */
        return fail_at(r, "the header does not start with '{'");
    r->p++;
    if (take(r, '}'))
        return true;
    do {
        char name[SFT_MAX_NAME];
        if (!string_into(r, name, sizeof name) || !expect(r, ':', "':' expected"))
            return false;
        if (!strcmp(name, "__metadata__")) {
            if (had_metadata)
                return fail_at(r, "__metadata__ given twice");
            had_metadata = true;
            if (!metadata(r))
                return false;
            continue;
        }
        if (sft_find(h, name)) {
            r->failed = st_fail(ST_ERR_FORMAT, "%s %s: header: tensor '%s' is given twice", r->flag, r->path, name);
            return false;
        }
        if (!grow(h, &cap)) {
            r->failed = st_fail(ST_ERR_NOMEM, "%s %s: out of memory", r->flag, r->path);
            return false;
        }
        struct sft_tensor *t = &h->tensors[h->count];
        *t = (struct sft_tensor){0};
        snprintf(t->name, sizeof t->name, "%s", name);
        if (!tensor_info(r, t))
            return false;
        h->count++;
    } while (take(r, ','));
    if (!expect(r, '}', "',' or '}' expected"))
        return false;
    skip_ws(r);
    return r->p == r->end || fail_at(r, "bytes after the header's object");
}

/* --------------------------------------------------------------- rules -- */

/* A tensor's place in the data, for sorting by it (the reference sorts by
 * (begin, end)). */
struct span {
    uint64_t begin, end;
    int tensor;
};

static int by_offsets(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* A tensor's dtype is the format's and its bytes hold its shape. */
static st_status check_size(const struct sft_tensor *t, const char *flag, const char *path)
{
    const unsigned es = dtype_bytes(t->dtype);
    if (!es)
        return st_fail(ST_ERR_FORMAT, "%s %s: tensor '%s': dtype '%s' is not one of the format's", flag, path,
                       t->name, t->dtype);
    if (t->end < t->begin)
        return st_fail(ST_ERR_FORMAT, "%s %s: tensor '%s': data_offsets [%llu, %llu] run backwards", flag, path,
                       t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
    uint64_t bytes = es;
    for (int d = 0; d < t->ndims; d++)
        bytes = t->shape[d] && bytes > UINT64_MAX / t->shape[d] ? UINT64_MAX : bytes * t->shape[d];
    if (bytes != t->end - t->begin)
        return st_fail(ST_ERR_FORMAT, "%s %s: tensor '%s': data_offsets cover %llu bytes, its dtype and shape take "
                                      "%llu", flag, path, t->name, (unsigned long long)(t->end - t->begin),
                       (unsigned long long)bytes);
    return ST_OK;
}

/* Sorted by offset, the tensors tile the data: no gap, no overlap, to its end. */
static st_status check_tiling(const struct sft_header *h, const struct span *order, const char *flag,
                              const char *path)
{
    uint64_t at = 0;
    const struct sft_tensor *prev = NULL;
    for (int k = 0; k < h->count; k++) {
        const struct sft_tensor *t = &h->tensors[order[k].tensor];
        if (t->end > h->data_bytes)  /* before the gap it leaves: those bytes do not exist */
            return st_fail(ST_ERR_FORMAT, "%s %s: tensor '%s' (bytes %llu-%llu) runs past the data, which ends at "
                                          "byte %llu", flag, path, t->name, (unsigned long long)t->begin,
                           (unsigned long long)t->end, (unsigned long long)h->data_bytes);
        if (t->begin < at)
            return st_fail(ST_ERR_FORMAT, "%s %s: tensor '%s' (bytes %llu-%llu) overlaps '%s' (bytes %llu-%llu): "
                                          "each tensor's bytes are its own", flag, path, t->name,
                           (unsigned long long)t->begin, (unsigned long long)t->end, prev->name,
                           (unsigned long long)prev->begin, (unsigned long long)prev->end);
        if (t->begin > at)
            return st_fail(ST_ERR_FORMAT, "%s %s: bytes %llu-%llu of the data belong to no tensor (the gap "
                                          "before '%s')", flag, path, (unsigned long long)at,
                           (unsigned long long)t->begin, t->name);
        at = t->end;
        prev = t;
    }
    if (at != h->data_bytes)
        return st_fail(ST_ERR_FORMAT, "%s %s: the tensors end at byte %llu of the data, which runs to %llu: the "
                                      "offsets must cover it exactly", flag, path, (unsigned long long)at,
                       (unsigned long long)h->data_bytes);
    return ST_OK;
}

static st_status check_rules(const struct sft_header *h, const char *flag, const char *path)
{
    st_status st = ST_OK;
    for (int i = 0; i < h->count && st == ST_OK; i++)
        st = check_size(&h->tensors[i], flag, path);
    struct span *order = malloc(((size_t)h->count + 1) * sizeof *order);
    if (st == ST_OK && !order)
        st = st_fail(ST_ERR_NOMEM, "%s %s: out of memory", flag, path);
    if (st == ST_OK) {
        for (int i = 0; i < h->count; i++)
            order[i] = (struct span){h->tensors[i].begin, h->tensors[i].end, i};
        qsort(order, (size_t)h->count, sizeof *order, by_offsets);
        st = check_tiling(h, order, flag, path);
    }
    free(order);
    return st;
}

/* ---------------------------------------------------------------- file -- */

st_status sft_parse(const unsigned char *file, size_t size, const char *flag, const char *path,
                    struct sft_header *out)
{
    *out = (struct sft_header){0};
    uint64_t n;
    if (size < 8)
        return st_fail(ST_ERR_FORMAT, "%s %s: not a safetensors file (%zu bytes; it starts with an 8-byte length)",
                       flag, path, size);
    memcpy(&n, file, 8);  /* little-endian, as x86 */
    if (n > SFT_MAX_HEADER)
        return st_fail(ST_ERR_FORMAT, "%s %s: a header of %llu bytes, past the format's limit of 100,000,000", flag,
                       path, (unsigned long long)n);
    if (n > size - 8)
        return st_fail(ST_ERR_FORMAT, "%s %s: the header's length (%llu bytes) runs past the end of the file (%zu "
                                      "bytes)", flag, path, (unsigned long long)n, size);
    if (!utf8_valid(file + 8, (size_t)n))
        return st_fail(ST_ERR_FORMAT, "%s %s: the header is not UTF-8", flag, path);
    struct reader r = {(const char *)file + 8, (const char *)file + 8 + n, flag, path, (const char *)file + 8, ST_OK};
    out->data = file + 8 + n;
    out->data_bytes = size - 8 - n;
    st_status st = header_object(&r, out) ? check_rules(out, flag, path) : r.failed;
    if (st != ST_OK)
        sft_free(out);
    return st;
}

void sft_free(struct sft_header *h)
{
    free(h->tensors);
    *h = (struct sft_header){0};
}

const struct sft_tensor *sft_find(const struct sft_header *h, const char *name)
{
    for (int i = 0; i < h->count; i++)
        if (!strcmp(h->tensors[i].name, name))
            return &h->tensors[i];
    return NULL;
}
