/* The safetensors reader (--init-from): a header it accepts keeps every rule
 * of the format's reference reader: names unique, each tensor's bytes its
 * dtype and shape, the tensors tiling the data from its first byte to its
 * last. */
#include <string.h>

#include "fuzz.h"
#include "safetensors_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sft_header h;
    if (sft_parse(data, size, "--init-from", "fuzz.safetensors", &h) != ST_OK)
        return 0;
    uint64_t covered = 0;
    for (int i = 0; i < h.count; i++) {
        const struct sft_tensor *t = &h.tensors[i];
        fuzz_assert(t->begin <= t->end && t->end <= h.data_bytes);
        fuzz_assert(sft_find(&h, t->name) == t);  /* unique */
        covered += t->end - t->begin;
    }
    fuzz_assert(covered == h.data_bytes);  /* no gap, no overlap */
    fuzz_assert(h.data + h.data_bytes == data + size);
    sft_free(&h);
    return 0;
}
