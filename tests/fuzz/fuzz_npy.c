/* NumPy arrays: the first input byte says where the rest splits into the
 * images file and the labels file.  An array set that loads has sane
 * shapes, one label per image, labels below 256, and normalises. */
#include "fuzz.h"
#include "shmtrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const size_t rest = size - 1, cut = rest * data[0] / 255;
    const char *images = fuzz_file(0, data + 1, cut), *labels = fuzz_file(1, data + 1 + cut, rest - cut);
    st_dataset *d = NULL;
    if (!images || !labels || st_dataset_load_npy(&d, images, labels, "--npy-images", "--npy-labels") != ST_OK)
        return 0;
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    fuzz_assert((c == 1 || c == 3) && h >= 1 && w >= 1 && st_dataset_size(d) >= 1);
    fuzz_assert(st_dataset_max_label(d) <= 255);
    float mean[3], std[3];
    st_dataset_stats(d, mean, std, c);
    for (int k = 0; k < c; k++)
        fuzz_assert(mean[k] >= 0 && mean[k] <= 1 && std[k] > 0);
    st_dataset_destroy(d);
    return 0;
}
