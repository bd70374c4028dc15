/* IDX images and labels (gzipped or not): the first two input bytes (little
 * endian) are the images file's length, the labels file is the rest.  A set that loads is
 * read end to end: every label within the maximum it reports, every byte of
 * the last image, the per-channel statistics. */
#include "fuzz.h"
#include "shmtrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const size_t rest = size - 2, want = (size_t)data[0] | (size_t)data[1] << 8, cut = want < rest ? want : rest;
    const char *images = fuzz_file(0, data + 2, cut), *labels = fuzz_file(1, data + 2 + cut, rest - cut);
    st_dataset *d = NULL;
    if (!images || !labels || st_dataset_load_idx(&d, images, labels) != ST_OK)
        return 0;
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    fuzz_assert(c >= 1 && h >= 1 && w >= 1 && st_dataset_size(d) >= 1);
    for (size_t i = 0; i < st_dataset_size(d); i++)
        fuzz_assert(st_dataset_label(d, i) >= 0 && st_dataset_label(d, i) <= st_dataset_max_label(d));
    const uint8_t *last = st_dataset_image(d, st_dataset_size(d) - 1);
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)c * h * w; i++)
        sum += last[i];
    (void)sum;
    float mean[4], std[4];
    st_dataset_stats(d, mean, std, c < 4 ? c : 4);
    st_dataset_destroy(d);
    return 0;
}
