/* CIFAR binary batches: the first input byte chooses CIFAR-10 or -100 and
 * whether the rest is one file or two.  A set that loads has 3x32x32 images
 * and labels within its classes. */
#include "fuzz.h"
#include "shmtrain/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const bool cifar100 = data[0] & 1, two = data[0] & 2;
    const size_t rest = size - 1, cut = two ? rest / 2 : rest;
    const char *paths[2] = {fuzz_file(0, data + 1, cut), two ? fuzz_file(1, data + 1 + cut, rest - cut) : NULL};
    st_dataset *d = NULL;
    if (!paths[0] || (two && !paths[1]) || st_dataset_load_cifar(&d, paths, two ? 2 : 1, cifar100) != ST_OK)
        return 0;
    int c, h, w;
    st_dataset_shape(d, &c, &h, &w);
    fuzz_assert(c == 3 && h == 32 && w == 32 && st_dataset_size(d) >= 1);
    for (size_t i = 0; i < st_dataset_size(d); i++)
        fuzz_assert(st_dataset_label(d, i) >= 0 && st_dataset_label(d, i) < (cifar100 ? 100 : 10));
    st_dataset_destroy(d);
    return 0;
}
