/* The text corpus: the first input byte chooses the tokens (characters or
 * bytes), a context of 1 to 16 and whether the rest is one file (its last
 * tenth validates) or two.  A corpus that loads and is long enough is cut
 * into a training batch and the evaluation windows, every id within the
 * vocabulary. */
#include "fuzz.h"
#include "shmtrain/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const st_text_tokens tokens = data[0] & 1 ? ST_TEXT_BYTES : ST_TEXT_CHARS;
    const bool two = data[0] & 2;
    const int context = 1 + (data[0] >> 4);
    const size_t rest = size - 1, cut = two ? rest / 2 : rest;
    const char *paths[2] = {fuzz_file(0, data + 1, cut), two ? fuzz_file(1, data + 1 + cut, rest - cut) : NULL};
    st_text *t = NULL;
    if (!paths[0] || (two && !paths[1]) || st_text_load(&t, paths, two ? 2 : 1, tokens) != ST_OK)
        return 0;
    const int vocab = st_text_vocab(t);
    fuzz_assert(vocab >= 1 && vocab <= 256);
    enum { BATCH = 2, WORLD = 2 };
    int32_t x[BATCH * 16];
    int y[BATCH * 16], valid;
    if (st_text_check(t, context, WORLD * BATCH) == ST_OK) {
        for (int rank = 0; rank < WORLD; rank++) {
            fuzz_assert(st_text_train_batch(t, 1, 0, WORLD, rank, BATCH, context, x, y) == ST_OK);
            for (int i = 0; i < BATCH * context; i++)
                fuzz_assert(x[i] >= 0 && x[i] < vocab && y[i] >= 0 && y[i] < vocab);
        }
        const size_t windows = st_text_eval_windows(t, context, 0);
        for (size_t first = 0; first < windows; first += WORLD * BATCH) {
            st_text_eval_batch(t, first, windows, WORLD, 1, BATCH, context, x, y, &valid);
            fuzz_assert(valid >= 0 && valid <= BATCH);
            for (int i = 0; i < BATCH * context; i++)
                fuzz_assert(x[i] >= 0 && x[i] < vocab && y[i] >= 0 && y[i] < vocab);
        }
    }
    st_text_destroy(t);
    return 0;
}
