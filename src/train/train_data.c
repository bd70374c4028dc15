/* The trainer's data: the readers for its flags, the checks against the
 * model, and the copy decoded once per node and shared. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shmtrain/shmname.h"
#include "trainer.h"

static char *join_path(const char *dir, const char *file)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s", dir, file) < 0 ? NULL : p;
}

/* Fashion-MNIST's file names, gzipped or not. */
static char *idx_file(const char *dir, const char *base)
{
    char gz[512];
    snprintf(gz, sizeof gz, "%s/%s.gz", dir, base);
    struct stat sb;
    return stat(gz, &sb) == 0 ? join_path(dir, (snprintf(gz, sizeof gz, "%s.gz", base), gz)) : join_path(dir, base);
}

static st_status load_split(const st_train_options *o, bool test, st_dataset **out)
{
    if (o->npy_images)
        return test ? st_dataset_load_npy(out, o->npy_test_images, o->npy_test_labels, "--npy-test-images",
                                          "--npy-test-labels")
                    : st_dataset_load_npy(out, o->npy_images, o->npy_labels, "--npy-images", "--npy-labels");
    if (o->cifar_dir) {
        char *paths[5] = {0};
        int n = 0;
        if (test)
            paths[n++] = join_path(o->cifar_dir, o->cifar100 ? "test.bin" : "test_batch.bin");
        else if (o->cifar100)
            paths[n++] = join_path(o->cifar_dir, "train.bin");
        else
            for (int i = 1; i <= 5; i++) {
                char name[32];
                snprintf(name, sizeof name, "data_batch_%d.bin", i);
                paths[n++] = join_path(o->cifar_dir, name);
            }
        st_status st = st_dataset_load_cifar(out, (const char *const *)paths, n, o->cifar100);
        for (int i = 0; i < n; i++)
            free(paths[i]);
        return st;
    }
    const char *img = test ? o->test_images : o->train_images, *lab = test ? o->test_labels : o->train_labels;
    char *ip = img ? strdup(img) : idx_file(o->data_dir, test ? "t10k-images-idx3-ubyte" : "train-images-idx3-ubyte");
    char *lp = lab ? strdup(lab) : idx_file(o->data_dir, test ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte");
    st_status st = ip && lp ? st_dataset_load_idx(out, ip, lp) : st_fail(ST_ERR_NOMEM, "out of memory");
    free(ip);
    free(lp);
    return st;
}

/* The held-out split of a set without a test split does not change with
 * --seed: a run's test set is the same whatever its training order. */
#define HOLD_OUT_SEED 0x5eedull

/* Training and test split; a set without a test split gives up
 * --val-fraction of its samples, drawn. */
static st_status load_splits(const struct trainer *t, st_dataset **train, st_dataset **test)
{
    const st_train_options *o = t->o;
    if (o->image_folder) {
        st_status st = train_load_folder_split((struct trainer *)t, false, train);
        return st == ST_OK ? train_load_folder_split((struct trainer *)t, true, test) : st;
    }
    st_status st = load_split(o, false, train);
    if (st != ST_OK)
        return st;
    if (!o->npy_images || o->npy_test_images)
        return load_split(o, true, test);
    const size_t n = st_dataset_size(*train), held = (size_t)((double)n * o->val_fraction);
    if (held == 0 || held >= n)
        return st_fail(ST_ERR_FORMAT, "%s: %zu samples: --val-fraction %g of them holds none out (or all)",
                       st_dataset_source(*train), n, (double)o->val_fraction);
    return st_dataset_split(*train, held, HOLD_OUT_SEED, test);
}

/* A training set must fill one global batch (a step is a whole batch); a
 * test set need only hold a sample: evaluation pads its last batch, and a
 * rank past the end scores nothing (report.c counts the predictions). */
static st_status check_fits(const struct trainer *t, const st_dataset *d, bool training)
{
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    const st_shape data = {3, {c, h, w}};
    st_shape want;
    st_dtype dtype;
    st_model_input(t->model, &want, &dtype);
    if (!st_shape_equal(&data, &want) || dtype != ST_DTYPE_F32) {
        char have_s[64], want_s[64];
        st_shape_str(&data, have_s, sizeof have_s);
        st_shape_str(&want, want_s, sizeof want_s);
        return st_fail(ST_ERR_FORMAT, "%s: images are %s but model '%s' expects %s %s", st_dataset_source(d), have_s,
                       t->o->model, st_dtype_name(dtype), want_s);
    }
    if (st_dataset_max_label(d) >= st_model_classes(t->model))
        return st_fail(ST_ERR_FORMAT, "%s: has label %d but model '%s' has %d classes", st_dataset_label_source(d),
                       st_dataset_max_label(d), t->o->model, st_model_classes(t->model));
    if (training && st_dataset_size(d) < (size_t)t->world * (size_t)t->o->batch)
        return st_fail(ST_ERR_FORMAT, "%s: %zu training samples are fewer than one global batch (%d x %d)",
                       st_dataset_source(d), st_dataset_size(d), t->world, t->o->batch);
    if (st_dataset_size(d) == 0)
        return st_fail(ST_ERR_FORMAT, "%s: no %s samples", st_dataset_source(d), training ? "training" : "test");
    return ST_OK;
}

/* ------------------------------------------- decoded once per node -- */

/* What one kind of data does in the node's exchange (decode_and_publish).
 * `where` is "" for the first rank's publication, ".numa<k>" for NUMA node
 * k's copy. */
struct publication {
    const char *what;                                      /* "data", "text": for the peers' message */
    st_status (*decode)(struct trainer *t, bool publish);  /* the first rank: read, check, publish */
    st_status (*attach)(struct trainer *t, const char *where);   /* the others: map a publication */
    st_status (*republish)(struct trainer *t, const char *where); /* a NUMA node's copy of what it mapped */
    void (*unpublish)(struct trainer *t, const char *where);      /* once all have mapped: the names go */
};

/* /dev/shm's name for `what` of this job (shmname.h), at `where`. */
static st_status shared_name(const struct trainer *t, const char *what, const char *where, char *name, size_t len)
{
    char full[64];
    snprintf(full, sizeof full, "%s%s", what, where);
    return st_shm_name(name, len, comm_job_id(&t->comm), full);
}

/* Where this rank reads the node's decoded data from.  On a machine of
 * several NUMA nodes (the launcher placed this node's ranks on two or
 * more) the first rank of each node other than the publisher's makes a
 * copy its node's ranks read locally: one crossing of the interconnect per
 * node, instead of half the ranks reading every batch across it. */
struct placement_of_data {
    bool copies;    /* the ranks sit on 2+ known NUMA nodes */
    bool copier;    /* the first rank of a NUMA node other than the publisher's */
    char where[24]; /* "" (the publisher's) or ".numa<k>" */
};

static struct placement_of_data where_to_read(const struct trainer *t)
{
    struct placement_of_data p = {false, false, ""};
    const int home = comm_numa_node(&t->comm, 0), mine = comm_numa_node(&t->comm, t->comm.local_rank);
    int first = -1;
    for (int q = 0; q < t->comm.local_world; q++) {
        const int node = comm_numa_node(&t->comm, q);
        if (node < 0)
            return p;  /* a rank's node unknown, or spanning several: one copy */
        p.copies |= node != home;
        if (node == mine && first < 0)
            first = q;
    }
    if (p.copies && mine != home) {
        snprintf(p.where, sizeof p.where, ".numa%d", mine);
        p.copier = first == t->comm.local_rank;
    }
    return p;
}

/* A copier maps the publication and publishes its node's copy; every rank
 * learns whether all copies were made. */
static st_status copy_to_numa_nodes(struct trainer *t, const struct publication *p,
                                    const struct placement_of_data *at)
{
    st_status st = ST_OK;
    if (at->copier && (st = p->attach(t, "")) == ST_OK && (st = p->republish(t, at->where)) == ST_OK &&
        !t->o->quiet)
        printf("shmtrain: rank %d: the decoded %s copied to NUMA node %s\n", t->rank, p->what, at->where + 5);
    st_kept_error kept;
    st_error_keep(&kept);
    bool failed;
    st_status agreed = comm_node_any(&t->comm, st != ST_OK, &failed);
    if (st != ST_OK)
        return st_error_again(&kept, st);
    if (agreed != ST_OK)
        return agreed;
    return failed ? st_fail(ST_ERR_PEER_DEAD, "rank %d: another rank could not copy the %s to its NUMA node (its "
                                              "log says why)", t->rank, p->what)
                  : ST_OK;
}

/* The node's first rank decodes and publishes, and tells the others
 * whether that worked (its message kept across the telling); the first
 * rank of each other NUMA node copies it; the rest attach; once all have,
 * the names go.  One decoded copy per NUMA node, whatever the kind of data. */
static st_status decode_and_publish(struct trainer *t, const struct publication *p)
{
    const bool first = t->comm.local_rank == 0, sharing = t->comm.local_world > 1;
    int status = first ? (int)p->decode(t, sharing) : 0;
    st_kept_error kept;
    st_error_keep(&kept);
    st_status st;
    if (sharing && (st = comm_node_broadcast(&t->comm, &status, sizeof status, 0)) != ST_OK)
        return st;
    if (status != ST_OK)
        return first ? st_error_again(&kept, (st_status)status)
                     : st_fail(ST_ERR_PEER_DEAD, "rank %d, the first of this node, could not load the %s (its log "
                                                 "says why)", t->rank - t->comm.local_rank, p->what);
    if (!sharing)
        return ST_OK;
    const struct placement_of_data at = where_to_read(t);
    if (at.copies && (st = copy_to_numa_nodes(t, p, &at)) != ST_OK)
        return st;
    if (!first && !at.copier && (st = p->attach(t, at.where)) != ST_OK)
        return st;
    if ((st = comm_node_barrier(&t->comm)) != ST_OK)
        return st;
    if (first || at.copier)
        p->unpublish(t, at.where);
    return ST_OK;
}

static const char *const SPLIT_NAME[2] = {"data-train", "data-test"};

static st_status share_images(struct trainer *t, const char *where)
{
    st_dataset *ds[2] = {t->train, t->test};
    st_status st = ST_OK;
    for (int s = 0; s < 2 && st == ST_OK; s++) {
        char name[160];
        if ((st = shared_name(t, SPLIT_NAME[s], where, name, sizeof name)) == ST_OK)
            st = st_dataset_share(ds[s], name);
    }
    return st;
}

static st_status decode_images(struct trainer *t, bool publish)
{
    st_dataset **ds[2] = {&t->train, &t->test};
    st_status st = load_splits(t, ds[0], ds[1]);
    for (int s = 0; s < 2 && st == ST_OK; s++) {
        st_dataset_truncate(*ds[s], (size_t)(s ? t->o->test_subset : t->o->train_subset));
        st = check_fits(t, *ds[s], s == 0);
    }
    return st == ST_OK && publish ? share_images(t, "") : st;
}

static st_status attach_images(struct trainer *t, const char *where)
{
    st_dataset **ds[2] = {&t->train, &t->test};
    st_status st = ST_OK;
    for (int s = 0; s < 2 && st == ST_OK; s++) {
        char name[160];
        if ((st = shared_name(t, SPLIT_NAME[s], where, name, sizeof name)) == ST_OK)
            st = st_dataset_attach(ds[s], name);
    }
    return st;
}

static void unpublish_images(struct trainer *t, const char *where)
{
    for (int s = 0; s < 2; s++) {
        char name[160];
        if (shared_name(t, SPLIT_NAME[s], where, name, sizeof name) == ST_OK)
            st_dataset_unlink_shared(name);
    }
}

static const struct publication IMAGES = {"data", decode_images, attach_images, share_images, unpublish_images};

st_status train_load_text(struct trainer *t);

st_status train_load_data(struct trainer *t)
{
    const st_train_options *o = t->o;
    const bool lm = st_model_vocab(t->model) > 0, text_given = o->ntext > 0 || o->tokens_bin;
    if (lm != text_given)
        return lm ? st_fail(ST_ERR_INVALID, "--model %s reads token ids: give it text (--text FILE) or token files "
                                            "(--tokens-bin FILE)", o->model)
                  : st_fail(ST_ERR_INVALID, "%s: model '%s' is not a language model (its input is not "
                                            "'input tokens T')", o->tokens_bin ? "--tokens-bin" : "--text", o->model);
    if (lm) {
        t->context = st_model_positions(t->model);
        return train_load_text(t);
    }
    bool streamed = false;
    st_status fs = o->image_folder ? train_open_folder(t, &streamed) : ST_OK;
    if (fs != ST_OK)
        return fs;
    if (streamed)  /* every rank its own batches: nothing to publish */
        return (fs = check_fits(t, t->train, true)) == ST_OK ? check_fits(t, t->test, false) : fs;
    st_status st = decode_and_publish(t, &IMAGES);
    if (st != ST_OK)
        return st;
    train_close_folder(t);  /* decoded: its listing is done with */
    int c, h, w;
    st_dataset_shape(t->train, &c, &h, &w);
    st_dataset_stats(t->train, t->mean, t->std, c);
    return ST_OK;
}

/* ---------------------------------------------------------------- text -- */

static st_status check_text_fits(const struct trainer *t)
{
    const int vocab = st_model_vocab(t->model), have = st_text_vocab(t->text);
    if (have > vocab)
        return st_fail(ST_ERR_FORMAT, "%s %s: %d distinct tokens, more than model '%s''s vocabulary of %d",
                       t->o->tokens_bin ? "--vocab" : "--text", st_text_source(t->text, ST_TEXT_TRAIN), have,
                       t->o->model, vocab);
    return st_text_check(t->text, t->context, (long)t->world * t->o->batch);
}

/* The node's first rank reads (and, for token files, checks every id). */
static st_status read_text(struct trainer *t, bool first)
{
    const st_train_options *o = t->o;
    if (!o->tokens_bin)
        return st_text_load(&t->text, o->text, o->ntext, (st_text_tokens)o->text_tokens);
    const int vocab = o->vocab ? (int)o->vocab : st_model_vocab(t->model);
    if (o->vocab > st_model_vocab(t->model))
        return st_fail(ST_ERR_INVALID, "--vocab %ld: more than model '%s''s vocabulary of %d (its 'embed V D' line)",
                       o->vocab, o->model, st_model_vocab(t->model));
    return st_text_load_tokens(&t->text, o->tokens_bin, o->val_bin, vocab, first);
}

/* Token files are mapped: the page cache holds their one copy, so the
 * others map them too once the first has checked them; text is published. */
static bool from_token_files(const struct trainer *t) { return t->o->tokens_bin != NULL; }

static st_status share_text(struct trainer *t, const char *where)
{
    char name[160];
    if (from_token_files(t))
        return ST_OK;  /* mapped: the page cache holds them */
    st_status st = shared_name(t, "text", where, name, sizeof name);
    return st == ST_OK ? st_text_share(t->text, name) : st;
}

static st_status decode_text(struct trainer *t, bool publish)
{
    st_status st = read_text(t, true);
    if (st == ST_OK)
        st = check_text_fits(t);
    return st == ST_OK && publish && !st_text_is_mapped(t->text) ? share_text(t, "") : st;
}

static st_status attach_text(struct trainer *t, const char *where)
{
    char name[160];
    if (from_token_files(t))
        return read_text(t, false);
    st_status st = shared_name(t, "text", where, name, sizeof name);
    return st == ST_OK ? st_text_attach(&t->text, name) : st;
}

static void unpublish_text(struct trainer *t, const char *where)
{
    char name[160];
    if (!from_token_files(t) && shared_name(t, "text", where, name, sizeof name) == ST_OK)
        st_dataset_unlink_shared(name);
}

static const struct publication TEXT = {"text", decode_text, attach_text, share_text, unpublish_text};

st_status train_load_text(struct trainer *t)
{
    st_status st = decode_and_publish(t, &TEXT);
    if (st != ST_OK)
        return st;
    t->eval_count = st_text_eval_windows(t->text, t->context, (size_t)t->o->eval_windows);
    return ST_OK;
}

size_t train_samples(const struct trainer *t)
{
    /* A text "epoch": as many windows as the split has tokens per window. */
    return t->text ? st_text_tokens_in(t->text, ST_TEXT_TRAIN) / (size_t)t->context : st_dataset_size(t->train);
}

size_t train_eval_samples(const struct trainer *t)
{
    return t->text ? t->eval_count : st_dataset_size(t->test);
}

st_status train_alloc_batch(struct trainer *t)
{
    const size_t b = (size_t)t->o->batch, positions = (size_t)st_model_positions(t->model);
    t->x = malloc(b * st_model_input_size(t->model) * sizeof(float));  /* ids are 4 bytes too */
    t->y = malloc(b * positions * sizeof(int));
    if (!t->text)
        t->order = malloc(st_dataset_size(t->train) * sizeof(uint32_t));
    return t->x && t->y && (t->text || t->order) ? ST_OK : st_fail(ST_ERR_NOMEM, "train: out of memory");
}

st_status train_fill_batch(struct trainer *t, int slot_rank, int micro)
{
    const st_train_options *o = t->o;
    const int world = t->world * t->accum_steps, rank = micro * t->world + slot_rank;
    if (t->text)
        return st_text_train_batch(t->text, o->seed, t->step, world, rank, o->batch, t->context, t->x, t->y);
    st_batch_spec spec = {.order = t->order, .first = t->epoch_pos, .world = world, .rank = rank,
                          .batch = o->batch, .mean = t->mean, .std = t->std, .augment = o->augment,
                          .seed = o->seed, .epoch = t->epoch};
    if (t->stream[0])
        return train_stream_batch(t, &spec, micro);
    st_batch_fill(t->train, &spec, t->x, t->y, NULL);
    return ST_OK;
}

st_status train_fill_eval_batch(struct trainer *t, size_t first, int *valid)
{
    if (t->text) {
        st_text_eval_batch(t->text, first, t->eval_count, t->world, t->rank, t->o->batch, t->context, t->x, t->y,
                           valid);
        return ST_OK;
    }
    st_batch_spec spec = {.first = first, .world = t->world, .rank = t->rank, .batch = t->o->batch,
                          .mean = t->mean, .std = t->std};
    if (t->stream[1])
        return st_stream_take(t->stream[1], &spec, t->x, t->y, valid);
    st_batch_fill(t->test, &spec, t->x, t->y, valid);
    return ST_OK;
}
