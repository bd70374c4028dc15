/* Text corpora as token streams: reading files and directories, the
 * vocabulary, the shared copy, and the training and evaluation windows. */
#define _GNU_SOURCE
#include "shmtrain/text.h"
#include "published.h"
#include "text_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARED_MAGIC 0x3254584554484d53ull /* "SMHTEXT2": 16-bit ids */

struct shared_text {
    uint64_t magic, n[2];
    uint32_t vocab, alphabet_len;
    uint8_t alphabet[256];
    char source[2][256];
};

/* ------------------------------------------------------------ reading -- */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static st_status append_file(struct buf *b, const char *path, bool from_dir, bool *skipped)
{
    *skipped = false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_fail(ST_ERR_IO, "--text %s: cannot open: %s", path, strerror(errno));
    const size_t start = b->n;
    st_status st = ST_OK;
    for (;;) {
        if (b->cap - b->n < 65536) {
            size_t cap = b->cap ? b->cap * 2 : 1 << 20;
            uint8_t *p = realloc(b->p, cap);
            if (!p) {
                st = st_fail(ST_ERR_NOMEM, "--text %s: out of memory", path);
                break;
            }
            b->p = p, b->cap = cap;
        }
        size_t got = fread(b->p + b->n, 1, b->cap - b->n, f);
        b->n += got;
        if (got == 0) {
            if (ferror(f))
                st = st_fail(ST_ERR_IO, "--text %s: read failed: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st == ST_OK && memchr(b->p + start, 0, b->n - start)) {
        if (!from_dir)
            return st_fail(ST_ERR_FORMAT, "--text %s: holds NUL bytes: not a text file", path);
        b->n = start;  /* a directory's binary file is skipped, not an error */
        *skipped = true;
    }
    return st;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* A directory's regular text files in name order. */
static st_status append_dir(struct buf *b, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return st_fail(ST_ERR_IO, "--text %s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t count = 0, cap = 0;
    st_status st = ST_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat"))
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            char **v = realloc(names, cap * sizeof *v);
            if (!v) {
                st = st_fail(ST_ERR_NOMEM, "--text %s: out of memory", dir);
                break;
            }
            names = v;
        }
        if (!(names[count] = strdup(e->d_name))) {
            st = st_fail(ST_ERR_NOMEM, "--text %s: out of memory", dir);
            break;
        }
        count++;
    }
    closedir(d);
    if (count)
        qsort(names, count, sizeof *names, by_name);
    int used = 0;
    for (size_t i = 0; i < count && st == ST_OK; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;  /* links (fortune's .u8 twins) and the rest */
        bool skipped;
        st = append_file(b, path, true, &skipped);
        used += !skipped;
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
    if (st == ST_OK && used == 0)
        st = st_fail(ST_ERR_FORMAT, "--text %s: no text files in this directory", dir);
    return st;
}

static st_status read_source(struct buf *b, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return st_fail(ST_ERR_IO, "--text %s: %s", path, strerror(errno));
    bool skipped;
    st_status st = S_ISDIR(sb.st_mode) ? append_dir(b, path) : append_file(b, path, false, &skipped);
    if (st == ST_OK && b->n == 0)
        st = st_fail(ST_ERR_FORMAT, "--text %s: empty", path);
    return st;
}

/* ------------------------------------------------------------ loading -- */

static st_status tokenize(st_text *t, struct buf *src[2], st_text_tokens tokens)
{
    int id_of[256];
    bool seen[256] = {0};
    if (tokens == ST_TEXT_BYTES) {
        for (int c = 0; c < 256; c++)
            seen[c] = true;
    } else {
        for (size_t i = 0; i < src[0]->n; i++)
            seen[src[0]->p[i]] = true;
    }
    t->vocab = 0;
    for (int c = 0; c < 256; c++) {
        id_of[c] = seen[c] ? t->vocab : -1;
        if (seen[c])
            t->alphabet[t->vocab++] = (uint8_t)c;
    }
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < src[s]->n; i++) {
            const int id = id_of[src[s]->p[i]];
            if (id < 0)
                return st_fail(ST_ERR_FORMAT, "--text %s: byte 0x%02x at offset %zu does not occur in the training "
                                              "text %s (use --tokens bytes)", t->source[1], src[s]->p[i], i,
                               t->source[0]);
            src[s]->p[i] = (uint8_t)id;
        }
    return ST_OK;
}

st_status st_text_load(st_text **out, const char *const *paths, int npaths, st_text_tokens tokens)
{
    *out = NULL;
    if (npaths < 1 || npaths > 2)
        return st_fail(ST_ERR_INVALID, "--text: give one source (split 90/10) or two (training, validation), not %d",
                       npaths);
    st_text *t = calloc(1, sizeof *t);
    struct buf a = {0}, b = {0}, *src[2] = {&a, &b};
    if (!t)
        return st_fail(ST_ERR_NOMEM, "--text: out of memory");
    st_status st = read_source(&a, paths[0]);
    if (st == ST_OK && npaths == 2)
        st = read_source(&b, paths[1]);
    if (st != ST_OK)
        goto fail;
    snprintf(t->source[0], sizeof t->source[0], "%s", paths[0]);
    snprintf(t->source[1], sizeof t->source[1], "%s", paths[npaths - 1]);
    if (npaths == 1) {  /* the last 10% validates; the vocabulary is the whole file's, as nanoGPT's */
        const size_t cut = a.n - a.n / 10;
        if (!(b.p = malloc(a.n - cut + 1)))
            goto nomem;
        b.n = a.n - cut;
        memcpy(b.p, a.p + cut, b.n);
        st = tokenize(t, src, tokens);
        a.n = cut;
    } else {
        st = tokenize(t, src, tokens);
    }
    if (st != ST_OK)
        goto fail;
    /* Validation first, training last, nothing after: a read past the
     * training split's end is past the allocation (an ASan report), not a
     * silent validation token. */
    if (!(t->own = malloc((a.n + b.n ? a.n + b.n : 1) * sizeof *t->own)))
        goto nomem;
    for (size_t i = 0; i < b.n; i++)
        t->own[i] = b.p[i];
    for (size_t i = 0; i < a.n; i++)
        t->own[b.n + i] = a.p[i];
    t->alphabet_len = t->vocab;
    t->flag[0] = t->flag[1] = "--text";
    t->ids[1] = t->own, t->n[1] = b.n;
    t->ids[0] = t->own + b.n, t->n[0] = a.n;
    free(a.p);
    free(b.p);
    *out = t;
    return ST_OK;
nomem:
    st = st_fail(ST_ERR_NOMEM, "--text %s: out of memory", paths[0]);
fail:
    free(a.p);
    free(b.p);
    st_text_destroy(t);
    return st;
}

void st_text_destroy(st_text *t)
{
    if (!t)
        return;
    free(t->own);
    if (t->map)
        munmap(t->map, t->map_bytes);
    for (int s = 0; s < 2; s++)
        if (t->file_map[s])
            munmap(t->file_map[s], t->file_bytes[s]);
    free(t);
}

size_t st_text_tokens_in(const st_text *t, int split) { return t->n[split]; }
const uint16_t *st_text_ids(const st_text *t, int split) { return t->ids[split]; }
int st_text_vocab(const st_text *t) { return t->vocab; }
int st_text_alphabet_len(const st_text *t) { return t->alphabet_len; }
const uint8_t *st_text_alphabet(const st_text *t) { return t->alphabet; }
bool st_text_is_mapped(const st_text *t) { return t->file_map[0] != NULL; }
const char *st_text_source(const st_text *t, int split) { return t->source[split]; }

st_status st_text_check(const st_text *t, int context, long windows)
{
    static const char *const what[2] = {"training", "validation"};
    for (int s = 0; s < 2; s++)
        if (t->n[s] < (size_t)context + 1)
            return st_fail(ST_ERR_FORMAT, "%s %s: the %s split has %zu tokens, fewer than one window of "
                                          "context + 1 = %d", t->flag[s], t->source[s], what[s], t->n[s], context + 1);
    if (t->n[0] - (size_t)context < (size_t)windows)
        return st_fail(ST_ERR_FORMAT, "%s %s: %zu window starts are fewer than one global batch (%ld windows)",
                       t->flag[0], t->source[0], t->n[0] - (size_t)context, windows);
    return ST_OK;
}

/* ------------------------------------------------------------ sharing -- */

static void point_into(st_text *t, void *map, size_t bytes)
{
    const struct shared_text *h = map;
    t->map = map;
    t->map_bytes = bytes;
    t->n[0] = h->n[0];
    t->n[1] = h->n[1];
    t->vocab = (int)h->vocab;
    t->alphabet_len = (int)h->alphabet_len;
    t->flag[0] = t->flag[1] = "--text";  /* token files are mapped, not shared this way */
    memcpy(t->alphabet, h->alphabet, sizeof t->alphabet);
    memcpy(t->source, h->source, sizeof t->source);
    t->ids[0] = (uint16_t *)((uint8_t *)map + sizeof *h);
    t->ids[1] = t->ids[0] + h->n[0];
}

st_status st_text_share(st_text *t, const char *name)
{
    const size_t bytes = sizeof(struct shared_text) + (t->n[0] + t->n[1]) * sizeof(uint16_t);
    void *map;
    st_status st = published_create(name, bytes, "text", &map);
    if (st != ST_OK)
        return st;
    struct shared_text *h = map;
    h->n[0] = t->n[0];
    h->n[1] = t->n[1];
    h->vocab = (uint32_t)t->vocab;
    h->alphabet_len = (uint32_t)t->alphabet_len;
    memcpy(h->alphabet, t->alphabet, sizeof h->alphabet);
    memcpy(h->source, t->source, sizeof h->source);
    uint16_t *ids = (uint16_t *)((uint8_t *)map + sizeof *h);
    memcpy(ids, t->ids[0], t->n[0] * sizeof *ids);
    memcpy(ids + t->n[0], t->ids[1], t->n[1] * sizeof *ids);
    if ((st = published_seal(name, map, bytes, SHARED_MAGIC)) != ST_OK)
        return st;
    free(t->own);
    t->own = NULL;
    if (t->map)  /* shared already (attached): this copy replaces that mapping */
        munmap(t->map, t->map_bytes);
    point_into(t, map, bytes);
    return ST_OK;
}

st_status st_text_attach(st_text **out, const char *name)
{
    *out = NULL;
    void *map;
    size_t size;
    st_status st = published_attach(name, sizeof(struct shared_text), "text", SHARED_MAGIC, &map, &size);
    if (st != ST_OK)
        return st;
    const struct shared_text *h = map;
    st_text *t = calloc(1, sizeof *t);
    if (sizeof *h + (h->n[0] + h->n[1]) * sizeof(uint16_t) != size || !t) {
        munmap(map, size);
        free(t);
        return st_fail(ST_ERR_FORMAT, "text: %s is not a complete shared text", name);
    }
    point_into(t, map, size);
    *out = t;
    return ST_OK;
}

/* ------------------------------------------------------------ windows -- */

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void window(const uint16_t *ids, size_t start, int context, int32_t *x, int *y)
{
    for (int i = 0; i < context; i++) {
        x[i] = ids[start + (size_t)i];
        y[i] = ids[start + (size_t)i + 1];
    }
}

st_status st_text_train_batch(const st_text *t, uint64_t seed, uint64_t step, int world, int rank, int batch,
                              int context, int32_t *x, int *y)
{
    const size_t starts = t->n[0] - (size_t)context, global = (size_t)world * batch;
    uint64_t s = seed * 0xd1342543de82ef95ull ^ (step + 1) * 0x9e3779b97f4a7c15ull;
    /* The starts drawn so far, in an open-addressing set (start + 1; 0 is
     * empty): a global batch of thousands of windows stays linear. */
    size_t cap = 16;
    while (cap < 2 * global)
        cap *= 2;
    size_t *seen = calloc(cap, sizeof *seen);
    if (!seen)
        return st_fail(ST_ERR_NOMEM, "text: out of memory for a global batch of %zu windows", global);
    for (size_t k = 0; k < global; k++) {
        size_t start, at;
        do {  /* distinct within the global batch (st_text_check: enough starts) */
            start = (size_t)(mix(&s) % starts);
            at = (size_t)((start * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
            while (seen[at] && seen[at] != start + 1)
                at = (at + 1) & (cap - 1);
        } while (seen[at]);
        seen[at] = start + 1;
        if (k % (size_t)world == (size_t)rank) {
            const size_t mine = k / (size_t)world;
            window(t->ids[0], start, context, x + mine * context, y + mine * context);
        }
    }
    free(seen);
    return ST_OK;
}

size_t st_text_eval_windows(const st_text *t, int context, size_t cap)
{
    const size_t all = (t->n[1] - 1) / (size_t)context;
    return cap && cap < all ? cap : all;
}

void st_text_eval_batch(const st_text *t, size_t first, size_t count, int world, int rank, int batch, int context,
                        int32_t *x, int *y, int *valid)
{
    int real = 0;
    for (int i = 0; i < batch; i++) {
        size_t k = first + (size_t)rank + (size_t)i * world;
        if (k < count)
            real++;
        else
            k = count - 1;
        window(t->ids[1], k * (size_t)context, context, x + (size_t)i * context, y + (size_t)i * context);
    }
    *valid = real;
}
