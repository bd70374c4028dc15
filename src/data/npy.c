/* NumPy arrays (`np.save`'s .npy, format versions 1 to 3) as a dataset:
 * images uint8 or float32, N x H x W, N x H x W x C or N x C x H x W;
 * labels of any integer type, N. */
#define _GNU_SOURCE
#include "dataset_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "little-endian arrays ('<' in their descr) are read here in place"
#endif

enum { MAX_DIMS = 4 };

struct npy {
    const char *flag, *path;
    char descr[8];              /* '|u1', '<f4', '<i8', ... */
    int ndims;
    size_t dims[MAX_DIMS], count;
    long data_at;               /* file offset of the first element */
};

static st_status bad(const struct npy *a, const char *what)
{
    return st_fail(ST_ERR_FORMAT, "%s %s: %s", a->flag, a->path, what);
}

/* The header's dict, as np.save writes it:
 * {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), } */
static st_status parse_dict(struct npy *a, const char *dict)
{
    const char *d = strstr(dict, "'descr':"), *f = strstr(dict, "'fortran_order':"), *s = strstr(dict, "'shape':");
    if (!d || !f || !s)
        return bad(a, "its header lacks 'descr', 'fortran_order' or 'shape': not what np.save writes");
    if (sscanf(d + 8, " '%7[^']'", a->descr) != 1)
        return bad(a, "its header's 'descr' is not a simple type (a structured array?)");
    f += 16;
    f += strspn(f, " ");
    if (!strncmp(f, "True", 4))
        return bad(a, "Fortran order: save np.ascontiguousarray(x), which is C order");
    if (strncmp(f, "False", 5))
        return bad(a, "its header's 'fortran_order' is neither True nor False");
    s = strchr(s, '(');
    if (!s)
        return bad(a, "its header's 'shape' is not a tuple");
    a->ndims = 0;
    a->count = 1;
    for (s++;;) {
        s += strspn(s, " ,");
        if (*s == ')')
            break;
        char *end;
        errno = 0;
        const unsigned long long v = strtoull(s, &end, 10);
        if (end == s || errno || a->ndims == MAX_DIMS || v > (1ull << 40))
            return bad(a, "its header's 'shape' is not a tuple of at most 4 sizes");
        a->dims[a->ndims++] = (size_t)v;
        a->count *= (size_t)v;
        s = end;
    }
    return ST_OK;
}

static st_status read_header(struct npy *a, FILE *f)
{
    unsigned char pre[10];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6))
        return bad(a, "not a .npy file (no \\x93NUMPY magic)");
    const int major = pre[6];
    if (major < 1 || major > 3)
        return bad(a, "unknown .npy format version (1 to 3 are known)");
    size_t len;
    if (major == 1) {
        if (fread(pre + 8, 1, 2, f) != 2)
            return bad(a, "truncated header");
        len = pre[8] | (size_t)pre[9] << 8;
    } else {
        unsigned char l4[4];
        if (fread(l4, 1, 4, f) != 4)
            return bad(a, "truncated header");
        len = l4[0] | (size_t)l4[1] << 8 | (size_t)l4[2] << 16 | (size_t)l4[3] << 24;
    }
    if (len > (1u << 20))
        return bad(a, "its header claims more than 1 MiB");
    char *dict = malloc(len + 1);
    if (!dict)
        return st_fail(ST_ERR_NOMEM, "%s %s: out of memory", a->flag, a->path);
    st_status st = fread(dict, 1, len, f) == len ? ST_OK : bad(a, "truncated header");
    dict[len] = '\0';
    if (st == ST_OK)
        st = parse_dict(a, dict);
    free(dict);
    a->data_at = ftell(f);
    return st;
}

static size_t item_bytes(const char *descr)
{
    static const struct {
        const char *descr;
        size_t bytes;
    } known[] = {{"|u1", 1}, {"|i1", 1}, {"<u2", 2}, {"<i2", 2}, {"<u4", 4},
                 {"<i4", 4}, {"<i8", 8}, {"<u8", 8}, {"<f4", 4}, {"<f8", 8}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(known[i].descr, descr))
            return known[i].bytes;
    return 0;
}

/* Header checked, the data's exact length present: a file with more or
 * fewer bytes than its shape says is not the array it claims to be. */
static st_status open_array(struct npy *a, FILE **f)
{
    if (!(*f = fopen(a->path, "rb")))
        return st_fail(ST_ERR_IO, "%s %s: cannot open: %s", a->flag, a->path, strerror(errno));
    st_status st = read_header(a, *f);
    struct stat sb;
    if (st == ST_OK && fstat(fileno(*f), &sb) != 0)
        st = st_fail(ST_ERR_IO, "%s %s: fstat: %s", a->flag, a->path, strerror(errno));
    const size_t item = st == ST_OK ? item_bytes(a->descr) : 0;
    if (st == ST_OK && !item)
        st = st_fail(ST_ERR_FORMAT, "%s %s: dtype '%s' is not one of uint8, float32 (images) or an integer "
                                    "type (labels)", a->flag, a->path, a->descr);
    if (st == ST_OK && (size_t)sb.st_size - (size_t)a->data_at != a->count * item)
        st = st_fail(ST_ERR_FORMAT, "%s %s: its shape needs %zu bytes of data, the file holds %lld", a->flag,
                     a->path, a->count * item, (long long)sb.st_size - a->data_at);
    if (st != ST_OK) {
        fclose(*f);
        *f = NULL;
    }
    return st;
}

/* N x H x W, N x H x W x C (NHWC, what PIL and most NumPy pipelines give)
 * or N x C x H x W (what torchvision tensors give), C 1 or 3; a shape that
 * reads both ways (N x 3 x H x 3) is taken as NHWC. */
static st_status image_shape(const struct npy *a, int *c, int *h, int *w, bool *nhwc)
{
    const size_t *d = a->dims;
    *nhwc = false;
    if (a->ndims == 3) {
        *c = 1, *h = (int)d[1], *w = (int)d[2];
    } else if (a->ndims == 4 && (d[3] == 1 || d[3] == 3)) {
        *nhwc = true;
        *h = (int)d[1], *w = (int)d[2], *c = (int)d[3];
    } else if (a->ndims == 4 && (d[1] == 1 || d[1] == 3)) {
        *c = (int)d[1], *h = (int)d[2], *w = (int)d[3];
    } else {
        return bad(a, "images must be N x H x W, N x H x W x C or N x C x H x W with C 1 or 3");
    }
    if (a->dims[0] == 0 || *h <= 0 || *w <= 0 || *h > 4096 || *w > 4096)
        return bad(a, "no images, or a side of 0 or beyond 4096");
    return ST_OK;
}

/* float32 pixels in [0, 1] (ToTensor's) or [0, 255], stored as the bytes
 * every image set is kept in (a [0, 1] float holds nothing finer that a
 * decoded 8-bit image had). */
static st_status float_pixels(const struct npy *a, const float *v, size_t n, uint8_t *out)
{
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    if (!(lo >= 0) || !(hi <= 255))
        return st_fail(ST_ERR_FORMAT, "%s %s: float32 pixels from %g to %g: give them in [0, 1] or [0, 255], not "
                                      "normalised (shmtrain normalises per channel itself)", a->flag, a->path, lo, hi);
    const float scale = hi <= 1 ? 255.0f : 1.0f;
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)lrintf(v[i] * scale);
    return ST_OK;
}

/* One image at a time into the dataset's C x H x W bytes. */
static st_status read_images(const struct npy *a, FILE *f, st_dataset *d, bool nhwc)
{
    const size_t pixels = (size_t)d->c * d->h * d->w, item = item_bytes(a->descr);
    void *raw = malloc(pixels * item);
    uint8_t *tmp = malloc(pixels);
    st_status st = raw && tmp ? ST_OK : st_fail(ST_ERR_NOMEM, "%s %s: out of memory", a->flag, a->path);
    for (size_t i = 0; i < d->n && st == ST_OK; i++) {
        if (fread(raw, item, pixels, f) != pixels) {
            st = st_fail(ST_ERR_IO, "%s %s: read failed at image %zu", a->flag, a->path, i);
            break;
        }
        uint8_t *img = d->images + i * pixels, *bytes = nhwc ? tmp : img;
        if (item == 1)
            memcpy(bytes, raw, pixels);
        else
            st = float_pixels(a, raw, pixels, bytes);
        if (nhwc)  /* H x W x C -> C x H x W */
            for (size_t p = 0; p < (size_t)d->h * d->w; p++)
                for (int c = 0; c < d->c; c++)
                    img[(size_t)c * d->h * d->w + p] = tmp[p * d->c + c];
    }
    free(raw);
    free(tmp);
    return st;
}

static st_status read_labels(const struct npy *a, FILE *f, st_dataset *d)
{
    const size_t item = item_bytes(a->descr);
    const bool is_signed = a->descr[1] == 'i';
    if (a->descr[1] == 'f')
        return bad(a, "labels are floats: save them as integers (np.int64, what torch.save's labels are)");
    st_status st = ST_OK;
    for (size_t i = 0; i < d->n && st == ST_OK; i++) {
        uint64_t raw = 0;
        if (fread(&raw, item, 1, f) != 1)
            return st_fail(ST_ERR_IO, "%s %s: read failed at label %zu", a->flag, a->path, i);
        int64_t v = (int64_t)raw;
        if (is_signed && item < 8 && (raw >> (8 * item - 1)) & 1)
            v = (int64_t)(raw | ~0ull << (8 * item));  /* sign-extend */
        if (v < 0 || v > 255)
            st = st_fail(ST_ERR_FORMAT, "%s %s: label %zu is %lld: classes are 0 to 255", a->flag, a->path, i,
                         (long long)v);
        d->labels[i] = (uint8_t)v;
    }
    return st;
}

st_status st_dataset_load_npy(st_dataset **out, const char *images_path, const char *labels_path,
                              const char *images_flag, const char *labels_flag)
{
    *out = NULL;
    struct npy im = {.flag = images_flag, .path = images_path}, lb = {.flag = labels_flag, .path = labels_path};
    FILE *fi = NULL, *fl = NULL;
    st_dataset *d = NULL;
    int c = 0, h = 0, w = 0;
    bool nhwc = false;
    st_status st;
    if ((st = open_array(&im, &fi)) != ST_OK || (st = open_array(&lb, &fl)) != ST_OK)
        goto out;
    if (strcmp(im.descr, "|u1") && strcmp(im.descr, "<f4")) {
        st = st_fail(ST_ERR_FORMAT, "%s %s: dtype '%s': images are uint8 ('|u1') or float32 ('<f4')", im.flag,
                     im.path, im.descr);
        goto out;
    }
    if ((st = image_shape(&im, &c, &h, &w, &nhwc)) != ST_OK)
        goto out;
    if (lb.ndims != 1 || lb.dims[0] != im.dims[0]) {
        st = st_fail(ST_ERR_FORMAT, "%s %s: labels of shape %s%zu are not one per image of %s (%zu)", lb.flag,
                     lb.path, lb.ndims == 1 ? "" : "(not 1-D) ", lb.dims[0], im.path, im.dims[0]);
        goto out;
    }
    if ((st = alloc_dataset(&d, im.dims[0], c, h, w, images_path, true)) != ST_OK)
        goto out;
    snprintf(d->label_source, sizeof d->label_source, "%s", labels_path);
    if ((st = read_images(&im, fi, d, nhwc)) != ST_OK || (st = read_labels(&lb, fl, d)) != ST_OK)
        goto out;
    find_max_label(d);
    *out = d;
    d = NULL;
out:
    if (fi)
        fclose(fi);
    if (fl)
        fclose(fl);
    st_dataset_destroy(d);
    return st;
}
