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

#endif
