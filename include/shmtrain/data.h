/* shmtrain datasets: IDX (MNIST, Fashion-MNIST, EMNIST; gzipped or not),
 * CIFAR-10/100 binary files and NumPy arrays, decoded once to bytes, optionally shared
 * read-only between the instances of a machine, and batched with per-channel
 * normalisation (and light augmentation) as a batch is assembled.
 *
 * Every malformed input is refused with one line naming the file and the
 * problem (magic, dimensions, type, truncated or corrupt gzip, counts that
 * disagree, labels out of range).
 */
#ifndef SHMTRAIN_DATA_H
#define SHMTRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_dataset st_dataset;

/* IDX images (N x H x W or N x C x H x W, unsigned bytes) and labels (N,
 * unsigned bytes).  gzip is detected, not assumed. */
st_status st_dataset_load_idx(st_dataset **out, const char *images_path, const char *labels_path);

/* CIFAR binary batches: records of 1 label byte (CIFAR-10) or 2 (CIFAR-100:
 * coarse, fine; the fine label is used) and 3x32x32 bytes. */
st_status st_dataset_load_cifar(st_dataset **out, const char *const *paths, int npaths, bool cifar100);

/* NumPy arrays as np.save writes them (.npy versions 1-3, C order):
 * images uint8, or float32 in [0, 1] or [0, 255] (kept as bytes), shaped
 * N x H x W, N x H x W x C or N x C x H x W with C 1 or 3 (a shape that
 * reads both ways is taken as NHWC); labels of any integer type, N of them,
 * 0 to 255.  The flags name the files in messages. */
st_status st_dataset_load_npy(st_dataset **out, const char *images_path, const char *labels_path,
                              const char *images_flag, const char *labels_flag);

/* Image folders in torchvision's ImageFolder layout: ROOT/train/CLASS/FILE
 * and ROOT/val/CLASS/FILE, or ROOT/CLASS/FILE alone (then *val stays NULL:
 * split it with st_dataset_split).  Classes are the training split's
 * folders in name order, labels their places; files are .png, .jpg and
 * .jpeg (any case), others skipped, as ImageFolder does.  Each image is
 * decoded (libpng, libjpeg-turbo) to 8 bits, converted to the model's grey
 * or RGB (PIL's convert), its shorter side resized to `resize` (PIL's
 * antialiased bilinear, torchvision's Resize) and its centre cropped to
 * height x width (CenterCrop), by all of the process's OpenMP threads.
 * A corrupt or truncated file is named with its path. */
typedef struct st_image_spec {
    int channels, height, width;   /* the model's input */
    int resize;                    /* the shorter side before the crop (0: the larger of height, width) */
} st_image_spec;

st_status st_dataset_load_folder(st_dataset **train, st_dataset **val, const char *root, const st_image_spec *spec);


/* For a set that comes without a test split: `n` samples (0 < n < size)
 * drawn by a seeded permutation become a dataset of their own (copied);
 * `d` keeps the others.  Both keep the original order.  Drawn, not the
 * last n: arrays and folders often come sorted by class. */
st_status st_dataset_split(st_dataset *d, size_t n, uint64_t seed, st_dataset **held);

/* Keep only the first `n` samples (n >= size: no change). */
void st_dataset_truncate(st_dataset *d, size_t n);

void st_dataset_destroy(st_dataset *d);

size_t st_dataset_size(const st_dataset *d);
void st_dataset_shape(const st_dataset *d, int *c, int *h, int *w);
int st_dataset_max_label(const st_dataset *d);
const char *st_dataset_source(const st_dataset *d);   /* the images file, for messages */
const char *st_dataset_label_source(const st_dataset *d);  /* the labels file (CIFAR: the same) */
const uint8_t *st_dataset_image(const st_dataset *d, size_t i);
int st_dataset_label(const st_dataset *d, size_t i);

/* One decoded copy per machine: the first instance publishes the decoded
 * bytes as a read-only shared segment named `name` (O_EXCL, 0600); the
 * others attach to it; once everyone has, the publisher unlinks the name.
 * After st_dataset_share the dataset reads from the shared mapping.  An
 * attached dataset may be shared again under another name: the copy, made
 * by the caller (its pages on the caller's NUMA node), replaces the
 * mapping it read from. */
st_status st_dataset_share(st_dataset *d, const char *name);
st_status st_dataset_attach(st_dataset **out, const char *name);
st_status st_dataset_unlink_shared(const char *name);

/* Per-channel mean and standard deviation of pixel/255 over the whole set. */
void st_dataset_stats(const st_dataset *d, float *mean, float *std, int channels);

/* The order of one epoch, as PyTorch's DistributedSampler: a seeded
 * permutation of all samples (seed + epoch), of which global batch k is
 * order[k*W*b .. (k+1)*W*b) and rank r takes every W-th element starting at
 * r.  Unlike DistributedSampler this consumes the permutation in global
 * batches, so a run can resume mid-epoch with a different W. */
void st_epoch_order(uint32_t *order, size_t n, uint64_t seed, uint64_t epoch);

typedef struct st_batch_spec {
    const uint32_t *order;    /* the epoch's order (NULL: identity) */
    size_t first;             /* position in the order of the global batch */
    int world, rank, batch;   /* this rank's samples: first + rank + k*world */
    const float *mean, *std;  /* per channel */
    bool augment;             /* random crop (pad 4) and horizontal flip */
    uint64_t seed, epoch;
} st_batch_spec;

/* Assemble this rank's batch: x (batch x C x H x W floats, normalised) and
 * labels.  Positions past the end of the order wrap around (eval padding);
 * `valid` (may be NULL) gets how many were real. */
void st_batch_fill(const st_dataset *d, const st_batch_spec *s, float *x, int *labels, int *valid);

/* The same in steps, for a folder decoded whole or streamed: its listing
 * (every split's files and labels; nothing decoded), a held-out split drawn
 * from the training files when there is no val/ (as st_dataset_split), a
 * split decoded whole by every thread, or only its labels (a dataset whose
 * images an st_stream decodes batch by batch).  Split 0 trains, 1 validates. */
typedef struct st_folder st_folder;
st_status st_folder_open(st_folder **out, const char *root, const st_image_spec *spec);
void st_folder_destroy(st_folder *f);
size_t st_folder_count(const st_folder *f, int split);
size_t st_folder_sample_bytes(const st_folder *f);
st_status st_folder_hold_out(st_folder *f, size_t n, uint64_t seed);
st_status st_folder_decode(const st_folder *f, int split, st_dataset **out);
st_status st_folder_labels(const st_folder *f, int split, st_dataset **out);

/* Batches decoded as they are needed, by `workers` threads ahead of the
 * trainer (PyTorch's DataLoader workers): request a batch (the spec's
 * samples: its order resolved now, so the order may change after), take it
 * when its step comes; the taking thread decodes with the workers.  A batch
 * taken without a request is decoded then.  Labels come from `labels`
 * (st_folder_labels of the same split); the dataset and folder are borrowed. */
typedef struct st_stream st_stream;
st_status st_stream_create(st_stream **out, const st_folder *f, int split, const st_dataset *labels, int workers);
void st_stream_destroy(st_stream *s);
st_status st_stream_request(st_stream *s, const st_batch_spec *spec);
st_status st_stream_take(st_stream *s, const st_batch_spec *spec, float *x, int *labels, int *valid);
/* Samples decoded so far, taken or not (a batch requested and never taken
 * is decoding spent for nothing). */
unsigned long long st_stream_decoded(st_stream *s);
/* Per-channel mean and deviation as st_dataset_stats, over at most `cap`
 * of the split's images drawn by a fixed seed (all of them, in order, when
 * there are no more: then the same as the decoded set's).  Batches are
 * normalised with the spec's mean and std. */
st_status st_stream_stats(st_stream *s, size_t cap, float *mean, float *std);

#ifdef __cplusplus
}
#endif
#endif
