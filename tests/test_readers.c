/* What the trainer reads, on its own: the IDX and CIFAR-10 readers on
 * malformed files (each refusal names the file and what is wrong), the
 * sampler's shards, and the checkpoint format (round trip, truncation, a
 * flipped bit, a wrong magic, a directory that does not exist).  The
 * trainer over them: test_train.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "trainrun.h"
#include "shmtrain/ckpt.h"
#include "shmtrain/data.h"

/* ------------------------------------------------------- data readers -- */

static void expect_idx_error(const char *img, const char *lab, const char *fragment)
{
    char ip[512], lp[512];
    path_of(ip, sizeof ip, img);
    path_of(lp, sizeof lp, lab);
    st_dataset *d = (st_dataset *)0x1;
    st_status st = st_dataset_load_idx(&d, ip, lp);
    size_t flen = strlen(fragment);
    bool anchored = flen && fragment[flen - 1] == '$';
    char want[256];
    snprintf(want, sizeof want, "%.*s", (int)(anchored ? flen - 1 : flen), fragment);
    const char *at = strstr(st_last_error(), want);
    if (st == ST_OK || d != NULL || !at || (anchored && at[strlen(want)] != '\0'))
        fail_msg("%s/%s: status %d, message '%s', wanted '%s'", img, lab, (int)st, st_last_error(), fragment);
}

static void test_data_readers_refuse_bad_files(void **state)
{
    (void)state;
    uint8_t pix[4 * 9] = {0}, lab[4] = {1, 2, 3, 4}, buf[256];
    uint32_t d3[3] = {4, 3, 3}, d1[1] = {4}, d1b[1] = {3}, d2[2] = {4, 9};
    write_bytes("good-images", buf, idx(buf, 0x08, 3, d3, pix, sizeof pix));
    write_bytes("good-labels", buf, idx(buf, 0x08, 1, d1, lab, sizeof lab));
    st_dataset *d = NULL;
    char ip[512], lp[512];
    path_of(ip, sizeof ip, "good-images");
    path_of(lp, sizeof lp, "good-labels");
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);
    assert_int_equal(st_dataset_size(d), 4);
    assert_int_equal(st_dataset_max_label(d), 4);
    st_dataset_destroy(d);

    size_t n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    buf[1] = 7;
    write_bytes("bad-magic", buf, n);
    write_bytes("float-type", buf, idx(buf, 0x0D, 3, d3, pix, sizeof pix));
    write_bytes("two-dims", buf, idx(buf, 0x08, 2, d2, pix, sizeof pix));
    write_bytes("short-images", buf, idx(buf, 0x08, 3, d3, pix, sizeof pix) - 5);
    write_bytes("three-labels", buf, idx(buf, 0x08, 1, d1b, lab, 3));
    write_bytes("empty", buf, 0);
    uint32_t d3l[3] = {4, 1, 1};
    write_bytes("3d-labels", buf, idx(buf, 0x08, 3, d3l, lab, sizeof lab));
    n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    buf[n] = 0x42;  /* one byte after the last image */
    write_bytes("trailing-images", buf, n + 1);
    n = idx(buf, 0x08, 1, d1, lab, sizeof lab);
    memset(buf + n, 1, 3);
    write_bytes("trailing-labels", buf, n + 3);
    n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    buf[n] = 0x42;
    write_gz("trailing-images.gz", buf, n + 1);
    n = idx(buf, 0x08, 3, d3, pix, sizeof pix);
    write_gz("good-images.gz", buf, n);
    /* A gzip stream cut short, and one with bytes flipped in the middle. */
    char gzpath[512];
    path_of(gzpath, sizeof gzpath, "good-images.gz");
    struct stat sb;
    assert_int_equal(stat(gzpath, &sb), 0);
    uint8_t *gz = malloc((size_t)sb.st_size);
    FILE *f = fopen(gzpath, "rb");
    assert_int_equal(fread(gz, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    write_bytes("cut.gz", gz, (size_t)sb.st_size - 12);
    for (int i = 12; i < 18; i++)
        gz[i] ^= 0xA5;
    write_bytes("flipped.gz", gz, (size_t)sb.st_size);
    free(gz);

    expect_idx_error("bad-magic", "good-labels", "bad-magic: not an IDX file");
    expect_idx_error("float-type", "good-labels", "element type 0x0d is not supported");
    expect_idx_error("two-dims", "good-labels", "has 2 dimensions, expected 3 to 4$");
    expect_idx_error("short-images", "good-labels", "short-images: truncated: expected 36 bytes of images");
    expect_idx_error("good-images", "three-labels", "has 4 images but");
    expect_idx_error("empty", "good-labels", "empty: truncated");
    expect_idx_error("missing", "good-labels", "missing: cannot open");
    expect_idx_error("cut.gz", "good-labels", "cut.gz:");
    expect_idx_error("flipped.gz", "good-labels", "flipped.gz:");
    expect_idx_error("good-images", "3d-labels", "3d-labels: IDX file has 3 dimensions, expected 1$");
    expect_idx_error("trailing-images", "good-labels", "trailing-images: 1 bytes after the last of its 4 items");
    expect_idx_error("trailing-images.gz", "good-labels", "trailing-images.gz: 1 bytes after the last of its 4");
    expect_idx_error("good-images", "trailing-labels", "trailing-labels: 3 bytes after the last of its 4 items");
    /* A label beyond the model's classes is the labels file's fault. */
    d = NULL;
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);
    assert_string_equal(st_dataset_label_source(d), lp);
    assert_string_equal(st_dataset_source(d), ip);
    st_dataset_destroy(d);
    path_of(ip, sizeof ip, "good-images.gz");
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);  /* gzip itself is fine */
    st_dataset_destroy(d);
}

static void test_cifar_reader(void **state)
{
    (void)state;
    uint8_t rec[2 * 3073];
    memset(rec, 7, sizeof rec);
    rec[0] = 3;
    rec[3073] = 9;
    write_bytes("cifar.bin", rec, sizeof rec);
    char p[512];
    path_of(p, sizeof p, "cifar.bin");
    const char *paths[] = {p};
    st_dataset *d = NULL;
    assert_int_equal(st_dataset_load_cifar(&d, paths, 1, false), ST_OK);
    assert_int_equal(st_dataset_size(d), 2);
    assert_int_equal(st_dataset_label(d, 1), 9);
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    assert_true(c == 3 && h == 32 && w == 32);
    st_dataset_destroy(d);
    write_bytes("cifar-short.bin", rec, 3073 + 100);
    path_of(p, sizeof p, "cifar-short.bin");
    assert_int_equal(st_dataset_load_cifar(&d, paths, 1, false), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "not a whole number of 3073-byte CIFAR-10 records"));
    rec[0] = 12;
    write_bytes("cifar-label.bin", rec, 3073);
    path_of(p, sizeof p, "cifar-label.bin");
    assert_int_equal(st_dataset_load_cifar(&d, paths, 1, false), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "label 12"));
}

static void test_sampler_shards_like_distributed_sampler(void **state)
{
    (void)state;
    uint32_t a[1000], b[1000];
    st_epoch_order(a, 1000, 5, 0);
    st_epoch_order(b, 1000, 5, 0);
    assert_memory_equal(a, b, sizeof a);  /* seeded */
    st_epoch_order(b, 1000, 5, 1);
    assert_true(memcmp(a, b, sizeof a) != 0);  /* reshuffled every epoch */
    char seen[1000] = {0};
    for (int i = 0; i < 1000; i++) {
        assert_true(a[i] < 1000);
        assert_int_equal(seen[a[i]]++, 0);  /* a permutation */
    }
}

/* ---------------------------------------------------------- checkpoints -- */

static void test_checkpoint_format_and_corruption(void **state)
{
    (void)state;
    float p[5] = {1, 2, 3, 4, 5}, o[5] = {0.5f, 0, 0, 0, 1};
    st_ckpt c = {.model_text = "input 1 1 1\nlinear 5\n", .params = p, .nparams = 5, .optim_state = o, .noptim = 5,
                 .epoch = 3, .epoch_pos = 640, .step = 99, .seed = 7, .world_size = 2};
    char path[512];
    path_of(path, sizeof path, "unit.ckpt");
    assert_int_equal(st_ckpt_write(path, &c), ST_OK);
    st_ckpt r = read_ckpt("unit.ckpt");
    assert_string_equal(r.model_text, c.model_text);
    assert_int_equal(r.nparams, 5);
    assert_memory_equal(r.params, p, sizeof p);
    assert_int_equal(r.step, 99);
    assert_int_equal(r.epoch_pos, 640);
    st_ckpt_free(&r);

    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    uint8_t *bytes = malloc((size_t)sb.st_size);
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(bytes, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    const struct {
        const char *name, *fragment;
        size_t len;
        long flip;
    } bad[] = {{"truncated.ckpt", "truncated", (size_t)sb.st_size - 9, -1},
               {"flipped.ckpt", "checksum mismatch", (size_t)sb.st_size, 60},
               {"magic.ckpt", "not a shmtrain checkpoint", (size_t)sb.st_size, 2},
               {"tiny.ckpt", "not a shmtrain checkpoint", 10, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (bad[i].flip >= 0)
            bytes[bad[i].flip] ^= 0x40;
        write_bytes(bad[i].name, bytes, bad[i].len);
        if (bad[i].flip >= 0)
            bytes[bad[i].flip] ^= 0x40;
        char bp[512];
        path_of(bp, sizeof bp, bad[i].name);
        st_ckpt x;
        assert_int_equal(st_ckpt_read(bp, &x), ST_ERR_FORMAT);
        if (!strstr(st_last_error(), bad[i].fragment) || !strstr(st_last_error(), bad[i].name))
            fail_msg("%s: '%s'", bad[i].name, st_last_error());
    }
    free(bytes);
    /* A write into a directory that does not exist fails and leaves nothing. */
    char nowhere[600];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/x.ckpt", tr_dir);
    assert_int_equal(st_ckpt_write(nowhere, &c), ST_ERR_IO);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_readers_refuse_bad_files),
        cmocka_unit_test(test_cifar_reader),
        cmocka_unit_test(test_sampler_shards_like_distributed_sampler),
        cmocka_unit_test(test_checkpoint_format_and_corruption),
    };
    return TRAINRUN_GROUP("test_readers", tests, argc, argv);
}
