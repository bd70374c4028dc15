/* Test helper for the engine's tests (test_nn, test_gpt, test_bf16): a
 * seeded stream of floats in [-1, 1) and model text parsed or the test
 * failed.  Include after <cmocka.h>. */
#ifndef SHMTRAIN_TESTS_NETTEST_H
#define SHMTRAIN_TESTS_NETTEST_H

#include <stdint.h>

#include "shmtrain/nn.h"

/* The next float in [-1, 1) of the stream *s (an LCG: the same on every machine). */
static inline float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

static inline st_model *parse(const char *text)
{
    st_model *m = NULL;
    if (st_model_parse(&m, text, "test") != ST_OK)
        fail_msg("parse failed: %s", st_last_error());
    return m;
}

#endif
