/* The newer formats against hostile inputs (issue 44): a FIFO named like an
 * image, an export onto its own checkpoint (through another name or a hard
 * link), safetensors files the format's reference reader refuses (each rule
 * with a hand-made file), outputs that are inputs, and the messages a user
 * meets at an image root that is missing, a PNG header claiming 10^10
 * pixels, and a root holding train/ but no val/. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainrun.h"
#include "shmtrain/data.h"
#include "shmtrain/nn.h"
#include "shmtrain/train.h"

static void make_dir(const char *name)
{
    char path[512];
    path_of(path, sizeof path, name);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", path, strerror(errno));
}

/* An 8x8 RGB PNG. */
static void write_png(const char *name)
{
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_true(f && png && info && !setjmp(png_jmpbuf(png)));
    png_init_io(png, f);
    png_set_IHDR(png, info, 8, 8, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    uint8_t row[8 * 3];
    for (int y = 0; y < 8; y++) {
        for (int i = 0; i < 8 * 3; i++)
            row[i] = (uint8_t)(y * 31 + i * 7);
        png_write_row(png, row);
    }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

static const st_image_spec RGB8 = {.channels = 3, .height = 8, .width = 8};

static const char *folder_error(const char *root, double *seconds)
{
    char path[512];
    path_of(path, sizeof path, root);
    st_dataset *t = NULL, *v = NULL;
    const double t0 = mono_now();
    const st_status st = st_dataset_load_folder(&t, &v, path, &RGB8);
    if (seconds)
        *seconds = mono_now() - t0;
    if (st == ST_OK) {
        st_dataset_destroy(t);
        st_dataset_destroy(v);
        return "success";
    }
    return st_last_error();
}

/* ---------------------------------------------------------------- FIFO -- */

/* A FIFO named x.png among a class's images: named and refused at once,
 * never opened (an open for reading would wait for a writer forever), by
 * the listing and, were it to change under it, by the decoder's own check;
 * the trainer run ends within a second. */
static void test_fifo_named_like_an_image(void **state)
{
    (void)state;
    make_dir("fifo"), make_dir("fifo/a"), make_dir("fifo/b");
    write_png("fifo/a/1.png"), write_png("fifo/b/1.png");
    char fifo[512];
    path_of(fifo, sizeof fifo, "fifo/b/x.png");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    double took;
    const char *err = folder_error("fifo", &took);
    if (!strstr(err, "fifo/b/x.png: named like an image but not a regular file (a FIFO)"))
        fail_msg("got '%s'", err);
    assert_true(took < 1.0);
    char root[512];
    path_of(root, sizeof root, "fifo");
    const double t0 = mono_now();
    struct child_run r = run_argv((char *[]){(char *)tr_shmtrain, "--model", "resnet", "--image-folder", root,
                                             "--max-steps", "1", "--quiet", NULL}, 0);
    assert_true(mono_now() - t0 < 5.0);  /* the process's own start counted */
    assert_int_not_equal(r.code, 0);
    assert_non_null(strstr(r.err, "x.png: named like an image but not a regular file (a FIFO)"));
    child_run_free(&r);
    unlink(fifo);
}

/* A symlink loop where a class folder should be: named, not followed. */
static void test_symlink_loop_is_named(void **state)
{
    (void)state;
    make_dir("loop"), make_dir("loop/a");
    write_png("loop/a/1.png");
    char link[512];
    path_of(link, sizeof link, "loop/b");
    assert_int_equal(symlink("b", link), 0);
    const char *err = folder_error("loop", NULL);
    if (!strstr(err, "loop/b: cannot look at it: Too many levels of symbolic links"))
        fail_msg("got '%s'", err);
}

/* ------------------------------------------------------------ messages -- */

static void test_folder_messages(void **state)
{
    (void)state;
    const char *err = folder_error("no_such_root", NULL);
    if (!strstr(err, "no_such_root: does not exist"))
        fail_msg("a missing root: '%s'", err);
    write_bytes("plainfile", "x", 1);
    err = folder_error("plainfile", NULL);
    if (!strstr(err, "plainfile: not a directory"))
        fail_msg("a file as the root: '%s'", err);
    /* a PNG whose header claims 100000 x 100000 pixels, and nothing else */
    make_dir("huge"), make_dir("huge/a");
    static const uint8_t head[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                   0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0, 8, 2, 0, 0, 0, 0, 0, 0, 0};
    write_bytes("huge/a/1.png", head, sizeof head);
    err = folder_error("huge", NULL);
    if (!strstr(err, "huge/a/1.png: a PNG of 100000 x 100000 pixels: larger than this reader's 16384 pixels a side"))
        fail_msg("a huge PNG: '%s'", err);
    /* train/ and no val/: the training split, a fraction held out later */
    make_dir("onlytrain"), make_dir("onlytrain/train"), make_dir("onlytrain/train/cat"),
        make_dir("onlytrain/train/dog");
    write_png("onlytrain/train/cat/1.png"), write_png("onlytrain/train/dog/1.png");
    char path[512];
    path_of(path, sizeof path, "onlytrain");
    st_dataset *t = NULL, *v = NULL;
    assert_int_equal(st_dataset_load_folder(&t, &v, path, &RGB8), ST_OK);
    assert_int_equal(st_dataset_size(t), 2);
    assert_int_equal(st_dataset_max_label(t), 1);  /* two classes, cat and dog, not one called "train" */
    assert_null(v);
    st_dataset_destroy(t);
    make_dir("onlyval"), make_dir("onlyval/val"), make_dir("onlyval/val/cat");
    write_png("onlyval/val/cat/1.png");
    err = folder_error("onlyval", NULL);
    if (!strstr(err, "onlyval: a val/ folder but no train/ beside it"))
        fail_msg("val/ alone: '%s'", err);
}

/* --------------------------------------------------------------- export -- */

static uint64_t file_hash(const char *name)
{
    char path[512];
    path_of(path, sizeof path, name);
    char *bytes = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb"), *m = open_memstream(&bytes, &n);
    assert_true(f && m);
    for (int c; (c = fgetc(f)) != EOF;)
        fputc(c, m);
    fclose(f);
    fclose(m);
    const uint64_t h = fnv1a(bytes, n);
    free(bytes);
    return h;
}

static struct child_run export_to(const char *ckpt, const char *out)
{
    char c[512], o[512];
    path_of(c, sizeof c, ckpt), path_of(o, sizeof o, out);
    return run_argv((char *[]){(char *)tr_shmtrain, "export", "--checkpoint", c, "--out", o, NULL}, 0);
}

/* shmtrain export onto its own checkpoint, by its name, through a hard link
 * and through a symbolic one: refused, the checkpoint's bytes unchanged. */
static void test_export_onto_its_checkpoint(void **state)
{
    (void)state;
    struct child_run r = train(1, "self.ckpt", (char *[]){"--max-steps", "2", NULL}, 0);
    assert_int_equal(r.code, 0);
    child_run_free(&r);
    const uint64_t before = file_hash("self.ckpt");
    char ckpt[512], hard[512], soft[512];
    path_of(ckpt, sizeof ckpt, "self.ckpt"), path_of(hard, sizeof hard, "hard.ckpt");
    path_of(soft, sizeof soft, "soft");
    assert_int_equal(link(ckpt, hard), 0);
    assert_int_equal(symlink("self.ckpt", soft), 0);
    const char *outs[] = {"self.ckpt", "hard.ckpt", "soft", "./self.ckpt"};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
        r = export_to("self.ckpt", outs[i]);
        assert_int_not_equal(r.code, 0);
        if (!strstr(r.err, "is the checkpoint it exports"))
            fail_msg("--out %s: %s", outs[i], r.err);
        child_run_free(&r);
        assert_int_equal(file_hash("self.ckpt"), before);
    }
    r = export_to("self.ckpt", "other.safetensors");  /* and another name works */
    assert_int_equal(r.code, 0);
    child_run_free(&r);
}

/* A trainer's output that is one of its inputs: refused before anything is
 * read, the input untouched. */
static void test_outputs_are_not_inputs(void **state)
{
    (void)state;
    struct data_files d = synthetic_files();
    char copy[512];
    path_of(copy, sizeof copy, "labels-copy");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", d.trl, copy);
    assert_int_equal(system(cmd), 0);
    const uint64_t before = file_hash("labels-copy");
    struct child_run r = run_argv((char *[]){(char *)tr_shmtrain, "--model", "mlp", "--train-images", d.tri,
                                             "--train-labels", copy, "--test-images", d.tei, "--test-labels", d.tel,
                                             "--metrics", copy, "--max-steps", "1", "--quiet", "--overwrite",
                                             NULL}, 0);  /* even --overwrite writes over no input */
    assert_int_not_equal(r.code, 0);
    if (!strstr(r.err, "--metrics") || !strstr(r.err, "is the same file as --train-labels"))
        fail_msg("%s", r.err);
    child_run_free(&r);
    assert_int_equal(file_hash("labels-copy"), before);
}

/* ---------------------------------------------------------- safetensors -- */

/* A file of the 8-byte length (or `length` when not 0), the header, and
 * `data` zero bytes. */
static void write_sft(const char *name, const char *header, size_t data, uint64_t length)
{
    char path[512];
    path_of(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const uint64_t n = length ? length : strlen(header);
    assert_int_equal(fwrite(&n, 8, 1, f), 1);
    fputs(header, f);
    for (size_t i = 0; i < data; i++)
        fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

/* --init-from of the file into mlp: refused with `status`, naming `needle`. */
static void expect_sft(const char *header, size_t data, uint64_t length, st_status status, const char *needle)
{
    write_sft("t.safetensors", header, data, length);
    char path[512];
    path_of(path, sizeof path, "t.safetensors");
    st_model *m = NULL;
    assert_int_equal(st_model_load(&m, "mlp"), ST_OK);
    float *params = calloc(st_model_param_count(m) + 1, sizeof(float));
    float *buffers = calloc(st_model_buffer_count(m) + 1, sizeof(float));
    const st_status st = st_import_safetensors(path, m, params, buffers);
    if (st != status || !strstr(st_last_error(), needle))
        fail_msg("%s: status %d, '%s'; wanted %d with '%s'", header, (int)st, st_last_error(), (int)status, needle);
    free(params);
    free(buffers);
    st_model_destroy(m);
}

/* One tensor's header entry. */
#define T(name, dtype, shape, b, e)                                                                              \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":[" shape "],\"data_offsets\":[" #b "," #e "]}"

/* Each rule of the format (the reference reader's), a file that breaks it. */
static void test_safetensors_rules(void **state)
{
    (void)state;
    expect_sft("{" T("a", "F32", "2", 0, 8) "," T("b", "F32", "2", 4, 12) "}", 12, 0, ST_ERR_FORMAT,
               "tensor 'b' (bytes 4-12) overlaps 'a' (bytes 0-8)");
    expect_sft("{" T("a", "F32", "2", 0, 8) "," T("b", "F32", "2", 0, 8) "}", 8, 0, ST_ERR_FORMAT,
               "tensor 'b' (bytes 0-8) overlaps 'a' (bytes 0-8)");
    expect_sft("{" T("a", "F32", "2", 0, 8) "," T("b", "F32", "2", 12, 20) "}", 20, 0, ST_ERR_FORMAT,
               "bytes 8-12 of the data belong to no tensor (the gap before 'b')");
    expect_sft("{" T("a", "F32", "2", 4, 12) "}", 12, 0, ST_ERR_FORMAT,
               "bytes 0-4 of the data belong to no tensor (the gap before 'a')");
    expect_sft("{" T("a", "F32", "2", 0, 8) "}", 12, 0, ST_ERR_FORMAT,
               "the tensors end at byte 8 of the data, which runs to 12");
    /* past the data: named as such, not as a gap of bytes that do not exist (issue 62) */
    expect_sft("{" T("a", "F32", "2", 0, 8) "," T("b", "F32", "2", 12, 20) "}", 8, 0, ST_ERR_FORMAT,
               "tensor 'b' (bytes 12-20) runs past the data, which ends at byte 8");
    expect_sft("{" T("a", "F32", "3", 0, 8) "}", 8, 0, ST_ERR_FORMAT,
               "tensor 'a': data_offsets cover 8 bytes, its dtype and shape take 12");
    expect_sft("{" T("a", "F32", "2", 8, 0) "}", 8, 0, ST_ERR_FORMAT, "data_offsets [8, 0] run backwards");
    expect_sft("{" T("a", "F31", "2", 0, 8) "}", 8, 0, ST_ERR_FORMAT, "dtype 'F31' is not one of the format's");
    expect_sft("{\"__metadata__\":{\"step\":3}," T("a", "F32", "2", 0, 8) "}", 8, 0, ST_ERR_FORMAT,
               "__metadata__ 'step' is not a string");
    expect_sft("{" T("a", "F32", "2", 0, 8) "," T("a", "F32", "2", 8, 16) "}", 16, 0, ST_ERR_FORMAT,
               "tensor 'a' is given twice");
    expect_sft(" {" T("a", "F32", "2", 0, 8) "}", 8, 0, ST_ERR_FORMAT, "the header does not start with '{'");
    expect_sft("{}", 0, 100000001, ST_ERR_FORMAT, "a header of 100000001 bytes, past the format's limit");
    expect_sft("{}", 0, 4096, ST_ERR_FORMAT, "the header's length (4096 bytes) runs past the end of the file");
    expect_sft("{" T("a", "F32", "2", 0, 8) ",}", 8, 0, ST_ERR_FORMAT, "header:");
    /* a file that keeps every rule reaches the names: these are not mlp's */
    expect_sft("{\"__metadata__\":{\"format\":\"pt\"}," T("a", "F32", "2", 0, 8) "}", 8, 0, ST_ERR_MISMATCH,
               "tensor 'a' is not one of this model's");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_named_like_an_image),
        cmocka_unit_test(test_symlink_loop_is_named),
        cmocka_unit_test(test_folder_messages),
        cmocka_unit_test(test_export_onto_its_checkpoint),
        cmocka_unit_test(test_outputs_are_not_inputs),
        cmocka_unit_test(test_safetensors_rules),
    };
    return TRAINRUN_GROUP("test_hostile_formats", tests, argc, argv);
}
