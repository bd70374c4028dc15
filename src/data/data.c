/* Dataset readers, the shared decoded copy, the epoch order and batches. */
#define _GNU_SOURCE
#include "shmtrain/data.h"
#include "dataset_internal.h"
#include "published.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SHARED_MAGIC 0x5354444154413032ull /* "STDATA02" */

struct shared_header {
    uint64_t magic, n;
    int32_t c, h, w, max_label;
    char source[224], label_source[224];
};


/* ------------------------------------------------------------- reading -- */

/* Up to `len` bytes into buf, *done of them read; an error only for
 * corrupt data (the caller judges a short read). */
static st_status read_upto(gzFile f, void *buf, size_t len, size_t *done, const char *path, const char *what)
{
    *done = 0;
    while (*done < len) {
        unsigned chunk = len - *done > (1u << 30) ? (1u << 30) : (unsigned)(len - *done);
        int r = gzread(f, (char *)buf + *done, chunk), err = Z_OK;
        const char *msg = r <= 0 ? gzerror(f, &err) : NULL;
        if (r < 0 || (r == 0 && err != Z_OK && err != Z_STREAM_END))
            return st_fail(ST_ERR_FORMAT, "%s: corrupt gzip data while reading %s: %s", path, what, msg);
        if (r == 0)
            break;
        *done += (size_t)r;
    }
    return ST_OK;
}

static st_status read_exact(gzFile f, void *buf, size_t len, const char *path, const char *what)
{
    size_t done;
    st_status st = read_upto(f, buf, len, &done, path, what);
    if (st == ST_OK && done < len)
        st = st_fail(ST_ERR_FORMAT, "%s: truncated: expected %zu bytes of %s, found %zu", path, len, what, done);
    return st;
}

/* `len` bytes a header claims, into a buffer that grows as they arrive: a
 * file claiming 20 GB in a few bytes (found by fuzz_idx) costs at most
 * twice what it holds before it is refused as truncated. */
static st_status read_claimed(gzFile f, uint8_t **out, size_t len, const char *path, const char *what)
{
    size_t cap = len < (1u << 20) ? len : (1u << 20), done = 0, got = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    st_status st = buf ? ST_OK : st_fail(ST_ERR_NOMEM, "%s: out of memory for %s", path, what);
    while (st == ST_OK && done < len) {
        if (done == cap) {
            cap = len - cap < cap ? len : 2 * cap;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                st = st_fail(ST_ERR_NOMEM, "%s: out of memory for %zu bytes of %s", path, len, what);
                break;
            }
            buf = grown;
        }
        if ((st = read_upto(f, buf + done, cap - done, &got, path, what)) != ST_OK)
            break;
        done += got;
        if (done < cap)
            st = st_fail(ST_ERR_FORMAT, "%s: truncated: expected %zu bytes of %s, found %zu", path, len, what, done);
    }
    if (st != ST_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return ST_OK;
}

static st_status open_gz(gzFile *f, const char *path)
{
    *f = gzopen(path, "rb");
    if (!*f)
        return st_fail(ST_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    return ST_OK;
}

/* IDX header: two zero bytes, type, dimension count, then big-endian sizes. */
static st_status idx_header(gzFile f, const char *path, int want_min, int want_max, uint32_t *dims, int *ndims)
{
    unsigned char magic[4];
    st_status st = read_exact(f, magic, 4, path, "the IDX magic");
    if (st != ST_OK)
        return st;
    if (magic[0] || magic[1])
        return st_fail(ST_ERR_FORMAT, "%s: not an IDX file (magic %02x%02x%02x%02x)", path, magic[0], magic[1],
                       magic[2], magic[3]);
    if (magic[2] != 0x08)
        return st_fail(ST_ERR_FORMAT, "%s: IDX element type 0x%02x is not supported (only unsigned bytes, "
                                      "0x08)", path, magic[2]);
    *ndims = magic[3];
    if (*ndims < want_min || *ndims > want_max)
    {
        if (want_min == want_max)
            return st_fail(ST_ERR_FORMAT, "%s: IDX file has %d dimensions, expected %d", path, *ndims, want_min);
        return st_fail(ST_ERR_FORMAT, "%s: IDX file has %d dimensions, expected %d to %d", path, *ndims, want_min,
                       want_max);
    }
    unsigned char raw[16];
    if ((st = read_exact(f, raw, (size_t)*ndims * 4, path, "the IDX dimensions")) != ST_OK)
        return st;
    for (int i = 0; i < *ndims; i++) {
        dims[i] = (uint32_t)raw[4 * i] << 24 | (uint32_t)raw[4 * i + 1] << 16 | (uint32_t)raw[4 * i + 2] << 8 |
                  raw[4 * i + 3];
        if (dims[i] == 0 || dims[i] > (1u << 28))
            return st_fail(ST_ERR_FORMAT, "%s: IDX dimension %d is %u", path, i, dims[i]);
    }
    return ST_OK;
}

/* An IDX file ends with its last item: trailing bytes mean a wrong header
 * or two files run together, and silently training on part of it hides that. */
static st_status expect_end(gzFile f, const char *path, uint32_t items)
{
    unsigned char extra[4096];
    size_t n = 0;
    int r;
    while ((r = gzread(f, extra, sizeof extra)) > 0)
        n += (size_t)r;
    if (r < 0) {
        int err;
        return st_fail(ST_ERR_FORMAT, "%s: corrupt gzip data after its %u items: %s", path, items, gzerror(f, &err));
    }
    if (n)
        return st_fail(ST_ERR_FORMAT, "%s: %zu bytes after the last of its %u items (its header says %u; an IDX "
                                      "file ends with its data)", path, n, items, items);
    return ST_OK;
}

/* The images and labels are allocated here when `sized` (their size known
 * from the file's), else left for read_claimed. */
st_status alloc_dataset(st_dataset **out, size_t n, int c, int h, int w, const char *source, bool sized)
{
    if ((size_t)c * h * w > (1u << 24) || n > (1u << 30))
        return st_fail(ST_ERR_FORMAT, "%s: %zu samples of %dx%dx%d is too large", source, n, c, h, w);
    st_dataset *d = calloc(1, sizeof *d);
    if (!d)
        return st_fail(ST_ERR_NOMEM, "%s: out of memory", source);
    d->n = n;
    d->c = c;
    d->h = h;
    d->w = w;
    snprintf(d->source, sizeof d->source, "%s", source);
    snprintf(d->label_source, sizeof d->label_source, "%s", source);
    if (!sized) {
        *out = d;
        return ST_OK;
    }
    d->images = malloc(n * (size_t)c * h * w);
    d->labels = malloc(n);
    if (!d->images || !d->labels) {
        st_dataset_destroy(d);
        return st_fail(ST_ERR_NOMEM, "%s: out of memory for %zu samples", source, n);
    }
    *out = d;
    return ST_OK;
}

void find_max_label(st_dataset *d)
{
    d->max_label = 0;
    for (size_t i = 0; i < d->n; i++)
        d->max_label = d->labels[i] > d->max_label ? d->labels[i] : d->max_label;
}

st_status st_dataset_load_idx(st_dataset **out, const char *images_path, const char *labels_path)
{
    *out = NULL;
    gzFile fi = NULL, fl = NULL;
    st_dataset *d = NULL;
    uint32_t di[4], dl[4];
    int ni, nl;
    st_status st;
    if ((st = open_gz(&fi, images_path)) != ST_OK || (st = open_gz(&fl, labels_path)) != ST_OK)
        goto out;
    if ((st = idx_header(fi, images_path, 3, 4, di, &ni)) != ST_OK ||
        (st = idx_header(fl, labels_path, 1, 1, dl, &nl)) != ST_OK)
        goto out;
    if (di[0] != dl[0]) {
        st = st_fail(ST_ERR_FORMAT, "%s has %u images but %s has %u labels", images_path, di[0], labels_path,
                     dl[0]);
        goto out;
    }
    int c = ni == 4 ? (int)di[1] : 1, h = (int)di[ni - 2], w = (int)di[ni - 1];
    if ((st = alloc_dataset(&d, di[0], c, h, w, images_path, false)) != ST_OK)
        goto out;
    snprintf(d->label_source, sizeof d->label_source, "%s", labels_path);
    if ((st = read_claimed(fi, &d->images, d->n * (size_t)c * h * w, images_path, "images")) != ST_OK ||
        (st = read_claimed(fl, &d->labels, d->n, labels_path, "labels")) != ST_OK ||
        (st = expect_end(fi, images_path, di[0])) != ST_OK || (st = expect_end(fl, labels_path, dl[0])) != ST_OK)
        goto out;
    find_max_label(d);
    *out = d;
    d = NULL;
out:
    if (fi)
        gzclose(fi);
    if (fl)
        gzclose(fl);
    st_dataset_destroy(d);
    return st;
}

st_status st_dataset_load_cifar(st_dataset **out, const char *const *paths, int npaths, bool cifar100)
{
    *out = NULL;
    const size_t label_bytes = cifar100 ? 2 : 1, image = 3 * 32 * 32, record = label_bytes + image;
    size_t total = 0;
    struct stat sb;
    for (int i = 0; i < npaths; i++) {
        if (stat(paths[i], &sb) != 0)
            return st_fail(ST_ERR_IO, "%s: cannot open: %s", paths[i], strerror(errno));
        if (sb.st_size == 0 || (size_t)sb.st_size % record != 0)
            return st_fail(ST_ERR_FORMAT, "%s: %lld bytes is not a whole number of %zu-byte CIFAR-%s records",
                           paths[i], (long long)sb.st_size, record, cifar100 ? "100" : "10");
        total += (size_t)sb.st_size / record;
    }
    st_dataset *d = NULL;
    st_status st = alloc_dataset(&d, total, 3, 32, 32, npaths ? paths[0] : "cifar", true);
    if (st != ST_OK)
        return st;
    size_t at = 0;
    uint8_t rec[2 + 3 * 32 * 32];
    for (int i = 0; i < npaths && st == ST_OK; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) {
            st = st_fail(ST_ERR_IO, "%s: cannot open: %s", paths[i], strerror(errno));
            break;
        }
        while (st == ST_OK && fread(rec, 1, record, f) == record) {
            int label = rec[label_bytes - 1];
            if (label > (cifar100 ? 99 : 9))
                st = st_fail(ST_ERR_FORMAT, "%s: record %zu has label %d, beyond CIFAR-%s's classes", paths[i],
                             at, label, cifar100 ? "100" : "10");
            d->labels[at] = (uint8_t)label;
            memcpy(d->images + at * image, rec + label_bytes, image);
            at++;
        }
        fclose(f);
    }
    if (st == ST_OK && at != total)
        st = st_fail(ST_ERR_IO, "%s: read %zu of %zu records", d->source, at, total);
    if (st != ST_OK) {
        st_dataset_destroy(d);
        return st;
    }
    find_max_label(d);
    *out = d;
    return ST_OK;
}

st_status st_dataset_split(st_dataset *d, size_t n, uint64_t seed, st_dataset **held)
{
    *held = NULL;
    if (n == 0 || n >= d->n || d->map)
        return st_fail(ST_ERR_INVALID, "%s: cannot hold %zu of its %zu samples out", d->source, n, d->n);
    const size_t bytes = (size_t)d->c * d->h * d->w;
    uint32_t *order = malloc(d->n * sizeof *order);
    uint8_t *out = calloc(d->n, 1);
    st_status st = order && out ? alloc_dataset(held, n, d->c, d->h, d->w, d->source, true)
                                : st_fail(ST_ERR_NOMEM, "%s: out of memory", d->source);
    if (st == ST_OK) {
        snprintf((*held)->label_source, sizeof (*held)->label_source, "%s", d->label_source);
        st_epoch_order(order, d->n, seed, 0);
        for (size_t k = 0; k < n; k++)
            out[order[k]] = 1;
        size_t kept = 0, taken = 0;  /* both in the original order */
        for (size_t i = 0; i < d->n; i++) {
            st_dataset *to = out[i] ? *held : d;
            const size_t at = out[i] ? taken++ : kept++;
            memmove(to->images + at * bytes, d->images + i * bytes, bytes);
            to->labels[at] = d->labels[i];
        }
        d->n = kept;
        find_max_label(d);
        find_max_label(*held);
    }
    free(order);
    free(out);
    return st;
}

void st_dataset_truncate(st_dataset *d, size_t n)
{
    if (n && n < d->n) {
        d->n = n;
        find_max_label(d);
    }
}

void st_dataset_destroy(st_dataset *d)
{
    if (!d)
        return;
    if (d->map) {
        munmap(d->map, d->map_bytes);
    } else {
        free(d->images);
        free(d->labels);
    }
    free(d);
}

size_t st_dataset_size(const st_dataset *d) { return d->n; }
int st_dataset_max_label(const st_dataset *d) { return d->max_label; }
const char *st_dataset_source(const st_dataset *d) { return d->source; }
const char *st_dataset_label_source(const st_dataset *d) { return d->label_source; }
const uint8_t *st_dataset_image(const st_dataset *d, size_t i) { return d->images + i * (size_t)d->c * d->h * d->w; }
int st_dataset_label(const st_dataset *d, size_t i) { return d->labels[i]; }

void st_dataset_shape(const st_dataset *d, int *c, int *h, int *w)
{
    *c = d->c;
    *h = d->h;
    *w = d->w;
}

/* --------------------------------------------------------------- sharing -- */

static size_t shared_bytes(const st_dataset *d)
{
    return sizeof(struct shared_header) + d->n * (size_t)d->c * d->h * d->w + d->n;
}

static void point_into(st_dataset *d, void *map, size_t bytes)
{
    d->map = map;
    d->map_bytes = bytes;
    d->images = (uint8_t *)map + sizeof(struct shared_header);
    d->labels = d->images + d->n * (size_t)d->c * d->h * d->w;
}

st_status st_dataset_share(st_dataset *d, const char *name)
{
    const size_t bytes = shared_bytes(d);
    void *map;
    st_status st = published_create(name, bytes, "dataset", &map);
    if (st != ST_OK)
        return st;
    struct shared_header *hd = map;
    hd->n = d->n;
    hd->c = d->c;
    hd->h = d->h;
    hd->w = d->w;
    hd->max_label = d->max_label;
    snprintf(hd->source, sizeof hd->source, "%s", d->source);
    snprintf(hd->label_source, sizeof hd->label_source, "%s", d->label_source);
    memcpy((uint8_t *)map + sizeof *hd, d->images, d->n * (size_t)d->c * d->h * d->w);
    memcpy((uint8_t *)map + sizeof *hd + d->n * (size_t)d->c * d->h * d->w, d->labels, d->n);
    if ((st = published_seal(name, map, bytes, SHARED_MAGIC)) != ST_OK)
        return st;
    if (d->map) {  /* shared already (attached): this copy replaces that mapping */
        munmap(d->map, d->map_bytes);
    } else {
        free(d->images);
        free(d->labels);
    }
    point_into(d, map, bytes);
    return ST_OK;
}

st_status st_dataset_attach(st_dataset **out, const char *name)
{
    *out = NULL;
    void *map;
    size_t size;
    st_status st = published_attach(name, sizeof(struct shared_header), "dataset", SHARED_MAGIC, &map, &size);
    if (st != ST_OK)
        return st;
    const struct shared_header *hd = map;
    st_dataset *d = calloc(1, sizeof *d);
    if (!d) {
        munmap(map, size);
        return st_fail(ST_ERR_NOMEM, "data: out of memory");
    }
    d->n = hd->n;
    d->c = hd->c;
    d->h = hd->h;
    d->w = hd->w;
    d->max_label = hd->max_label;
    snprintf(d->source, sizeof d->source, "%s", hd->source);
    snprintf(d->label_source, sizeof d->label_source, "%s", hd->label_source);
    if (shared_bytes(d) != size) {
        free(d);
        munmap(map, size);
        return st_fail(ST_ERR_FORMAT, "data: %s has the wrong size", name);
    }
    point_into(d, map, size);
    *out = d;
    return ST_OK;
}

st_status st_dataset_unlink_shared(const char *name)
{
    if (shm_unlink(name) != 0 && errno != ENOENT)
        return st_fail(ST_ERR_SYS, "data: shm_unlink(%s): %s", name, strerror(errno));
    return ST_OK;
}

/* ------------------------------------------------------ order, batches -- */

void st_dataset_stats(const st_dataset *d, float *mean, float *std, int channels)
{
    const size_t plane = (size_t)d->h * d->w;
    for (int c = 0; c < channels && c < d->c; c++) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < d->n; i++) {
            const uint8_t *p = st_dataset_image(d, i) + (size_t)c * plane;
            uint64_t a = 0, b = 0;
            for (size_t k = 0; k < plane; k++) {
                a += p[k];
                b += (uint64_t)p[k] * p[k];
            }
            s += (double)a;
            s2 += (double)b;
        }
        double cnt = (double)d->n * plane, m = s / cnt / 255.0;
        double var = s2 / cnt / (255.0 * 255.0) - m * m;
        mean[c] = (float)m;
        std[c] = (float)(var > 1e-12 ? sqrt(var) : 1.0);
    }
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void st_epoch_order(uint32_t *order, size_t n, uint64_t seed, uint64_t epoch)
{
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    uint64_t s = mix(seed * 0x100000001b3ull + epoch);
    for (size_t i = n; i > 1; i--) {
        s = mix(s);
        size_t j = (size_t)(s % i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

static void normalize_plane(const uint8_t *restrict in, float *restrict out, size_t n, float inv, float shift)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] * inv - shift;
}

void sample_fill(const uint8_t *img, int C, int H, int W, size_t idx, const st_batch_spec *s, float *out)
{
    const size_t plane = (size_t)H * W;
    int dx = 0, dy = 0;
    bool flip = false;
    if (s->augment) {
        uint64_t r = mix(s->seed ^ mix(s->epoch * 1000003u + idx));
        dx = (int)(r % 9) - 4;
        dy = (int)((r >> 8) % 9) - 4;
        flip = (r >> 16) & 1;
    }
    for (int c = 0; c < C; c++) {
        const float inv = 1.0f / (255.0f * s->std[c]), shift = s->mean[c] / s->std[c];
        if (!s->augment) {  /* a straight pass that vectorises (this loop was 7% of mlp's time) */
            normalize_plane(img + c * plane, out + c * plane, plane, inv, shift);
            continue;
        }
        for (int i = 0; i < H; i++) {
            int si = i + dy;
            for (int j = 0; j < W; j++) {
                int sj = (flip ? W - 1 - j : j) + dx;
                uint8_t v = (si >= 0 && si < H && sj >= 0 && sj < W) ? img[c * plane + (size_t)si * W + sj] : 0;
                out[c * plane + (size_t)i * W + j] = v * inv - shift;
            }
        }
    }
}

size_t batch_sample(const st_batch_spec *s, int k, size_t n, bool *real)
{
    const size_t pos = s->first + (size_t)s->rank + (size_t)k * (size_t)s->world;
    *real = pos < n;
    const size_t idx = pos % n;
    return s->order ? s->order[idx] : idx;
}

void st_batch_fill(const st_dataset *d, const st_batch_spec *s, float *x, int *labels, int *valid)
{
    const size_t sample = (size_t)d->c * d->h * d->w;
    int real = 0;
    for (int k = 0; k < s->batch; k++) {
        bool counted;
        const size_t idx = batch_sample(s, k, d->n, &counted);
        real += counted;
        labels[k] = d->labels[idx];
        sample_fill(st_dataset_image(d, idx), d->c, d->h, d->w, idx, s, x + (size_t)k * sample);
    }
    if (valid)
        *valid = real > 0 ? real : 0;
}
