/* Internal: a safetensors file's header, read and checked as the format's
 * reference reader (Hugging Face's safetensors crate) checks it.
 *
 * The file: an 8-byte little-endian length N (at most 100,000,000), N bytes
 * of UTF-8 JSON starting with '{' (an object of tensor name -> {"dtype",
 * "shape", "data_offsets": [begin, end]}, and optionally "__metadata__" ->
 * an object of strings), then the data.  The tensors' byte ranges, sorted
 * by their start, must cover the data exactly: the first begins at 0, each
 * begins where the one before ends (no gap, no overlap), each holds its
 * shape's elements of its dtype, and the last ends where the file does.
 * A file that breaks a rule is refused with one line naming the rule and
 * the tensors involved.
 */
#ifndef SHMTRAIN_TRAIN_SAFETENSORS_HEADER_H
#define SHMTRAIN_TRAIN_SAFETENSORS_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "shmtrain/status.h"

#define SFT_MAX_HEADER 100000000ull  /* the reference's MAX_HEADER_SIZE */
#define SFT_MAX_DIMS 8
#define SFT_MAX_NAME 256

struct sft_tensor {
    char name[SFT_MAX_NAME];
    char dtype[16];           /* "F32", "BF16", ... (the format's names) */
    int ndims;
    uint64_t shape[SFT_MAX_DIMS];
    uint64_t begin, end;      /* byte offsets into the data */
};

/* What sft_parse found: the tensors in the header's order; it owns them. */
struct sft_header {
    struct sft_tensor *tensors;
    int count;
    const unsigned char *data;  /* into the caller's bytes */
    uint64_t data_bytes;
};

/* Parse and check `size` bytes of a file (named `path` in messages, after
 * `flag`: "--init-from"); on success *out holds the tensors, released with
 * sft_free. */
st_status sft_parse(const unsigned char *file, size_t size, const char *flag, const char *path,
                    struct sft_header *out);
void sft_free(struct sft_header *h);

/* The tensor called `name`, or NULL. */
const struct sft_tensor *sft_find(const struct sft_header *h, const char *name);

#endif
