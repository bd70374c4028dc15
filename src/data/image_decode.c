/* PNG (libpng) and JPEG (libjpeg-turbo) decoding, colour conversion,
 * resizing and cropping: image_decode.h. */
#define _GNU_SOURCE
#include "image_decode.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>  /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

enum { MAX_SIDE = 1 << 14 };

/* A decoded image: rows of w x c bytes, c 1 or 3. */
struct pixels {
    uint8_t *p;
    int w, h, c;
};

int image_is_supported(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int fail(char *err, size_t len, const char *what)
{
    snprintf(err, len, "%s", what);
    return -1;
}

/* ---------------------------------------------------------------- PNG -- */

struct png_failure {
    char *err;
    size_t len;
};

static void png_on_error(png_structp png, png_const_charp msg)
{
    struct png_failure *f = png_get_error_ptr(png);
    snprintf(f->err, f->len, "corrupt PNG: %s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png, (void)msg;  /* ancillary chunks (iCCP, ...): PIL ignores them too */
}

/* 16-bit samples keep their high byte and alpha is dropped, as PIL's
 * convert("RGB") does; palettes and 1-4 bit grey expand to 8 bits. */
static int decode_png(FILE *f, struct pixels *px, char *err, size_t len)
{
    struct png_failure failure = {err, len};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &failure, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile data = NULL;
    png_bytep *volatile rows = NULL;
    if (!png || !info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return fail(err, len, "out of memory for a PNG decoder");
    }
    if (setjmp(png_jmpbuf(png))) {
        free(rows);
        free(data);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    png_init_io(png, f);
    png_read_info(png, info);
    png_set_strip_16(png);
    png_set_palette_to_rgb(png);
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_strip_alpha(png);
    png_read_update_info(png, info);
    const int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    const int c = png_get_channels(png, info);
    if (w > MAX_SIDE || h > MAX_SIDE || (c != 1 && c != 3))
        png_error(png, w > MAX_SIDE || h > MAX_SIDE ? "larger than 16384 pixels a side" : "unexpected channel count");
    data = malloc((size_t)w * h * c);
    rows = malloc((size_t)h * sizeof *rows);
    if (!data || !rows)
        png_error(png, "out of memory");
    for (int y = 0; y < h; y++)
        rows[y] = data + (size_t)y * w * c;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    *px = (struct pixels){data, w, h, c};
    return 0;
}

/* --------------------------------------------------------------- JPEG -- */

struct jpeg_failure {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char *err;
    size_t len;
};

static void jpeg_on_error(j_common_ptr cinfo)
{
    struct jpeg_failure *f = (struct jpeg_failure *)cinfo->err;
    char msg[JMSG_LENGTH_MAX];
    f->mgr.format_message(cinfo, msg);
    snprintf(f->err, f->len, "corrupt JPEG: %s", msg);
    longjmp(f->jump, 1);
}

/* A warning is data libjpeg had to make up (a truncated file shown grey):
 * PIL refuses those too ("image file is truncated"). */
static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    if (level < 0)
        jpeg_on_error(cinfo);
}

static int decode_jpeg(FILE *f, struct pixels *px, char *err, size_t len)
{
    struct jpeg_decompress_struct cinfo;
    struct jpeg_failure failure = {.err = err, .len = len};
    uint8_t *volatile data = NULL;
    cinfo.err = jpeg_std_error(&failure.mgr);
    failure.mgr.error_exit = jpeg_on_error;
    failure.mgr.emit_message = jpeg_on_message;
    if (setjmp(failure.jump)) {
        free(data);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, f);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.image_width > MAX_SIDE || cinfo.image_height > MAX_SIDE) {  /* before any pixel is read */
        snprintf(err, len, "a JPEG of %u x %u pixels: larger than this reader's %d pixels a side",
                 (unsigned)cinfo.image_width, (unsigned)cinfo.image_height, MAX_SIDE);
        longjmp(failure.jump, 1);
    }
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        snprintf(err, len, "a CMYK JPEG (4 channels): convert it to RGB");
        longjmp(failure.jump, 1);
    }
    cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const int w = (int)cinfo.output_width, h = (int)cinfo.output_height, c = cinfo.output_components;
    if (w > MAX_SIDE || h > MAX_SIDE) {
        snprintf(err, len, "larger than %d pixels a side", MAX_SIDE);
        longjmp(failure.jump, 1);
    }
    if (!(data = malloc((size_t)w * h * c))) {
        snprintf(err, len, "out of memory");
        longjmp(failure.jump, 1);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = data + (size_t)cinfo.output_scanline * w * c;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    *px = (struct pixels){data, w, h, c};
    return 0;
}

/* ------------------------------------------------- colour and resizing -- */

/* RGB to grey with PIL's ITU-R 601-2 weights and rounding; grey to RGB by
 * repeating it. */
static int convert(struct pixels *px, int channels)
{
    if (px->c == channels)
        return 0;
    const size_t n = (size_t)px->w * px->h;
    uint8_t *q = malloc(n * channels);
    if (!q)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = px->p + i * px->c;
        if (channels == 1)
            q[i] = (uint8_t)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
        else
            q[3 * i] = q[3 * i + 1] = q[3 * i + 2] = s[0];
    }
    free(px->p);
    px->p = q;
    px->c = channels;
    return 0;
}

/* PIL's bilinear resampling along one axis: a triangle filter widened by
 * the scale when shrinking (antialiasing), its weights normalised. */
struct taps {
    int *first, *count;
    float *w;  /* out x max_taps */
    int max_taps;
};

static int make_taps(struct taps *t, int in, int out)
{
    const double scale = (double)in / out, support = scale > 1 ? scale : 1.0;
    t->max_taps = (int)ceil(support) * 2 + 1;
    t->first = malloc(out * sizeof *t->first);
    t->count = malloc(out * sizeof *t->count);
    t->w = calloc((size_t)out * t->max_taps, sizeof *t->w);
    if (!t->first || !t->count || !t->w)
        return -1;
    for (int x = 0; x < out; x++) {
        const double centre = (x + 0.5) * scale;
        int lo = (int)floor(centre - support + 0.5), hi = (int)floor(centre + support + 0.5);
        lo = lo < 0 ? 0 : lo;
        hi = hi > in ? in : hi;
        double sum = 0;
        float *w = t->w + (size_t)x * t->max_taps;
        for (int i = lo; i < hi && i - lo < t->max_taps; i++) {
            const double d = fabs((i - centre + 0.5) / support);
            sum += w[i - lo] = (float)(d < 1 ? 1 - d : 0);
        }
        for (int i = 0; i < hi - lo && i < t->max_taps && sum > 0; i++)
            w[i] = (float)(w[i] / sum);
        t->first[x] = lo;
        t->count[x] = hi - lo < t->max_taps ? hi - lo : t->max_taps;
    }
    return 0;
}

static void free_taps(struct taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
}

static inline uint8_t clamp_round(float v)
{
    v = v < 0 ? 0 : v > 255 ? 255 : v;  /* branch-free (minss, maxss) */
    return (uint8_t)(v + 0.5f);
}

/* One row along x, channels interleaved; `c` a constant in each caller
 * (1 or 3), so that its loops unroll. */
static inline void resize_row_c(const uint8_t *src, uint8_t *dst, const struct taps *t, int w2, const int c)
{
    for (int x = 0; x < w2; x++) {
        const float *w = t->w + (size_t)x * t->max_taps;
        const uint8_t *p = src + (size_t)t->first[x] * c;
        float a0 = 0, a1 = 0, a2 = 0;
        for (int i = 0; i < t->count[x]; i++) {
            a0 += w[i] * p[i * c];
            if (c == 3) {
                a1 += w[i] * p[i * c + 1];
                a2 += w[i] * p[i * c + 2];
            }
        }
        dst[(size_t)x * c] = clamp_round(a0);
        if (c == 3) {
            dst[(size_t)x * c + 1] = clamp_round(a1);
            dst[(size_t)x * c + 2] = clamp_round(a2);
        }
    }
}

static void resize_row(const uint8_t *src, uint8_t *dst, const struct taps *t, int w2, int c)
{
    if (c == 3)
        resize_row_c(src, dst, t, w2, 3);
    else
        resize_row_c(src, dst, t, w2, 1);
}

/* Horizontal pass to bytes, then vertical, as PIL does; the vertical one
 * adds whole rows, which the compiler vectorises. */
static int resize(struct pixels *px, int w2, int h2)
{
    struct taps tx = {0}, ty = {0};
    const int c = px->c;
    const size_t row = (size_t)w2 * c;
    uint8_t *mid = malloc(row * px->h), *out = malloc(row * h2);
    float *acc = malloc(row * sizeof *acc);
    int rc = -1;
    if (!mid || !out || !acc || make_taps(&tx, px->w, w2) || make_taps(&ty, px->h, h2))
        goto done;
    for (int y = 0; y < px->h; y++)
        resize_row(px->p + (size_t)y * px->w * c, mid + (size_t)y * row, &tx, w2, c);
    for (int y = 0; y < h2; y++) {
        const float *w = ty.w + (size_t)y * ty.max_taps;
        for (size_t j = 0; j < row; j++)
            acc[j] = 0;
        for (int i = 0; i < ty.count[y]; i++) {
            const uint8_t *r = mid + (size_t)(ty.first[y] + i) * row;
            const float wi = w[i];
            for (size_t j = 0; j < row; j++)
                acc[j] += wi * r[j];
        }
        for (size_t j = 0; j < row; j++)
            out[(size_t)y * row + j] = clamp_round(acc[j]);
    }
    free(px->p);
    *px = (struct pixels){out, w2, h2, c};
    out = NULL;
    rc = 0;
done:
    free_taps(&tx);
    free_taps(&ty);
    free(mid);
    free(out);
    free(acc);
    return rc;
}

/* The file, opened without blocking (a FIFO named like an image would
 * block an ordinary open until something writes to it) and only if it is
 * a regular file. */
static FILE *open_regular(const char *path, char *err, size_t errlen)
{
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    FILE *f = NULL;
    if (!S_ISREG(sb.st_mode))
        snprintf(err, errlen, "not a regular file (%s)", S_ISFIFO(sb.st_mode)   ? "a FIFO"
                                                         : S_ISSOCK(sb.st_mode) ? "a socket"
                                                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                                                                                                      : "not a file");
    else if (fcntl(fd, F_SETFL, 0) != 0 || !(f = fdopen(fd, "rb")))
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
    if (!f)
        close(fd);
    return f;
}

/* A PNG's size from its IHDR chunk, before libpng reads on: a header that
 * claims a huge image of a file too short to hold it is told as what it
 * claims, not as a read error further on. */
static int png_too_large(const unsigned char *head, size_t got, char *err, size_t errlen)
{
    if (got < 24 || memcmp(head + 12, "IHDR", 4))
        return 0;
    const uint32_t w = (uint32_t)head[16] << 24 | (uint32_t)head[17] << 16 | (uint32_t)head[18] << 8 | head[19];
    const uint32_t h = (uint32_t)head[20] << 24 | (uint32_t)head[21] << 16 | (uint32_t)head[22] << 8 | head[23];
    if (w <= MAX_SIDE && h <= MAX_SIDE)
        return 0;
    snprintf(err, errlen, "a PNG of %u x %u pixels: larger than this reader's %d pixels a side", w, h, MAX_SIDE);
    return -1;
}

int image_decode(const char *path, const struct image_target *t, uint8_t *out, char *err, size_t errlen)
{
    FILE *f = open_regular(path, err, errlen);
    if (!f)
        return -1;
    unsigned char magic[24] = {0};
    const size_t got = fread(magic, 1, sizeof magic, f);
    rewind(f);
    struct pixels px = {0};
    int rc;
    if (got >= 8 && !png_sig_cmp(magic, 0, 8))
        rc = png_too_large(magic, got, err, errlen) ? -1 : decode_png(f, &px, err, errlen);
    else if (got >= 3 && magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff)
        rc = decode_jpeg(f, &px, err, errlen);
    else
        rc = fail(err, errlen, "neither a PNG nor a JPEG (its first bytes say)");
    fclose(f);
    if (rc)
        return rc;
    if (convert(&px, t->channels)) {
        free(px.p);
        return fail(err, errlen, "out of memory");
    }
    /* torchvision's Resize(size): the shorter side to `resize`, the longer
     * scaled and truncated; an image already that size is left alone. */
    const int shorter = px.w < px.h ? px.w : px.h;
    if (shorter != t->resize) {
        const int w2 = px.w <= px.h ? t->resize : (int)((long)t->resize * px.w / px.h);
        const int h2 = px.w <= px.h ? (int)((long)t->resize * px.h / px.w) : t->resize;
        if (resize(&px, w2, h2)) {
            free(px.p);
            return fail(err, errlen, "out of memory");
        }
    }
    /* CenterCrop: Python's round, halves to even */
    const int top = (int)rint((px.h - t->height) / 2.0), left = (int)rint((px.w - t->width) / 2.0);
    if (top < 0 || left < 0) {
        free(px.p);
        return fail(err, errlen, "smaller than the crop after resizing");
    }
    for (int c = 0; c < t->channels; c++)
        for (int y = 0; y < t->height; y++)
            for (int x = 0; x < t->width; x++)
                out[((size_t)c * t->height + y) * t->width + x] =
                    px.p[((size_t)(top + y) * px.w + left + x) * t->channels + c];
    free(px.p);
    return 0;
}
