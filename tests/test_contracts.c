/* Contracts written from their statements, not from the code (issue 33):
 * each one the suite checked only by a threshold or never at its edge, so
 * that a planted off-by-one passed.
 *
 *  - an evaluation scores every test sample (every validation window)
 *    exactly once, whatever world x batch;
 *  - the training windows of a text are exactly the legal ones;
 *  - which parameters decay (nanoGPT's rule: every tensor of 2 or more
 *    dimensions, no bias or norm parameter);
 *  - the algorithm an all-reduce runs at and around its threshold, and its
 *    result there;
 *  - the plan: disjoint core sets within the usable ones, sizes as
 *    documented, the rest reported as leftover, over many topologies. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkranks.h"
#include "shmtrain/coll.h"
#include "shmtrain/data.h"
#include "shmtrain/nn.h"
#include "shmtrain/optim.h"
#include "shmtrain/text.h"
#include "shmtrain/topo.h"

static char dir[256];

static const char *write_file(const char *name, const void *p, size_t n)
{
    static char path[4][512];
    static int next;
    char *out = path[next++ % 4];
    snprintf(out, 512, "%s/%s", dir, name);
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
    return out;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* n 1x2x2 images, sample i labelled i: a label names its sample. */
static st_dataset *numbered_images(uint32_t n)
{
    uint8_t *images = calloc(16 + 4 * n, 1), *labels = calloc(8 + n, 1);
    be32(images, 0x803), be32(images + 4, n), be32(images + 8, 2), be32(images + 12, 2);
    be32(labels, 0x801), be32(labels + 4, n);
    for (uint32_t i = 0; i < n; i++) {
        memset(images + 16 + 4 * i, (int)i, 4);
        labels[8 + i] = (uint8_t)i;
    }
    st_dataset *d = NULL;
    const char *ip = write_file("images", images, 16 + 4 * n), *lp = write_file("labels", labels, 8 + n);
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);
    free(images), free(labels);
    return d;
}

/* The evaluation loop as the trainer runs it (report.c): global batches of
 * world x batch from 0, each rank scoring its first `valid`. */
static void test_eval_scores_every_test_sample_once(void **state)
{
    (void)state;
    const uint32_t sizes[] = {1, 7, 12, 64, 100};
    const int worlds[] = {1, 2, 3, 4}, batches[] = {1, 3, 4, 64};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        st_dataset *d = numbered_images(sizes[s]);
        const float mean[1] = {0}, std[1] = {1};
        for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++)
            for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
                const int world = worlds[w], batch = batches[b];
                int seen[256] = {0}, labels[64];
                float x[64 * 4];
                for (size_t first = 0; first < sizes[s]; first += (size_t)world * batch)
                    for (int rank = 0; rank < world; rank++) {
                        st_batch_spec spec = {.first = first, .world = world, .rank = rank, .batch = batch,
                                              .mean = mean, .std = std};
                        int valid = -1;
                        st_batch_fill(d, &spec, x, labels, &valid);
                        assert_in_range(valid, 0, batch);
                        for (int i = 0; i < valid; i++)
                            seen[labels[i]]++;
                    }
                for (uint32_t i = 0; i < sizes[s]; i++)
                    if (seen[i] != 1)
                        fail_msg("%u test samples, %d x %d: sample %u scored %d times", sizes[s], world, batch, i,
                                 seen[i]);
            }
        st_dataset_destroy(d);
    }
}

/* A validation text whose windows each start with a letter of their own. */
static st_text *lettered_text(int context, int windows, size_t train_len)
{
    char train[64], val[128];
    assert_true(train_len < sizeof train && (size_t)(context * windows + 1) < sizeof val);
    for (size_t i = 0; i < train_len; i++)
        train[i] = (char)('A' + i % 26);
    for (int i = 0; i < context * windows + 1; i++)
        val[i] = (char)('!' + i);  /* distinct bytes: position = byte - '!' */
    const char *paths[2] = {write_file("train.txt", train, train_len),
                            write_file("val.txt", val, (size_t)(context * windows + 1))};
    st_text *t = NULL;
    assert_int_equal(st_text_load(&t, paths, 2, ST_TEXT_BYTES), ST_OK);
    return t;
}

static void test_eval_scores_every_validation_window_once(void **state)
{
    (void)state;
    const int context = 3, windows = 11;
    st_text *t = lettered_text(context, windows, 8);
    assert_int_equal(st_text_eval_windows(t, context, 0), windows);
    assert_int_equal(st_text_eval_windows(t, context, 4), 4);
    {  /* context x k tokens: the last window's next token is missing, k - 1 windows */
        char val[33];
        for (int i = 0; i < 33; i++)
            val[i] = (char)('!' + i);
        const char *paths[2] = {write_file("train2.txt", "ABCDEFGH", 8), write_file("val2.txt", val, 33)};
        st_text *exact = NULL;
        assert_int_equal(st_text_load(&exact, paths, 2, ST_TEXT_BYTES), ST_OK);
        assert_int_equal(st_text_eval_windows(exact, context, 0), 10);
        st_text_destroy(exact);
    }
    for (int world = 1; world <= 4; world++)
        for (int batch = 1; batch <= 5; batch += 2) {
            int seen[16] = {0}, y[5 * 3], valid;
            int32_t x[5 * 3];
            for (size_t first = 0; first < (size_t)windows; first += (size_t)world * batch)
                for (int rank = 0; rank < world; rank++) {
                    st_text_eval_batch(t, first, windows, world, rank, batch, context, x, y, &valid);
                    assert_in_range(valid, 0, batch);
                    for (int i = 0; i < valid; i++) {
                        const int at = x[i * context] - '!';
                        assert_int_equal(at % context, 0);
                        seen[at / context]++;
                        for (int j = 0; j < context; j++)  /* y is x shifted by one */
                            assert_int_equal(y[i * context + j], x[i * context + j] + 1);
                    }
                }
            for (int k = 0; k < windows; k++)
                if (seen[k] != 1)
                    fail_msg("%d windows, %d x %d: window %d scored %d times", windows, world, batch, k, seen[k]);
        }
    st_text_destroy(t);
}

/* A training split of context + 2 tokens has exactly two windows of
 * context + 1 (inputs and their next tokens): starting at 0 and at 1.  The
 * split is the allocation's end (text.c), so a window one token later also
 * reads past it under ASan. */
static void test_training_windows_are_exactly_the_legal_ones(void **state)
{
    (void)state;
    const int context = 5;
    st_text *t = lettered_text(context, 2, context + 2);
    assert_int_equal(st_text_check(t, context, 2), ST_OK);
    assert_int_not_equal(st_text_check(t, context, 3), ST_OK);  /* only two distinct windows exist */
    int starts[8] = {0};
    int32_t x[2 * 5];
    int y[2 * 5];
    for (uint64_t step = 0; step < 64; step++) {
        assert_int_equal(st_text_train_batch(t, 7, step, 1, 0, 1, context, x, y), ST_OK);
        const int start = x[0] - 'A';
        assert_in_range(start, 0, 7);
        starts[start]++;
        for (int j = 0; j < context; j++) {
            assert_int_equal(x[j], 'A' + start + j);
            assert_int_equal(y[j], 'A' + start + j + 1);
        }
    }
    assert_true(starts[0] > 0 && starts[1] > 0);
    for (int s = 2; s < 8; s++)
        assert_int_equal(starts[s], 0);
    st_text_destroy(t);
}

/* nanoGPT's configure_optimizers: parameters of 2 or more dimensions decay
 * (convolution and linear weights, the token and position tables), biases,
 * batch- and layer-norm parameters do not.  The counts below come from the
 * presets' shapes, not from the mask code. */
static void test_decay_mask_of_every_preset(void **state)
{
    (void)state;
    const struct {
        const char *preset;
        size_t decayed, total;
    } want[] = {
        {"mlp", 784 * 256 + 256 * 128 + 128 * 10, 235146},
        {"lenet", 6 * 25 + 16 * 6 * 25 + 400 * 120 + 120 * 84 + 84 * 10, 61706},
        {"cnn", 32 * 9 + 64 * 32 * 9 + 1600 * 128 + 128 * 10, 225034},
        /* 3x3 convolutions (no bias), two 1x1 projections (biased), the head */
        {"resnet", 16 * 3 * 9 + 2 * 16 * 16 * 9 + 32 * 16 * 9 + 32 * 32 * 9 + 64 * 32 * 9 + 64 * 64 * 9 + 16 * 32 +
                       32 * 64 + 64 * 10, 0},
        /* token table 256 x 128, positions 64 x 128, per block q/k/v, proj, fc, fc proj */
        {"gpt-mini", 256 * 128 + 64 * 128 + 4 * (128 * 384 + 128 * 128 + 128 * 512 + 512 * 128), 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        st_model *m = NULL;
        assert_int_equal(st_model_load(&m, want[i].preset), ST_OK);
        const size_t n = st_model_param_count(m);
        if (want[i].total)
            assert_int_equal(n, want[i].total);
        uint8_t *mask = malloc(n);
        st_model_decay_mask(m, mask);
        size_t decayed = 0;
        for (size_t k = 0; k < n; k++) {
            assert_in_range(mask[k], 0, 1);
            decayed += mask[k];
        }
        if (decayed != want[i].decayed)
            fail_msg("%s: %zu parameters decay, nanoGPT's rule says %zu", want[i].preset, decayed, want[i].decayed);
        free(mask);
        st_model_destroy(m);
    }
}

/* The optimizers as PyTorch states them, one step on numbers whose result
 * is known in closed form (tolerances: a few float roundings). */
static void test_optimizer_steps_in_closed_form(void **state)
{
    (void)state;
    /* AdamW's decoupled decay applies to masked parameters only: with a
     * zero gradient m = v = 0, so only the decay moves anything. */
    const uint8_t mask[2] = {1, 0};
    st_optim_config adamw = {.kind = ST_OPTIM_ADAMW, .weight_decay = 0.1f, .decay_mask = mask};
    st_optim *o = NULL;
    assert_int_equal(st_optim_create(&o, 2, &adamw), ST_OK);
    float p[2] = {1, 1}, g[2] = {0, 0};
    st_optim_step(o, p, g, 0.1f);
    assert_float_equal(p[0], 1.0f - 0.1f * 0.1f, 1e-7);
    assert_float_equal(p[1], 1.0f, 0);  /* a bias or norm parameter: not decayed */
    st_optim_destroy(o);
    /* SGD with Nesterov momentum, first step: the buffer is the gradient, and
     * the step lr * (g + mu * buf) = lr * (1 + mu) * g (torch.optim.SGD). */
    st_optim_config nesterov = {.kind = ST_OPTIM_SGD, .momentum = 0.9f, .nesterov = true};
    assert_int_equal(st_optim_create(&o, 1, &nesterov), ST_OK);
    float q = 1, dq = 2;
    st_optim_step(o, &q, &dq, 0.1f);
    assert_float_equal(q, 1.0f - 0.1f * 1.9f * 2.0f, 1e-6);
    st_optim_destroy(o);
    /* Clipping: a norm above the limit comes down to it, one below stays. */
    float over[2] = {3, 4}, under[2] = {0.3f, 0.4f};
    assert_float_equal(st_clip_grad_norm(over, 2, 4.0f), 5.0f, 1e-6);
    assert_float_equal(sqrtf(over[0] * over[0] + over[1] * over[1]), 4.0f, 1e-5);
    assert_float_equal(st_clip_grad_norm(under, 2, 4.0f), 0.5f, 1e-6);
    assert_float_equal(under[0], 0.3f, 0);
}

/* -------------------------------------------------------- all-reduce -- */

#define SMALL_BYTES 4096  /* the direct algorithm up to 1024 floats */

static int at_the_threshold(st_group *g, int rank, void *arg)
{
    (void)arg;
    const size_t edge = SMALL_BYTES / sizeof(float);
    float *buf = malloc((edge + 1) * sizeof *buf);
    for (size_t count = edge - 1; count <= edge + 1; count++) {
        const char *want = count <= edge ? "direct" : "ring-copy";
        const char *got = st_allreduce_algorithm(g, buf, count, ST_DTYPE_F32);
        if (strcmp(got, want)) {
            fprintf(stderr, "%zu floats: %s, expected %s\n", count, got, want);
            return 1;
        }
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(rank + 1) * (float)(i % 97);
        if (st_allreduce(g, buf, count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) != ST_OK)
            return 2;
        for (size_t i = 0; i < count; i++)
            if (buf[i] != 3.0f * (float)(i % 97))  /* ranks 1 + 2: exact in float */
                return 3;
    }
    free(buf);
    return 0;
}

static void test_allreduce_algorithm_at_its_threshold(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "threshold");
    st_group_config cfg = {.small_bytes = SMALL_BYTES, .job_id = job};
    assert_int_equal(run_ranks(2, &cfg, at_the_threshold, NULL), 0);
}

/* A buffer is zero-copy only when it lies wholly inside the region: one
 * that runs a float past its end is staged (the ring would read past a
 * peer's region), and both sum right. */
static int at_the_region_edge(st_group *g, int rank, void *arg)
{
    (void)arg;
    size_t bytes;
    float *region = st_group_buffer(g, &bytes);
    const size_t n = bytes / sizeof(float), count = 4096;  /* past the direct threshold: a ring */
    float *inside = region + n - count, *across = region + n - count + 1;
    if (strcmp(st_allreduce_algorithm(g, inside, count, ST_DTYPE_F32), "ring") ||
        strcmp(st_allreduce_algorithm(g, across, count, ST_DTYPE_F32), "ring-copy") ||
        strcmp(st_allreduce_algorithm(g, region, n, ST_DTYPE_F32), "ring"))
        return 1;
    float *own = malloc(count * sizeof *own);
    for (size_t i = 0; i < count; i++)
        own[i] = (float)(rank + 1) * (float)(i % 31);
    memcpy(inside, own, count * sizeof *own);
    if (st_allreduce(g, inside, count, ST_DTYPE_F32, ST_DTYPE_F32, ST_SUM) != ST_OK)
        return 2;
    for (size_t i = 0; i < count; i++)
        if (inside[i] != 3.0f * (float)(i % 31))
            return 3;
    free(own);
    return 0;
}

static void test_zero_copy_only_inside_the_region(void **state)
{
    (void)state;
    char job[64];
    test_job_id(job, sizeof job, "zcedge");
    st_group_config cfg = {.small_bytes = SMALL_BYTES, .zero_copy_bytes = 64 * 1024, .job_id = job};
    assert_int_equal(run_ranks(2, &cfg, at_the_region_edge, NULL), 0);
}

/* ---------------------------------------------------------- data files -- */

/* Labels at exactly the classes' bound: 9 is CIFAR-10's last, 10 is not;
 * 99 and 100 for CIFAR-100 (its fine label, the record's second byte). */
static void test_cifar_labels_at_the_bound(void **state)
{
    (void)state;
    const struct { bool cifar100; int label; st_status want; } cases[] = {
        {false, 9, ST_OK}, {false, 10, ST_ERR_FORMAT}, {true, 99, ST_OK}, {true, 100, ST_ERR_FORMAT}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t record[2 + 3072] = {0};
        const size_t label_bytes = cases[i].cifar100 ? 2 : 1;
        record[label_bytes - 1] = (uint8_t)cases[i].label;
        const char *paths[1] = {write_file("batch.bin", record, label_bytes + 3072)};
        st_dataset *d = NULL;
        if (st_dataset_load_cifar(&d, paths, 1, cases[i].cifar100) != cases[i].want)
            fail_msg("CIFAR-%s label %d: expected %s", cases[i].cifar100 ? "100" : "10", cases[i].label,
                     cases[i].want == ST_OK ? "accepted" : "refused");
        st_dataset_destroy(d);
    }
}

/* Augmentation is torchvision's RandomCrop(pad 4) + RandomHorizontalFlip:
 * every augmented image is the original mirrored or not, shifted by at most
 * 4 pixels each way, zeros where the shift uncovers.  Over 300 epochs every
 * output must be exactly one such transform. */
static void test_augmentation_is_a_crop_and_a_flip(void **state)
{
    (void)state;
    enum { H = 8, W = 8 };
    uint8_t images[16 + H * W], labels[9];
    be32(images, 0x803), be32(images + 4, 1), be32(images + 8, H), be32(images + 12, W);
    be32(labels, 0x801), be32(labels + 4, 1);
    labels[8] = 0;
    for (int i = 0; i < H * W; i++)
        images[16 + i] = (uint8_t)(1 + i);  /* distinct and non-zero: a pixel names its place */
    const char *ip = write_file("aug-images", images, sizeof images);
    const char *lp = write_file("aug-labels", labels, sizeof labels);
    st_dataset *d = NULL;
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_OK);
    const float mean[1] = {0}, std[1] = {1};
    int flips = 0;
    for (uint64_t epoch = 0; epoch < 300; epoch++) {
        st_batch_spec spec = {.world = 1, .batch = 1, .mean = mean, .std = std, .augment = true, .seed = 5,
                              .epoch = epoch};
        float x[H * W];
        int label;
        st_batch_fill(d, &spec, x, &label, NULL);
        int got[H * W], matches = 0, flipped = 0;
        for (int i = 0; i < H * W; i++)
            got[i] = (int)(x[i] * 255.0f + 0.5f);
        for (int flip = 0; flip <= 1; flip++)
            for (int dy = -4; dy <= 4; dy++)
                for (int dx = -4; dx <= 4; dx++) {
                    bool same = true;
                    for (int i = 0; i < H && same; i++)
                        for (int j = 0; j < W && same; j++) {
                            const int si = i + dy, sj = (flip ? W - 1 - j : j) + dx;
                            const int want = si >= 0 && si < H && sj >= 0 && sj < W ? 1 + si * W + sj : 0;
                            same = got[i * W + j] == want;
                        }
                    matches += same;
                    flipped |= same && flip;
                }
        if (matches == 0)
            fail_msg("epoch %llu: the augmented image is no crop-and-flip of the original", (unsigned long long)epoch);
        flips += flipped;
    }
    assert_in_range(flips, 100, 200);  /* a fair coin: 150 expected */
    st_dataset_destroy(d);
}

/* --train-subset N / --test-subset N: exactly the first N (all when N is
 * at least the size). */
static void test_subset_keeps_exactly_n(void **state)
{
    (void)state;
    const size_t keep[] = {1, 9, 10, 11, 1000};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
        st_dataset *d = numbered_images(10);
        st_dataset_truncate(d, keep[i]);
        assert_int_equal(st_dataset_size(d), keep[i] < 10 ? keep[i] : 10);
        assert_int_equal(st_dataset_label(d, st_dataset_size(d) - 1), (int)st_dataset_size(d) - 1);
        st_dataset_destroy(d);
    }
}

/* An IDX dimension of 0 is refused where it is read, naming it. */
static void test_idx_zero_dimension(void **state)
{
    (void)state;
    uint8_t images[16], labels[8];
    be32(images, 0x803), be32(images + 4, 2), be32(images + 8, 0), be32(images + 12, 4);
    be32(labels, 0x801), be32(labels + 4, 2);
    const char *ip = write_file("zero-images", images, sizeof images);
    const char *lp = write_file("zero-labels", labels, sizeof labels);
    st_dataset *d = NULL;
    assert_int_equal(st_dataset_load_idx(&d, ip, lp), ST_ERR_FORMAT);
    assert_non_null(strstr(st_last_error(), "IDX dimension 1 is 0"));
}

/* An epoch's order is a seeded Fisher-Yates shuffle: over many seeds every
 * order of 3 samples appears, each about a sixth of the time (600 seeds:
 * 100 each; a count under 50 has probability below 1e-7 per order). */
static void test_epoch_order_reaches_every_permutation(void **state)
{
    (void)state;
    int seen[3][3][3] = {{{0}}};
    for (uint64_t seed = 0; seed < 600; seed++) {
        uint32_t order[3];
        st_epoch_order(order, 3, seed, 0);
        assert_true(order[0] < 3 && order[1] < 3 && order[2] < 3);
        assert_true(order[0] != order[1] && order[1] != order[2] && order[0] != order[2]);
        seen[order[0]][order[1]][order[2]]++;
    }
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++)
                if (a != b && b != c && a != c && seen[a][b][c] < 50)
                    fail_msg("order %d %d %d came %d times in 600 seeds (expected about 100)", a, b, c, seen[a][b][c]);
}

/* ------------------------------------------------------------- planner -- */

static int popcount_pus(const st_plan *p, const char *usable_list)
{
    /* Every instance's PUs within the usable set and disjoint from every
     * other's and from the leftovers. */
    static unsigned char owner[1024];
    memset(owner, 0, sizeof owner);
    int used = 0;
    for (int r = 0; r < p->ninstances; r++)
        for (int k = 0; k < p->inst[r].npus; k++) {
            const int pu = p->inst[r].pus[k];
            assert_in_range(pu, 0, 1023);
            if (owner[pu])
                fail_msg("PU %d is in two instances' sets (%s)", pu, usable_list);
            owner[pu] = 1;
            used++;
        }
    return used;
}

static int count_list(const char *list)
{
    int n = 0;
    for (const char *p = list; *p;) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        n += (int)(b - a + 1);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void test_plan_properties_over_many_topologies(void **state)
{
    (void)state;
    const struct {
        const char *synthetic;
        int numa, cores;
    } machines[] = {
        {"pack:1 numa:1 core:2 pu:1", 1, 2},      {"pack:1 numa:1 core:6 pu:2", 1, 6},
        {"pack:2 numa:2 core:8 pu:2", 4, 32},     {"pack:1 numa:3 core:7 pu:1", 3, 21},
        {"pack:2 numa:4 l3:2 core:4 pu:2", 8, 64}, {"pack:1 numa:2 core:5 pu:2", 2, 10},
    };
    for (size_t m = 0; m < sizeof machines / sizeof *machines; m++) {
        st_topo *t = NULL;
        assert_int_equal(st_topo_create(&t, ST_TOPO_SYNTHETIC, machines[m].synthetic), ST_OK);
        const int cores = machines[m].cores;
        for (int n = 1; n <= cores; n++) {
            st_plan_request req = {.ninstances = n};
            st_plan *p = NULL;
            if (st_plan_create(&p, t, &req) != ST_OK)
                fail_msg("%s -n %d: %s", machines[m].synthetic, n, st_last_error());
            assert_int_equal(p->ninstances, n);
            const int used = popcount_pus(p, machines[m].synthetic);
            /* -n N: one per NUMA node when N is the node count, else total / N each */
            for (int r = 0; r < n; r++) {
                assert_int_equal(p->inst[r].npus, p->inst[r].ncores);  /* physical cores only */
                if (n != machines[m].numa && p->inst[r].ncores != cores / n)
                    fail_msg("%s -n %d: rank %d has %d cores, documented %d", machines[m].synthetic, n, r,
                             p->inst[r].ncores, cores / n);
            }
            if (used + p->nleftover != cores || count_list(p->leftover_pus) != p->nleftover)
                fail_msg("%s -n %d: %d cores used + %d leftover (%s) != %d", machines[m].synthetic, n, used,
                         p->nleftover, p->leftover_pus, cores);
            if (p->nleftover)
                assert_true(p->nwarnings > 0);  /* leftovers are said, never hidden */
            st_plan_destroy(p);
        }
        st_plan_request too_many = {.ninstances = cores + 1};
        st_plan *p = NULL;
        assert_int_equal(st_plan_create(&p, t, &too_many), ST_ERR_INVALID);
        st_topo_destroy(t);
    }
}

/* A restricted machine (a cgroup's cpuset): instances stay inside it. */
static void test_plan_stays_in_the_allowed_cpus(void **state)
{
    (void)state;
    st_topo *t = NULL;
    assert_int_equal(st_topo_create(&t, ST_TOPO_SYNTHETIC, "pack:1 numa:2 core:8 pu:1"), ST_OK);
    const char *allowed = "1-3,6,9-13";  /* 9 of 16 cores */
    for (int n = 1; n <= 9; n++) {
        st_plan_request req = {.ninstances = n, .allowed_cpus = allowed};
        st_plan *p = NULL;
        assert_int_equal(st_plan_create(&p, t, &req), ST_OK);
        int used = 0;
        for (int r = 0; r < n; r++)
            for (int k = 0; k < p->inst[r].npus; k++, used++) {
                const int pu = p->inst[r].pus[k];
                if (!((pu >= 1 && pu <= 3) || pu == 6 || (pu >= 9 && pu <= 13)))
                    fail_msg("-n %d: rank %d got PU %d outside %s", n, r, pu, allowed);
            }
        assert_int_equal(used + p->nleftover, 9);
        st_plan_destroy(p);
    }
    st_topo_destroy(t);
}

static int setup(void **state)
{
    (void)state;
    return test_dir_create(dir, sizeof dir, "contracts");
}

static int teardown(void **state)
{
    (void)state;
    return test_dir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_scores_every_test_sample_once),
        cmocka_unit_test(test_eval_scores_every_validation_window_once),
        cmocka_unit_test(test_training_windows_are_exactly_the_legal_ones),
        cmocka_unit_test(test_decay_mask_of_every_preset),
        cmocka_unit_test(test_optimizer_steps_in_closed_form),
        cmocka_unit_test(test_allreduce_algorithm_at_its_threshold),
        cmocka_unit_test(test_zero_copy_only_inside_the_region),
        cmocka_unit_test(test_cifar_labels_at_the_bound),
        cmocka_unit_test(test_idx_zero_dimension),
        cmocka_unit_test(test_subset_keeps_exactly_n),
        cmocka_unit_test(test_augmentation_is_a_crop_and_a_flip),
        cmocka_unit_test(test_epoch_order_reaches_every_permutation),
        cmocka_unit_test(test_plan_properties_over_many_topologies),
        cmocka_unit_test(test_plan_stays_in_the_allowed_cpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
