/* Test helper: the trainer as its users run it (shmrun -n N -- shmtrain
 * ...), in a directory of its own, on a learnable synthetic "Fashion-MNIST"
 * (class k: a bright bar whose place depends on k, plus noise) or on text,
 * shared by the tests that train (test_train, test_bf16_train, test_text).
 *
 * trainrun_setup() reads $SHMRUN and $SHMTRAIN (set by ctest) and makes the
 * directory tr_dir; trainrun_images() writes the image data there (train:
 * 2048 images, test: 512); trainrun_teardown() removes the directory.  Helpers use CMocka's assertions, so call
 * them from the test runner, not from a forked child. */
#ifndef SHMTRAIN_TESTS_TRAINRUN_H
#define SHMTRAIN_TESTS_TRAINRUN_H

#include <stddef.h>
#include <stdint.h>

#include "forkranks.h"
#include "shmtrain/ckpt.h"

extern const char *tr_shmrun, *tr_shmtrain;
extern char tr_dir[256];

struct CMUnitTest;
/* Run a group of tests that train (cmocka_run_group_tests): set up in the
 * group's own directory (trainrun_setup(name)) with the synthetic images
 * written, torn down after; argv picks the cases (st_test_half). */
int trainrun_group(const char *name, const struct CMUnitTest *tests, size_t count, int argc, char **argv);
#define TRAINRUN_GROUP(name, tests, argc, argv) trainrun_group(name, tests, sizeof(tests) / sizeof *(tests), argc, argv)
int trainrun_setup(const char *name);   /* 0, or -1 when the environment or the directory fails */
void trainrun_images(void);
int trainrun_teardown(void);

/* tr_dir/name */
void path_of(char *out, size_t len, const char *name);
void write_bytes(const char *name, const void *p, size_t n);
/* What np.save writes (version 1.0): descr as "<f4", shape as "(2, 3)". */
void write_npy(const char *name, const char *descr, const char *shape, const void *data, size_t bytes,
               bool fortran);
void write_gz(const char *name, const void *p, size_t n);
/* IDX bytes: header + payload. */
size_t idx(uint8_t *out, uint8_t type, int ndims, const uint32_t *dims, const uint8_t *data, size_t n);
void make_synthetic(const char *prefix, uint32_t n, uint64_t seed);
/* A file's text, "" when it is missing (the run wrote nothing there). */
char *slurp_or_empty(const char *path);
/* Wait (up to a minute) until `name` in tr_dir holds `needle`. */
void wait_for_text(const char *name, const char *needle);
/* Run argv in tr_dir; with `interrupt_after` > 0, SIGINT it that many seconds
 * in, counted from when `ready` (a metrics file in tr_dir, or NULL) says
 * training has begun. */
struct child_run run_argv_ready(char *const argv[], double interrupt_after, const char *ready);
struct child_run run_argv(char *const argv[], double interrupt_after);

/* The synthetic data set's four files. */
struct data_files { char tri[300], trl[300], tei[300], tel[300]; };
struct data_files synthetic_files(void);
void assert_no_sweep_segments(void);
/* shmrun -n N -- shmtrain --model mlp <synthetic data> --checkpoint ckpt
 * --metrics metrics.jsonl --quiet <extra...> (a later --model wins). */
struct child_run train(int n, const char *ckpt, char *const extra[], double interrupt_after);
/* shmrun -n N -- shmtrain --model mlp <data flags> --max-steps 30
 * --checkpoint ckpt ...; N = 0: shmtrain alone. For the data formats' tests. */
struct child_run train_with_data(int n, const char *ckpt, char *const data[]);
/* Its checkpoint, the run failing the test unless it succeeds; *out its
 * standard output (the caller frees it) when out is not NULL. */
st_ckpt trained_with_data(int n, const char *ckpt, char *const data[], char **out);
st_ckpt read_ckpt(const char *name);
/* The largest |a - b| over the parameters (same count asserted), and in
 * *scale the largest |b|. */
double ckpt_max_abs_diff(const st_ckpt *a, const st_ckpt *b, double *scale);

#endif
