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

/* The entries of `dir` that `keep` accepts, sorted by name (Python's
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
        if (dirs ? !is_dir(path) : (is_dir(path) || !image_is_supported(e->d_name))) {
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

static st_status load_split(const char *split, char **classes, size_t nclasses, const struct image_target *t,
                            st_dataset **out)
{
    struct listing l = {0};
    st_status st = list_split(split, classes, nclasses, &l);
    if (st == ST_OK)
        st = alloc_dataset(out, l.n, t->channels, t->height, t->width, split, true);
    if (st == ST_OK && (st = decode_all(&l, t, *out)) != ST_OK) {
        st_dataset_destroy(*out);
        *out = NULL;
    }
    free_names(l.paths, l.n);
    free(l.labels);
    return st;
}

st_status st_dataset_load_folder(st_dataset **train, st_dataset **val, const char *root,
                                 const st_image_spec *spec)
{
    *train = *val = NULL;
    if (spec->channels != 1 && spec->channels != 3)
        return st_fail(ST_ERR_INVALID, "--image-folder %s: the model reads %d channels; images are grey (1) or RGB "
                                       "(3)", root, spec->channels);
    const int larger = spec->height > spec->width ? spec->height : spec->width;
    const struct image_target t = {spec->channels, spec->height, spec->width,
                                   spec->resize ? spec->resize : larger};
    if (t.resize < larger)
        return st_fail(ST_ERR_INVALID, "--image-size %d: smaller than the model's input %dx%d", t.resize,
                       spec->height, spec->width);
    if (!is_dir(root))
        return st_fail(ST_ERR_IO, "--image-folder %s: not a directory", root);
    char *train_dir = NULL, *val_dir = NULL, **classes = NULL;
    size_t nclasses = 0;
    if (asprintf(&train_dir, "%s/train", root) < 0 || asprintf(&val_dir, "%s/val", root) < 0)
        return st_fail(ST_ERR_NOMEM, "--image-folder %s: out of memory", root);
    const bool splits = is_dir(train_dir) && is_dir(val_dir);
    const char *top = splits ? train_dir : root;
    st_status st = sorted_entries(top, true, &classes, &nclasses);
    if (st == ST_OK && nclasses == 0)
        st = st_fail(ST_ERR_FORMAT, "--image-folder %s: no class folders (ROOT/CLASS/IMAGE or ROOT/train/CLASS/IMAGE "
                                    "with ROOT/val)", top);
    if (st == ST_OK && nclasses > MAX_CLASSES)
        st = st_fail(ST_ERR_FORMAT, "--image-folder %s: %zu classes, more than %d", top, nclasses, MAX_CLASSES);
    if (st == ST_OK)
        st = load_split(top, classes, nclasses, &t, train);
    if (st == ST_OK && splits)
        st = load_split(val_dir, classes, nclasses, &t, val);
    if (st != ST_OK) {
        st_dataset_destroy(*train);
        *train = NULL;
    }
    free_names(classes, nclasses);
    free(train_dir);
    free(val_dir);
    return st;
}
