/* A kept answer of the kernel tuner (src/nn/tune_kept.c), as a file from
 * outside: read only under its key, and then its "chose" line taken whole
 * (NUL-terminated, within the struct) and no switch turned on that is not
 * a kernel choice named in it as a word. */
#define _GNU_SOURCE
#include <string.h>

#include "fuzz.h"
#include "shmtrain/tuning.h"
#include "tune_kept.h"

static const char KEY[] = "# shmtrain's kernels\nmachine a CPU\nonednn 3.2.0 avx512_core\nmodel 0123456789abcdef\n"
                          "batch 64\nthreads 2\nprecision fp32\nswitches\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    st_nn_tuned out;
    memset(&out, 0, sizeof out);
    const bool kept = nn_tune_read_kept(text, KEY, &out);
    fuzz_assert(kept == (strncmp(text, KEY, strlen(KEY)) == 0 && strncmp(text + strlen(KEY), "chose ", 6) == 0));
    fuzz_assert(memchr(out.chose, '\0', sizeof out.chose) != NULL);
    int n;
    const st_nn_switch *sw = st_nn_switches(&n);
    for (int i = 0; i < n; i++) {
        const bool on = *(const bool *)((const char *)&out.tuning + sw[i].offset);
        fuzz_assert(!on || (kept && sw[i].kernel && strstr(out.chose, sw[i].env)));
    }
    free(text);
    return 0;
}
