/* NumPy arrays as people save them (np.save's .npy in each dtype and
 * order, and their malformed kin), read back to the exact bytes and trained
 * on, against the same images as IDX. Image folders: test_image_folders.c;
 * the model going out: test_export.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainrun.h"
#include "shmtrain/data.h"

/* ------------------------------------------------------------ .npy -- */

enum { N = 6, C = 3, H = 4, W = 5, PIX = C * H * W };

/* Image i's pixel (c, y, x): distinct enough that a wrong order shows. */
static uint8_t pixel(int i, int c, int y, int x) { return (uint8_t)(i * 37 + c * 71 + y * 13 + x * 3); }

static st_dataset *load(const char *images, const char *labels)
{
    char a[512], b[512];
    path_of(a, sizeof a, images), path_of(b, sizeof b, labels);
    st_dataset *d = NULL;
    if (st_dataset_load_npy(&d, a, b, "--npy-images", "--npy-labels") != ST_OK)
        fail_msg("%s", st_last_error());
    return d;
}

static void expect_pixels(const st_dataset *d, int channels)
{
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    assert_int_equal(st_dataset_size(d), N);
    assert_int_equal(c, channels);
    assert_int_equal(h, H);
    assert_int_equal(w, W);
    for (int i = 0; i < N; i++) {
        const uint8_t *img = st_dataset_image(d, (size_t)i);
        for (int k = 0; k < c * H * W; k++)
            if (img[k] != pixel(i, k / (H * W), k / W % H, k % W))
                fail_msg("image %d, byte %d: %u, not %u", i, k, img[k], pixel(i, k / (H * W), k / W % H, k % W));
        assert_int_equal(st_dataset_label(d, (size_t)i), (i * 7) % 10);
    }
}

static void test_npy_dtypes_and_orders(void **state)
{
    (void)state;
    uint8_t nchw[N * PIX], nhwc[N * PIX], grey[N * H * W];
    float f01[N * PIX], f255[N * PIX];
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    const uint8_t v = pixel(i, c, y, x);
                    nchw[i * PIX + (c * H + y) * W + x] = v;
                    nhwc[i * PIX + (y * W + x) * C + c] = v;
                    f01[i * PIX + (y * W + x) * C + c] = v / 255.0f;  /* ToTensor's scale, NHWC */
                    f255[i * PIX + (c * H + y) * W + x] = v;
                    if (c == 0)
                        grey[i * H * W + y * W + x] = v;
                }
    int64_t l64[N];
    int32_t l32[N];
    uint8_t l8[N];
    for (int i = 0; i < N; i++)
        l64[i] = l32[i] = l8[i] = (uint8_t)((i * 7) % 10);
    write_npy("nchw.npy", "|u1", "(6, 3, 4, 5)", nchw, sizeof nchw, false);
    write_npy("nhwc.npy", "|u1", "(6, 4, 5, 3)", nhwc, sizeof nhwc, false);
    write_npy("f01.npy", "<f4", "(6, 4, 5, 3)", f01, sizeof f01, false);
    write_npy("f255.npy", "<f4", "(6, 3, 4, 5)", f255, sizeof f255, false);
    write_npy("grey.npy", "|u1", "(6, 4, 5)", grey, sizeof grey, false);
    write_npy("l64.npy", "<i8", "(6,)", l64, sizeof l64, false);
    write_npy("l32.npy", "<i4", "(6,)", l32, sizeof l32, false);
    write_npy("l8.npy", "|u1", "(6,)", l8, sizeof l8, false);
    const char *colour[] = {"nchw.npy", "nhwc.npy", "f01.npy", "f255.npy"}, *labels[] = {"l64.npy", "l32.npy", "l8.npy"};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 3; k++) {
            st_dataset *d = load(colour[i], labels[k]);
            expect_pixels(d, 3);
            st_dataset_destroy(d);
        }
    st_dataset *d = load("grey.npy", "l64.npy");
    expect_pixels(d, 1);
    /* the test split a set without one gives up: the seeded permutation's
     * first samples, copied; each split in the original order */
    st_dataset *held = NULL;
    uint32_t order[N];
    st_epoch_order(order, N, 77, 0);
    assert_int_equal(st_dataset_split(d, 2, 77, &held), ST_OK);
    assert_int_equal(st_dataset_size(d), 4);
    assert_int_equal(st_dataset_size(held), 2);
    const uint32_t lo = order[0] < order[1] ? order[0] : order[1], hi = order[0] ^ order[1] ^ lo;
    assert_memory_equal(st_dataset_image(held, 0), grey + lo * H * W, H * W);
    assert_memory_equal(st_dataset_image(held, 1), grey + hi * H * W, H * W);
    assert_int_equal(st_dataset_label(held, 1), (hi * 7) % 10);
    for (size_t i = 0, k = 0; i < N; i++)
        if (i != lo && i != hi) {
            assert_memory_equal(st_dataset_image(d, k), grey + i * H * W, H * W);
            assert_int_equal(st_dataset_label(d, k++), (i * 7) % 10);
        }
    st_dataset_destroy(held);
    st_dataset_destroy(d);
}

static void expect_refused(const char *images, const char *labels, const char *needle)
{
    char a[512], b[512];
    path_of(a, sizeof a, images), path_of(b, sizeof b, labels);
    st_dataset *d = NULL;
    if (st_dataset_load_npy(&d, a, b, "--npy-images", "--npy-labels") == ST_OK || !strstr(st_last_error(), needle))
        fail_msg("%s + %s: wanted '%s', got '%s'", images, labels, needle, d ? "success" : st_last_error());
    assert_null(d);
}

static void test_npy_bad_inputs(void **state)
{
    (void)state;
    uint8_t img[N * PIX] = {0};
    double f8[N * H * W] = {0};
    float norm[N * H * W];
    int64_t lab[N] = {0}, wide[N] = {0, 1, 2, 300, 4, 5};
    float flab[N] = {0};
    for (int i = 0; i < N * H * W; i++)
        norm[i] = (float)(i % 5) - 2.0f;  /* normalised already */
    write_npy("ok.npy", "|u1", "(6, 3, 4, 5)", img, sizeof img, false);
    write_npy("lab.npy", "<i8", "(6,)", lab, sizeof lab, false);
    write_npy("fortran.npy", "|u1", "(6, 3, 4, 5)", img, sizeof img, true);
    write_npy("f8.npy", "<f8", "(6, 4, 5)", f8, sizeof f8, false);
    write_npy("short.npy", "|u1", "(6, 3, 4, 5)", img, sizeof img - 1, false);
    write_npy("five.npy", "|u1", "(6, 5, 2, 6)", img, 6 * 5 * 2 * 6, false);
    write_npy("norm.npy", "<f4", "(6, 4, 5)", norm, sizeof norm, false);
    write_npy("lab5.npy", "<i8", "(5,)", lab, 5 * sizeof *lab, false);
    write_npy("wide.npy", "<i8", "(6,)", wide, sizeof wide, false);
    write_npy("flab.npy", "<f4", "(6,)", flab, sizeof flab, false);
    const int32_t neg[N] = {0, 1, -1, 3, 4, 5};
    write_npy("neg.npy", "<i4", "(6,)", neg, sizeof neg, false);
    write_bytes("idx.npy", "\0\0\x08\x03", 4);
    expect_refused("fortran.npy", "lab.npy", "fortran.npy: Fortran order: save np.ascontiguousarray(x)");
    expect_refused("f8.npy", "lab.npy", "f8.npy: dtype '<f8': images are uint8 ('|u1') or float32 ('<f4')");
    expect_refused("short.npy", "lab.npy", "short.npy: its shape needs 360 bytes of data, the file holds 359");
    expect_refused("five.npy", "lab.npy", "five.npy: images must be N x H x W, N x H x W x C or N x C x H x W");
    expect_refused("norm.npy", "lab.npy", "norm.npy: float32 pixels from -2 to 2: give them in [0, 1] or [0, 255]");
    expect_refused("ok.npy", "lab5.npy", "--npy-labels");
    expect_refused("ok.npy", "lab5.npy", "lab5.npy: labels of shape 5 are not one per image of");
    expect_refused("ok.npy", "wide.npy", "wide.npy: label 3 is 300: classes are 0 to 255");
    expect_refused("ok.npy", "neg.npy", "neg.npy: label 2 is -1: classes are 0 to 255");
    expect_refused("ok.npy", "flab.npy", "flab.npy: labels are floats");
    expect_refused("idx.npy", "lab.npy", "idx.npy: not a .npy file");
    expect_refused("missing.npy", "lab.npy", "--npy-images");
}


/* The synthetic IDX set, written again as arrays (NHWC, int64 labels). */
static void idx_as_npy(const char *idx_images, const char *idx_labels, const char *prefix)
{
    st_dataset *d = NULL;
    assert_int_equal(st_dataset_load_idx(&d, idx_images, idx_labels), ST_OK);
    const size_t n = st_dataset_size(d), px = 28 * 28;
    uint8_t *img = malloc(n * px);
    int64_t *lab = malloc(n * sizeof *lab);
    for (size_t i = 0; i < n; i++) {
        memcpy(img + i * px, st_dataset_image(d, i), px);
        lab[i] = st_dataset_label(d, i);
    }
    char name[64], shape[64];
    snprintf(shape, sizeof shape, "(%zu, 28, 28, 1)", n);
    snprintf(name, sizeof name, "%s-images.npy", prefix);
    write_npy(name, "|u1", shape, img, n * px, false);
    snprintf(shape, sizeof shape, "(%zu,)", n);
    snprintf(name, sizeof name, "%s-labels.npy", prefix);
    write_npy(name, "<i8", shape, lab, n * sizeof *lab, false);
    free(img), free(lab);
    st_dataset_destroy(d);
}

/* The same images as arrays train to the same bits as from IDX, on one
 * rank and on two (the second maps the first's decoded copy). */
static void test_npy_trains_as_idx(void **state)
{
    (void)state;
    struct data_files f = synthetic_files();
    idx_as_npy(f.tri, f.trl, "train");
    idx_as_npy(f.tei, f.tel, "test");
    char tri[512], trl[512], tei[512], tel[512];
    path_of(tri, sizeof tri, "train-images.npy"), path_of(trl, sizeof trl, "train-labels.npy");
    path_of(tei, sizeof tei, "test-images.npy"), path_of(tel, sizeof tel, "test-labels.npy");
    for (int n = 1; n <= 2; n++) {
        st_ckpt idx = trained_with_data(n, "idx.ckpt", (char *[]){"--train-images", f.tri, "--train-labels", f.trl,
                                                        "--test-images", f.tei, "--test-labels", f.tel, NULL}, NULL);
        char *out = NULL;
        st_ckpt npy = trained_with_data(n, "npy.ckpt", (char *[]){"--npy-images", tri, "--npy-labels", trl, "--npy-test-images",
                                                        tei, "--npy-test-labels", tel, NULL}, &out);
        assert_int_equal(npy.step, 30);
        assert_memory_equal(npy.params, idx.params, idx.nparams * sizeof(float));
        st_ckpt_free(&idx), st_ckpt_free(&npy);
        free(out);
    }
    /* without test arrays the last --val-fraction is held out */
    char *out = NULL;
    st_ckpt held = trained_with_data(0, "held.ckpt", (char *[]){"--npy-images", tri, "--npy-labels", trl, "--val-fraction",
                                                      "0.25", NULL}, &out);
    if (!strstr(out, "1536 training / 512 test samples"))
        fail_msg("wanted 1536 / 512 samples in:\n%s", out);
    free(out);
    st_ckpt_free(&held);
    struct child_run r = train_with_data(0, "bad.ckpt", (char *[]){"--npy-images", tri, NULL});
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(r.err, "--npy-images and --npy-labels come together"));
    child_run_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_dtypes_and_orders),
        cmocka_unit_test(test_npy_bad_inputs),
        cmocka_unit_test(test_npy_trains_as_idx),
    };
    return TRAINRUN_GROUP("test_npy", tests, argc, argv);
}
