/* Image folders in torchvision's ImageFolder layout, decoded once by all
 * of the process's threads into a dataset. */
#define _GNU_SOURCE
#include "dataset_internal.h"
#include "image_decode.h"

#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { MAX_CLASSES = 256 };  /* labels are bytes */

struct listing {
    char **paths;
    uint8_t *labels;
    size_t n, cap;
};

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Is the entry at `path` one to list: a directory (dirs), or a regular
 * file named like an image?  Skipped: what is neither (a README, a file
 * among the class folders).  Refused, by name: what cannot be looked at (a
 * symlink loop, a dangling link) and an image name on anything but a
 * regular file (a FIFO would block its reader until something wrote to it). */
static st_status keep_entry(const char *path, const char *name, bool dirs, bool *keep)
{
    struct stat sb;
    *keep = false;
    if (!dirs && !image_is_supported(name))
        return ST_OK;
    if (stat(path, &sb) != 0)
        return st_fail(ST_ERR_IO, "--image-folder %s: cannot look at it: %s", path, strerror(errno));
    if (dirs || S_ISDIR(sb.st_mode)) {
        *keep = dirs && S_ISDIR(sb.st_mode);
        return ST_OK;
    }
    if (!S_ISREG(sb.st_mode))
        return st_fail(ST_ERR_FORMAT, "--image-folder %s: named like an image but not a regular file (%s)", path,
                       S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISSOCK(sb.st_mode) ? "a socket" : "a device");
    *keep = true;
    return ST_OK;
}

/* The entries of `dir` to list (keep_entry), sorted by name (Python's
 * sorted(): byte order). */
static st_status sorted_entries(const char *dir, bool dirs, char ***out, size_t *count)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return st_fail(ST_ERR_IO, "--image-folder %s: cannot open: %s", dir, strerror(errno));
    size_t cap = 0;
    st_status st = ST_OK;
    for (struct dirent *e; st == ST_OK && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
            st = st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", dir);
            break;
        }
        bool keep;
        if ((st = keep_entry(path, e->d_name, dirs, &keep)) != ST_OK || !keep) {
            free(path);
            continue;
        }
        if (*count == cap) {
            char **grown = realloc(*out, (cap = cap ? 2 * cap : 64) * sizeof *grown);
            if (!grown) {
                free(path);
                st = st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", dir);
                break;
            }
            *out = grown;
        }
        (*out)[(*count)++] = path;
    }
    closedir(d);
    if (*count)
        qsort(*out, *count, sizeof **out, by_name);
    return st;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Every image of every class folder of `split`, labelled by the class's
 * place among `classes` (the training split's, by name). */
static st_status list_split(const char *split, char **classes, size_t nclasses, struct listing *l)
{
    char **dirs = NULL;
    size_t ndirs = 0;
    st_status st = sorted_entries(split, true, &dirs, &ndirs);
    if (st == ST_OK && ndirs != nclasses)
        st = st_fail(ST_ERR_FORMAT, "--image-folder %s: %zu class folders, the training split has %zu", split, ndirs,
                     nclasses);
    for (size_t k = 0; k < ndirs && st == ST_OK; k++) {
        if (strcmp(base_name(dirs[k]), base_name(classes[k]))) {
            st = st_fail(ST_ERR_FORMAT, "--image-folder %s: class folder '%s' is not the training split's '%s'",
                         split, base_name(dirs[k]), base_name(classes[k]));
            break;
        }
        char **files = NULL;
        size_t nfiles = 0;
        if ((st = sorted_entries(dirs[k], false, &files, &nfiles)) == ST_OK && nfiles == 0)
            st = st_fail(ST_ERR_FORMAT, "--image-folder %s: no .png, .jpg or .jpeg files in this class folder",
                         dirs[k]);
        for (size_t i = 0; i < nfiles && st == ST_OK; i++) {
            if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 1024;
                char **p = realloc(l->paths, l->cap * sizeof *p);
                uint8_t *b = p ? realloc(l->labels, l->cap) : NULL;
                if (p)
                    l->paths = p;
                if (!b) {
                    st = st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", split);
                    break;
                }
                l->labels = b;
            }
            l->paths[l->n] = files[i];
            files[i] = NULL;
            l->labels[l->n++] = (uint8_t)k;
        }
        free_names(files, nfiles);
    }
    free_names(dirs, ndirs);
    return st;
}

/* All threads decode; the first failure in file order is the one named. */
static st_status decode_all(const struct listing *l, const struct image_target *t, st_dataset *d)
{
    const size_t bytes = (size_t)t->channels * t->height * t->width;
    long first_bad = -1;
    char err[256] = "";
#pragma omp parallel
    {
        char mine[256];
#pragma omp for schedule(dynamic, 16)
        for (long i = 0; i < (long)l->n; i++) {
            if (image_decode(l->paths[i], t, d->images + (size_t)i * bytes, mine, sizeof mine) == 0)
                continue;
#pragma omp critical(first_bad_image)
            if (first_bad < 0 || i < first_bad) {
                first_bad = i;
                snprintf(err, sizeof err, "%s", mine);
            }
        }
    }
    if (first_bad >= 0)
        return st_fail(ST_ERR_FORMAT, "--image-folder %s: %s", l->paths[first_bad], err);
    memcpy(d->labels, l->labels, l->n);
    find_max_label(d);
    return ST_OK;
}

struct st_folder {
    struct listing split[2];      /* training, validation (empty: none) */
    struct image_target target;
    char root[256];
};

static void free_listing(struct listing *l)
{
    free_names(l->paths, l->n);
    free(l->labels);
    *l = (struct listing){0};
}

void st_folder_destroy(st_folder *f)
{
    if (!f)
        return;
    free_listing(&f->split[0]);
    free_listing(&f->split[1]);
    free(f);
}

static st_status check_spec(const char *root, const st_image_spec *spec, struct image_target *t)
{
    if (spec->channels != 1 && spec->channels != 3)
        return st_fail(ST_ERR_INVALID, "--image-folder %s: the model reads %d channels; images are grey (1) or RGB "
                                       "(3)", root, spec->channels);
    const int larger = spec->height > spec->width ? spec->height : spec->width;
    *t = (struct image_target){spec->channels, spec->height, spec->width, spec->resize ? spec->resize : larger};
    if (t->resize < larger)
        return st_fail(ST_ERR_INVALID, "--image-size %d: smaller than the model's input %dx%d", t->resize,
                       spec->height, spec->width);
    return ST_OK;
}

st_status st_folder_open(st_folder **out, const char *root, const st_image_spec *spec)
{
    *out = NULL;
    st_folder *f = calloc(1, sizeof *f);
    if (!f)
        return st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", root);
    snprintf(f->root, sizeof f->root, "%s", root);
    char *train_dir = NULL, *val_dir = NULL, **classes = NULL;
    size_t nclasses = 0;
    st_status st = check_spec(root, spec, &f->target);
    struct stat sb;
    if (st == ST_OK && stat(root, &sb) != 0)
        st = st_fail(ST_ERR_IO, "--image-folder %s: %s", root, errno == ENOENT ? "does not exist" : strerror(errno));
    if (st == ST_OK && !S_ISDIR(sb.st_mode))
        st = st_fail(ST_ERR_IO, "--image-folder %s: not a directory", root);
    if (st == ST_OK && (asprintf(&train_dir, "%s/train", root) < 0 || asprintf(&val_dir, "%s/val", root) < 0))
        st = st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", root);
    /* ROOT/train and ROOT/val; ROOT/train alone is the training split, a
     * held-out fraction the validation set (as ROOT/CLASS is) */
    const bool has_train = st == ST_OK && is_dir(train_dir), splits = has_train && is_dir(val_dir);
    if (st == ST_OK && !has_train && is_dir(val_dir))
        st = st_fail(ST_ERR_FORMAT, "--image-folder %s: a val/ folder but no train/ beside it", root);
    const char *top = has_train ? train_dir : root;
    if (st == ST_OK)
        st = sorted_entries(top, true, &classes, &nclasses);
    if (st == ST_OK && nclasses == 0)
        st = st_fail(ST_ERR_FORMAT, "--image-folder %s: no class folders (ROOT/CLASS/IMAGE or ROOT/train/CLASS/IMAGE "
                                    "with ROOT/val)", top);
    if (st == ST_OK && nclasses > MAX_CLASSES)
        st = st_fail(ST_ERR_FORMAT, "--image-folder %s: %zu classes, more than %d", top, nclasses, MAX_CLASSES);
    if (st == ST_OK)
        st = list_split(top, classes, nclasses, &f->split[0]);
    if (st == ST_OK && splits)
        st = list_split(val_dir, classes, nclasses, &f->split[1]);
    free_names(classes, nclasses);
    free(train_dir);
    free(val_dir);
    if (st != ST_OK) {
        st_folder_destroy(f);
        return st;
    }
    *out = f;
    return ST_OK;
}

size_t st_folder_count(const st_folder *f, int split) { return f->split[split].n; }

size_t st_folder_sample_bytes(const st_folder *f)
{
    return (size_t)f->target.channels * f->target.height * f->target.width;
}

/* As st_dataset_split: the seeded permutation's first n go, both lists
 * keep their order. */
st_status st_folder_hold_out(st_folder *f, size_t n, uint64_t seed)
{
    struct listing *l = &f->split[0], *v = &f->split[1];
    if (v->n || n == 0 || n >= l->n)
        return st_fail(ST_ERR_INVALID, "--image-folder %s: cannot hold %zu of its %zu images out", f->root, n, l->n);
    uint32_t *order = malloc(l->n * sizeof *order);
    uint8_t *out = calloc(l->n, 1);
    v->paths = malloc(n * sizeof *v->paths);
    v->labels = malloc(n);
    if (!order || !out || !v->paths || !v->labels) {
        free(order), free(out);
        return st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", f->root);
    }
    st_epoch_order(order, l->n, seed, 0);
    for (size_t k = 0; k < n; k++)
        out[order[k]] = 1;
    size_t kept = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct listing *to = out[i] ? v : l;
        const size_t at = out[i] ? v->n++ : kept++;
        to->paths[at] = l->paths[i];
        to->labels[at] = l->labels[i];
    }
    l->n = kept;
    v->cap = n;
    free(order);
    free(out);
    return ST_OK;
}

int st_folder_decode_one(const st_folder *f, int split, size_t i, uint8_t *out, char *err, size_t len)
{
    const struct listing *l = &f->split[split];
    char msg[200];
    if (image_decode(l->paths[i], &f->target, out, msg, sizeof msg) == 0)
        return 0;
    snprintf(err, len, "--image-folder %s: %s", l->paths[i], msg);
    return -1;
}

static st_status empty_dataset(const st_folder *f, int split, st_dataset **out)
{
    const struct listing *l = &f->split[split];
    const struct image_target *t = &f->target;
    return alloc_dataset(out, l->n, t->channels, t->height, t->width, l->n ? l->paths[0] : f->root, false);
}

st_status st_folder_labels(const st_folder *f, int split, st_dataset **out)
{
    st_status st = empty_dataset(f, split, out);
    if (st != ST_OK)
        return st;
    if (!((*out)->labels = malloc(f->split[split].n ? f->split[split].n : 1))) {
        st_dataset_destroy(*out);
        *out = NULL;
        return st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", f->root);
    }
    memcpy((*out)->labels, f->split[split].labels, f->split[split].n);
    snprintf((*out)->source, sizeof (*out)->source, "%.223s", f->root);
    find_max_label(*out);
    return ST_OK;
}

st_status st_folder_decode(const st_folder *f, int split, st_dataset **out)
{
    const struct listing *l = &f->split[split];
    st_status st = alloc_dataset(out, l->n, f->target.channels, f->target.height, f->target.width, f->root, true);
    if (st == ST_OK && (st = decode_all(l, &f->target, *out)) != ST_OK) {
        st_dataset_destroy(*out);
        *out = NULL;
    }
    return st;
}

st_status st_dataset_load_folder(st_dataset **train, st_dataset **val, const char *root,
                                 const st_image_spec *spec)
{
    *train = *val = NULL;
    st_folder *f = NULL;
    st_status st = st_folder_open(&f, root, spec);
    if (st == ST_OK)
        st = st_folder_decode(f, 0, train);
    if (st == ST_OK && f->split[1].n && (st = st_folder_decode(f, 1, val)) != ST_OK) {
        st_dataset_destroy(*train);
        *train = NULL;
    }
    st_folder_destroy(f);
    return st;
}
