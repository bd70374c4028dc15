/* Image-folder decoding speed: writes a synthetic folder (if it is not
 * there yet) and times st_dataset_load_folder on it, images per second with
 * the OpenMP threads it is given (OMP_NUM_THREADS=1: per core).
 *
 *   st-decode-bench --dir D --make png32|jpeg256 [--count N]   write the folder
 *   st-decode-bench --dir D --channels C --size S [--resize R] [--repeat K] [--dump F]
 *
 * png32: N 32 x 32 RGB PNGs (CIFAR's size) in 10 classes; jpeg256: N JPEGs
 * (quality 90) of 256 x 256..320 in 10 classes.  The pictures are smooth
 * gradients with noise, compressing as photographs roughly do.  --dump
 * writes the decoded bytes (N x C x S x S) for a comparison with PIL. */
#define _GNU_SOURCE
#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jpeglib.h>

#include "shmtrain/data.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void picture(uint8_t *rgb, int w, int h, unsigned seed)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                seed = seed * 1103515245u + 12345u;
                const int v = (x * (c + 1) * 255 / w + y * (3 - c) * 255 / h) / 3 + (int)(seed >> 28) - 8;
                rgb[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

static int write_png(const char *path, const uint8_t *rgb, int w, int h)
{
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!f || !png || !info || setjmp(png_jmpbuf(png)))
        return -1;
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++)
        png_write_row(png, rgb + (size_t)y * w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f);
}

static int write_jpeg(const char *path, const uint8_t *rgb, int w, int h)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h, c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return fclose(f);
}

static int make(const char *dir, const char *kind, int count)
{
    const int jpeg = !strcmp(kind, "jpeg256");
    if (!jpeg && strcmp(kind, "png32")) {
        fprintf(stderr, "st-decode-bench: --make %s: use png32 or jpeg256\n", kind);
        return 2;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "st-decode-bench: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    uint8_t *rgb = malloc(320 * 320 * 3);
    for (int i = 0; i < count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/class%d", dir, i % 10);
        mkdir(path, 0755);
        const int w = jpeg ? 256 + (i * 37) % 65 : 32, h = jpeg ? 256 : 32;
        picture(rgb, w, h, (unsigned)i);
        snprintf(path, sizeof path, "%s/class%d/%06d.%s", dir, i % 10, i, jpeg ? "jpg" : "png");
        if ((jpeg ? write_jpeg(path, rgb, w, h) : write_png(path, rgb, w, h)) != 0) {
            fprintf(stderr, "st-decode-bench: cannot write %s\n", path);
            return 1;
        }
    }
    free(rgb);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *kind = NULL, *dump = NULL;
    int count = 10000, channels = 3, size = 32, resize = 0, repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--make")) kind = argv[i + 1];
        else if (!strcmp(argv[i], "--count")) count = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--channels")) channels = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--size")) size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--resize")) resize = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dump")) dump = argv[i + 1];
        else {
            fprintf(stderr, "st-decode-bench: unknown option '%s' (see the file's header)\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "st-decode-bench: --dir D is required\n");
        return 2;
    }
    if (kind)
        return make(dir, kind, count);
    const st_image_spec spec = {.channels = channels, .height = size, .width = size, .resize = resize};
    for (int r = 0; r < repeat; r++) {
        st_dataset *d = NULL, *val = NULL;
        const double t0 = now();
        if (st_dataset_load_folder(&d, &val, dir, &spec) != ST_OK) {
            fprintf(stderr, "st-decode-bench: %s\n", st_last_error());
            return 1;
        }
        const double s = now() - t0;
        const size_t n = st_dataset_size(d);
        printf("decoded %zu images in %.3f s: %.0f images/s\n", n, s, n / s);
        if (dump && r == repeat - 1) {
            FILE *f = fopen(dump, "wb");
            for (size_t i = 0; f && i < n; i++)
                fwrite(st_dataset_image(d, i), 1, (size_t)channels * size * size, f);
            if (!f || fclose(f) != 0)
                fprintf(stderr, "st-decode-bench: cannot write %s\n", dump);
        }
        st_dataset_destroy(d);
        st_dataset_destroy(val);
    }
    return 0;
}
