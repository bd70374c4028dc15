/* Internal: the image dataset's representation, shared by its readers
 * (data.c: IDX and CIFAR; npy.c: NumPy arrays; folder.c: image folders). */
#ifndef SHMTRAIN_DATA_DATASET_INTERNAL_H
#define SHMTRAIN_DATA_DATASET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/data.h"

struct st_dataset {
    size_t n;
    int c, h, w, max_label;
    uint8_t *images;         /* n x c x h x w */
    uint8_t *labels;         /* n */
    void *map;               /* shared mapping, or NULL when malloc'd */
    size_t map_bytes;
    char source[224];        /* the images file */
    char label_source[224];  /* the labels file */
};

/* A dataset of n samples of c x h x w named for `source`; its images and
 * labels allocated when `sized`, else left NULL for the reader to fill. */
st_status alloc_dataset(st_dataset **out, size_t n, int c, int h, int w, const char *source, bool sized);

void find_max_label(st_dataset *d);

/* Batch sample k of `s` among n: its index in the set (through the order),
 * and whether it is real (not eval padding past the end). */
size_t batch_sample(const st_batch_spec *s, int k, size_t n, bool *real);

/* One sample's bytes (C x H x W) to normalised floats, augmented as `s`
 * says (random crop with padding 4 and flip, seeded by sample and epoch). */
/* Folder image i of `split`, decoded; 0, or -1 with one line naming the
 * file in err (thread-safe). */
int st_folder_decode_one(const st_folder *f, int split, size_t i, uint8_t *out, char *err, size_t len);

void sample_fill(const uint8_t *img, int C, int H, int W, size_t idx, const st_batch_spec *s, float *out);

#endif
