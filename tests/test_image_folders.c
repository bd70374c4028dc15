/* Image folders as torchvision's ImageFolder reads them: every kind of PNG
 * and a JPEG decoded, resized and cropped as torchvision does, malformed
 * folders refused by name, and trained on (whole, streamed, balanced)
 * against the same images as .npy arrays (test_npy.c). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <png.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>  /* before jpeglib.h */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "trainrun.h"
#include "shmtrain/data.h"
#include "shmtrain/metrics.h"

/* ------------------------------------------------------ image folders -- */

static void make_dir(const char *name)
{
    char path[512];
    path_of(path, sizeof path, name);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", path, strerror(errno));
}

/* A PNG of w x h pixels of `channels` (1 grey, 3 RGB, 4 RGBA) at `depth`
 * bits: 16-bit samples are v * 256 + 200 (high byte v; PIL keeps it, where
 * rounding v + 200/256 would give v + 1). */
static void write_png(const char *name, const uint8_t *px, int w, int h, int channels, int depth)
{
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_true(f && png && info && !setjmp(png_jmpbuf(png)));
    static const int type[] = {0, PNG_COLOR_TYPE_GRAY, 0, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGBA};
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, type[channels], PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    uint8_t *row = malloc((size_t)w * channels * 2);
    for (int y = 0; y < h; y++) {
        for (int i = 0; i < w * channels; i++) {
            const uint8_t v = px[(size_t)y * w * channels + i];
            if (depth == 16)
                row[2 * i] = v, row[2 * i + 1] = 200;  /* big-endian: the high byte first */
            else
                row[i] = v;
        }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    fclose(f);
}

static void write_jpeg(const char *name, const uint8_t *rgb, int w, int h, int quality)
{
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h, c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

static const st_image_spec RGB8 = {.channels = 3, .height = 8, .width = 8};

static void load_folder(const char *root, const st_image_spec *spec, st_dataset **train, st_dataset **val)
{
    char path[512];
    path_of(path, sizeof path, root);
    if (st_dataset_load_folder(train, val, path, spec) != ST_OK)
        fail_msg("%s", st_last_error());
}

/* Every kind of PNG and a JPEG to exact (or, for JPEG, near) bytes; the
 * classes in name order; other files skipped. */
static void test_folder_decodes(void **state)
{
    (void)state;
    uint8_t rgb[8 * 8 * 3], grey[64], rgba[8 * 8 * 4], smooth[8 * 8 * 3];
    for (int i = 0; i < 64; i++) {
        for (int c = 0; c < 3; c++) {
            rgb[3 * i + c] = (uint8_t)(i * 4 + c * 50);
            rgba[4 * i + c] = rgb[3 * i + c];
            smooth[3 * i + c] = (uint8_t)(60 + (i % 8) * 8 + (i / 8) * 4 + c * 20);
        }
        rgba[4 * i + 3] = (uint8_t)(i * 3);
        grey[i] = (uint8_t)(255 - i);
    }
    make_dir("f1"), make_dir("f1/train"), make_dir("f1/val");
    make_dir("f1/train/b_dog"), make_dir("f1/train/a_cat"), make_dir("f1/val/a_cat"), make_dir("f1/val/b_dog");
    write_png("f1/train/a_cat/1.png", rgb, 8, 8, 3, 8);
    write_png("f1/train/a_cat/2.PNG", grey, 8, 8, 1, 8);
    write_png("f1/train/b_dog/3.png", rgb, 8, 8, 3, 16);
    write_png("f1/train/b_dog/4.png", rgba, 8, 8, 4, 8);
    write_jpeg("f1/train/b_dog/5.jpg", smooth, 8, 8, 95);
    write_bytes("f1/train/b_dog/notes.txt", "not an image", 12);
    write_png("f1/val/a_cat/x.png", grey, 8, 8, 1, 8);
    write_png("f1/val/b_dog/y.png", rgb, 8, 8, 3, 8);
    st_dataset *train = NULL, *val = NULL;
    load_folder("f1", &RGB8, &train, &val);
    assert_int_equal(st_dataset_size(train), 5);
    assert_int_equal(st_dataset_size(val), 2);
    const int want_label[] = {0, 0, 1, 1, 1};
    for (int k = 0; k < 5; k++)
        assert_int_equal(st_dataset_label(train, (size_t)k), want_label[k]);
    for (int k = 0; k < 4; k++) {  /* RGB, grey repeated, 16-bit's high bytes, alpha dropped */
        const uint8_t *img = st_dataset_image(train, (size_t)k);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 64; i++)
                if (img[c * 64 + i] != (k == 1 ? grey[i] : rgb[3 * i + c]))
                    fail_msg("image %d channel %d pixel %d: %u", k, c, i, img[c * 64 + i]);
    }
    /* JPEG is lossy: at quality 95 this smooth image comes back within 8 (measured: 3) */
    const uint8_t *jpg = st_dataset_image(train, 4);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 64; i++)
            if (abs(jpg[c * 64 + i] - smooth[3 * i + c]) > 8)
                fail_msg("JPEG channel %d pixel %d: %u, written %u", c, i, jpg[c * 64 + i], smooth[3 * i + c]);
    assert_int_equal(st_dataset_label(val, 1), 1);
    st_dataset_destroy(train), st_dataset_destroy(val);

    /* grey model: RGB by PIL's L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 */
    const st_image_spec grey8 = {.channels = 1, .height = 8, .width = 8};
    load_folder("f1", &grey8, &train, &val);
    const uint8_t *g = st_dataset_image(train, 0);
    for (int i = 0; i < 64; i++)
        assert_int_equal(g[i], (rgb[3 * i] * 19595u + rgb[3 * i + 1] * 38470u + rgb[3 * i + 2] * 7471u + 0x8000u) >> 16);
    assert_memory_equal(st_dataset_image(train, 1), grey, 64);
    st_dataset_destroy(train), st_dataset_destroy(val);
}

/* Resize and crop as torchvision's Resize(8) + CenterCrop(8) on PIL: a
 * 16 x 16 image halves with PIL's antialiased bilinear taps (1, 3, 3, 1)/8;
 * a flat 12 x 20 one stays flat; 8 x 13 and 13 x 8 ones are not resized
 * and are cropped from 2 (Python's round(2.5) = 2). */
static void test_folder_resizes_and_crops(void **state)
{
    (void)state;
    uint8_t big[16 * 16], wide[12 * 20];
    for (int i = 0; i < 256; i++)  /* a bright cross: where a filter without antialiasing is off by 60 */
        big[i] = (uint8_t)(i % 16 == 9 || i / 16 == 6 ? 200 : 20 + i % 16);
    for (int i = 0; i < 240; i++)
        wide[i] = 77;
    uint8_t grad[8 * 13];
    for (int i = 0; i < 8 * 13; i++)
        grad[i] = (uint8_t)i;
    make_dir("f2"), make_dir("f2/only");
    write_png("f2/only/big.png", big, 16, 16, 1, 8);
    write_png("f2/only/wide.png", wide, 20, 12, 1, 8);
    write_png("f2/only/x-wide.png", grad, 13, 8, 1, 8);
    write_png("f2/only/y-tall.png", grad, 8, 13, 1, 8);
    const st_image_spec grey8 = {.channels = 1, .height = 8, .width = 8};
    st_dataset *d = NULL, *val = NULL;
    load_folder("f2", &grey8, &d, &val);
    assert_null(val);  /* no train/val folders: the caller splits */
    const uint8_t *out = st_dataset_image(d, 0);
    /* PIL's two passes each round to bytes; one pass's exact value is within 1 */
    for (int y = 1; y < 7; y++)
        for (int x = 1; x < 7; x++) {
            double v = 0;
            const double tap[4] = {1 / 8.0, 3 / 8.0, 3 / 8.0, 1 / 8.0};
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 4; i++)
                    v += tap[j] * tap[i] * big[(2 * y - 1 + j) * 16 + 2 * x - 1 + i];
            if (fabs(out[y * 8 + x] - v) > 1.0)
                fail_msg("pixel (%d, %d): %u, PIL's filter gives %.2f", y, x, out[y * 8 + x], v);
        }
    const uint8_t *flat = st_dataset_image(d, 1);
    for (int i = 0; i < 64; i++)
        assert_int_equal(flat[i], 77);  /* normalised taps keep a flat image flat */
    const uint8_t *across = st_dataset_image(d, 2), *down = st_dataset_image(d, 3);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) {
            assert_int_equal(across[y * 8 + x], grad[y * 13 + x + 2]);
            assert_int_equal(down[y * 8 + x], grad[(y + 2) * 8 + x]);
        }
    st_dataset_destroy(d);
}

static void expect_folder_error(const char *root, const char *needle)
{
    char path[512];
    path_of(path, sizeof path, root);
    st_dataset *t = NULL, *v = NULL;
    if (st_dataset_load_folder(&t, &v, path, &RGB8) == ST_OK || !strstr(st_last_error(), needle))
        fail_msg("%s: wanted '%s', got '%s'", root, needle, t ? "success" : st_last_error());
    assert_null(t);
    assert_null(v);
}

static void test_folder_bad_inputs(void **state)
{
    (void)state;
    uint8_t rgb[8 * 8 * 3] = {0};
    make_dir("f3"), make_dir("f3/a"), make_dir("f3/b");
    write_png("f3/a/ok.png", rgb, 8, 8, 3, 8);
    write_png("f3/b/cut.png", rgb, 8, 8, 3, 8);
    char path[512];
    path_of(path, sizeof path, "f3/b/cut.png");
    assert_int_equal(truncate(path, 40), 0);
    expect_folder_error("f3", "f3/b/cut.png: corrupt PNG");
    /* a JPEG (by its bytes, whatever its name) cut in its scan: libjpeg warns and
     * would fill the rest with grey; PIL refuses it ("image file is truncated") */
    uint8_t *photo = malloc(64 * 64 * 3);
    for (int i = 0; i < 64 * 64 * 3; i++)
        photo[i] = (uint8_t)(i * 7 + (i >> 5) * 13);
    write_jpeg("f3/b/cut.png", photo, 64, 64, 90);
    free(photo);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size / 2), 0);
    expect_folder_error("f3", "f3/b/cut.png: corrupt JPEG: Premature end of JPEG file");
    write_bytes("f3/b/cut.png", "GIF89a......", 12);
    expect_folder_error("f3", "f3/b/cut.png: neither a PNG nor a JPEG");
    unlink(path);
    expect_folder_error("f3", "f3/b: no .png, .jpg or .jpeg files in this class folder");
    make_dir("f4"), make_dir("f4/train"), make_dir("f4/val"), make_dir("f4/train/a"), make_dir("f4/val/z");
    write_png("f4/train/a/1.png", rgb, 8, 8, 3, 8);
    write_png("f4/val/z/1.png", rgb, 8, 8, 3, 8);
    expect_folder_error("f4", "class folder 'z' is not the training split's 'a'");
    make_dir("f5");
    expect_folder_error("f5", "f5: no class folders");
    expect_folder_error("missing", "missing: does not exist");
    const st_image_spec small = {.channels = 3, .height = 8, .width = 8, .resize = 6}, four = {4, 8, 8, 0};
    st_dataset *t = NULL, *v = NULL;
    path_of(path, sizeof path, "f3");
    assert_int_equal(st_dataset_load_folder(&t, &v, path, &small), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "--image-size 6: smaller than the model's input 8x8"));
    assert_int_equal(st_dataset_load_folder(&t, &v, path, &four), ST_ERR_INVALID);
    assert_non_null(strstr(st_last_error(), "the model reads 4 channels"));
}

/* The synthetic set as a folder of grey PNGs (class folders, files named
 * by index) and as arrays in the folder's order (by class, then index):
 * both train to the same bits, on one rank and on two. */
/* --balance dynamic over a folder streamed past --data-memory: each
 * micro-batch decoded as an instance takes it (none ahead: which instance
 * takes the next is not known), every one of a step taken once (the
 * summary's count), and training where static's goes (test_balance's
 * tolerance: the same micro-batches summed in another order). */
static void dynamic_streams_as_static(const char *root)
{
    char *args[] = {"--image-folder", (char *)root, "--data-memory", "0.001", "--max-steps", "40", "--grad-accum",
                    "2", "--batch-size", "16", "--balance", "static", NULL};
    st_ckpt s = trained_with_data(2, "bs.ckpt", args, NULL);
    args[11] = "dynamic";
    st_ckpt d = trained_with_data(2, "bd.ckpt", args, NULL);
    char path[512];
    path_of(path, sizeof path, "metrics.jsonl");
    char *metrics = slurp_or_empty(path);
    const char *summary = strstr(metrics, "\"type\":\"summary\"");
    assert_non_null(summary);
    assert_non_null(strstr(summary, "\"micro_batches\":160"));  /* 40 steps x 2 instances x 2 */
    st_record rec;  /* rank 0 decoded what it took, nothing ahead */
    const char *end = strchr(summary, '\n');
    char line[2048];
    snprintf(line, sizeof line, "{%.*s", (int)(end ? end - summary : (long)strlen(summary)), summary);
    assert_int_equal(st_metrics_parse(line, &rec), ST_RECORD_SUMMARY);
    assert_true(rec.u.summary.micro_batches_here > 0);
    assert_int_equal(rec.u.summary.samples_decoded, rec.u.summary.micro_batches_here * 16);
    double scale, apart = ckpt_max_abs_diff(&s, &d, &scale);
    if (!(apart <= 1e-5 * scale))
        fail_msg("dynamic streamed: parameters %.3g apart of %.3g from static's", apart, scale);
    free(metrics);
    st_ckpt_free(&s), st_ckpt_free(&d);
}

static void test_folder_trains_as_npy(void **state)
{
    (void)state;
    struct data_files f = synthetic_files();
    make_dir("fm"), make_dir("fm/train"), make_dir("fm/val");
    const char *split_dir[2] = {"fm/train", "fm/val"}, *prefix[2] = {"fold-train", "fold-test"};
    const char *idx_i[2] = {f.tri, f.tei}, *idx_l[2] = {f.trl, f.tel};
    for (int s = 0; s < 2; s++) {
        st_dataset *d = NULL;
        assert_int_equal(st_dataset_load_idx(&d, idx_i[s], idx_l[s]), ST_OK);
        const size_t n = st_dataset_size(d), px = 28 * 28;
        uint8_t *img = malloc(n * px);
        int64_t *lab = malloc(n * sizeof *lab);
        size_t at = 0;
        for (int k = 0; k <= st_dataset_max_label(d); k++) {
            char name[128];
            snprintf(name, sizeof name, "%s/class%02d", split_dir[s], k);
            make_dir(name);
            for (size_t i = 0; i < n; i++)
                if (st_dataset_label(d, i) == k) {
                    snprintf(name, sizeof name, "%s/class%02d/%05zu.png", split_dir[s], k, i);
                    write_png(name, st_dataset_image(d, i), 28, 28, 1, 8);
                    memcpy(img + at * px, st_dataset_image(d, i), px);
                    lab[at++] = k;
                }
        }
        char name[64], shape[64];
        snprintf(shape, sizeof shape, "(%zu, 28, 28)", n);
        snprintf(name, sizeof name, "%s-images.npy", prefix[s]);
        write_npy(name, "|u1", shape, img, n * px, false);
        snprintf(shape, sizeof shape, "(%zu,)", n);
        snprintf(name, sizeof name, "%s-labels.npy", prefix[s]);
        write_npy(name, "<i8", shape, lab, n * sizeof *lab, false);
        free(img), free(lab);
        st_dataset_destroy(d);
    }
    char root[512], tri[512], trl[512], tei[512], tel[512];
    path_of(root, sizeof root, "fm");
    path_of(tri, sizeof tri, "fold-train-images.npy"), path_of(trl, sizeof trl, "fold-train-labels.npy");
    path_of(tei, sizeof tei, "fold-test-images.npy"), path_of(tel, sizeof tel, "fold-test-labels.npy");
    for (int n = 1; n <= 2; n++) {
        st_ckpt npy = trained_with_data(n, "fnpy.ckpt", (char *[]){"--npy-images", tri, "--npy-labels", trl, "--npy-test-images",
                                                         tei, "--npy-test-labels", tel, NULL}, NULL);
        st_ckpt folder = trained_with_data(n, "fold.ckpt", (char *[]){"--image-folder", root, NULL}, NULL);
        assert_int_equal(folder.step, 30);
        assert_memory_equal(folder.params, npy.params, npy.nparams * sizeof(float));
        /* streamed (beyond a tiny --data-memory): every batch decoded by the workers as needed,
         * the same bits; past an epoch's end (32 steps), with micro-batches and augmentation too */
        st_ckpt streamed = trained_with_data(n, "stream.ckpt", (char *[]){"--image-folder", root, "--data-memory", "0.001",
                                                                NULL}, NULL);
        assert_memory_equal(streamed.params, npy.params, npy.nparams * sizeof(float));
        st_ckpt_free(&npy), st_ckpt_free(&folder), st_ckpt_free(&streamed);
        char *more[] = {"--max-steps", "40", "--grad-accum", "2", "--batch-size", "16", "--augment", NULL};
        char *whole[16], *stream_args[16];
        int k = 0;
        whole[k] = "--image-folder", stream_args[k++] = "--image-folder";
        whole[k] = root, stream_args[k++] = root;
        for (int i = 0; more[i]; i++, k++)
            whole[k] = stream_args[k] = more[i];
        whole[k] = NULL;
        stream_args[k++] = "--data-memory", stream_args[k++] = "0.001", stream_args[k++] = "--data-workers";
        stream_args[k++] = n == 1 ? "3" : "0", stream_args[k] = NULL;
        st_ckpt a = trained_with_data(n, "w.ckpt", whole, NULL), b = trained_with_data(n, "s.ckpt", stream_args, NULL);
        assert_int_equal(b.step, 40);
        assert_memory_equal(a.params, b.params, a.nparams * sizeof(float));
        st_ckpt_free(&a), st_ckpt_free(&b);
    }
    dynamic_streams_as_static(root);
    struct child_run r = train_with_data(0, "bad.ckpt", (char *[]){"--image-folder", root, "--npy-images", tri, "--npy-labels",
                                                          trl, NULL});
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "give one image source"));
    child_run_free(&r);
    r = train_with_data(0, "bad.ckpt", (char *[]){"--image-folder", root, "--model", "gpt-mini", NULL});
    assert_int_equal(r.code, 1);
    child_run_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folder_decodes),
        cmocka_unit_test(test_folder_resizes_and_crops),
        cmocka_unit_test(test_folder_bad_inputs),
        cmocka_unit_test(test_folder_trains_as_npy),
    };
    return TRAINRUN_GROUP("test_image_folders", tests, argc, argv);
}
