/* Token files (nanoGPT's .bin, llm.c's with its header): the first two
 * input bytes are the vocabulary, the rest the file.  A file that loads
 * gives windows whose every id is below the vocabulary. */
#include "fuzz.h"
#include "shmtrain/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const int vocab = 1 + (data[0] | data[1] << 8);
    const char *path = fuzz_file(0, data + 2, size - 2);
    st_text *t = NULL;
    if (!path || st_text_load_tokens(&t, path, NULL, vocab, true) != ST_OK)
        return 0;
    fuzz_assert(st_text_vocab(t) == vocab && st_text_alphabet_len(t) == 0);
    enum { CONTEXT = 4, BATCH = 2 };
    int32_t x[BATCH * CONTEXT];
    int y[BATCH * CONTEXT], valid;
    if (st_text_check(t, CONTEXT, BATCH) == ST_OK) {
        fuzz_assert(st_text_train_batch(t, 1, 0, 1, 0, BATCH, CONTEXT, x, y) == ST_OK);
        for (int i = 0; i < BATCH * CONTEXT; i++)
            fuzz_assert(x[i] >= 0 && x[i] < vocab && y[i] >= 0 && y[i] < vocab);
        const size_t windows = st_text_eval_windows(t, CONTEXT, 0);
        st_text_eval_batch(t, 0, windows, 1, 0, BATCH, CONTEXT, x, y, &valid);
        for (int i = 0; i < BATCH * CONTEXT; i++)
            fuzz_assert(x[i] >= 0 && x[i] < vocab);
    }
    st_text_destroy(t);
    return 0;
}
