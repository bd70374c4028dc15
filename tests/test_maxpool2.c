/* The 2x2/2 max-pool kernels (src/nn/maxpool2.c) against a plain loop over
 * (image, channel, row, column), on every layout the oneDNN backend hands
 * them: nhwc with 1 to 33 channels (masked and split AVX-512 calls), and
 * 16- and 8-channel blocks with padded lanes.  Max and select only, so the
 * comparison is exact: ties go to the first window element, NaN never
 * replaces, the fused ReLU clips what is not greater than 0, and the
 * backward pass writes nothing outside the pooled rows and columns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/maxpool2.h"

enum { N = 3, H = 7, W = 6, OH = 3, OW = 3 };  /* odd H: the last row drops out */
static const float UNTOUCHED = 7.0f;

struct layout_case {
    const char *name;
    int channels, block;  /* block 0: nhwc (one block of all channels) */
};

static struct pool_layout layout_of(const struct layout_case *lc, int h, int w, long *floats)
{
    const int block = lc->block ? lc->block : lc->channels;
    const int nblocks = (lc->channels + block - 1) / block;
    struct pool_layout l = {.sw = block, .sh = (long)w * block, .sc = (long)h * w * block,
                            .sn = (long)nblocks * h * w * block, .block = block, .nblocks = nblocks};
    *floats = N * l.sn;
    return l;
}

static long offset(const struct pool_layout *l, int n, int c, int y, int x)
{
    return n * l->sn + (c / l->block) * l->sc + y * l->sh + x * l->sw + c % l->block;
}

/* Few distinct values, so windows often tie. */
static void fill(float *v, const struct pool_layout *l, int channels, int h, int w, unsigned seed)
{
    srand(seed);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < channels; c++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    v[offset(l, n, c, y, x)] = (float)(rand() % 7 - 3) * 0.5f;
}

static void check_case(const struct layout_case *lc, bool relu)
{
    long src_n, dst_n;
    const struct maxpool2_shape s = {layout_of(lc, H, W, &src_n), layout_of(lc, OH, OW, &dst_n), N, OH, OW};
    float *src = calloc(src_n, sizeof *src), *dst = calloc(dst_n, sizeof *dst);
    float *dy = calloc(dst_n, sizeof *dy), *dx = malloc(src_n * sizeof *dx);
    uint8_t *arg = calloc(dst_n, 1);
    assert_true(src && dst && dy && dx && arg);
    fill(src, &s.src, lc->channels, H, W, 1);
    src[offset(&s.src, 1, lc->channels - 1, 2, 3)] = NAN;  /* never replaces a maximum */
    fill(dy, &s.dst, lc->channels, OH, OW, 2);
    for (long i = 0; i < src_n; i++)
        dx[i] = UNTOUCHED;

    maxpool2_forward(&s, src, dst, arg, relu);
    maxpool2_backward(&s, dy, arg, dx);

    for (int n = 0; n < N; n++)
        for (int c = 0; c < lc->channels; c++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    long at[4];
                    for (int k = 0; k < 4; k++)
                        at[k] = offset(&s.src, n, c, 2 * oy + k / 2, 2 * ox + k % 2);
                    float m = src[at[0]];
                    int win = 0;
                    for (int k = 1; k < 4; k++)
                        if (src[at[k]] > m)
                            m = src[at[k]], win = k;
                    if (relu && !(m > 0))
                        m = 0.0f, win = 4;
                    const long o = offset(&s.dst, n, c, oy, ox);
                    if (!(dst[o] == m || (isnan(dst[o]) && isnan(m))))
                        fail_msg("%s relu=%d: dst[%d,%d,%d,%d] = %g, expected %g", lc->name, relu, n, c, oy, ox,
                                 (double)dst[o], (double)m);
                    for (int k = 0; k < 4; k++) {
                        const float want = k == win ? dy[o] : 0.0f;
                        if (dx[at[k]] != want)
                            fail_msg("%s relu=%d: dx at window %d of [%d,%d,%d,%d] = %g, expected %g", lc->name,
                                     relu, k, n, c, oy, ox, (double)dx[at[k]], (double)want);
                    }
                }
    /* The dropped last row is not written; padded lanes stay 0 both ways. */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < lc->channels; c++)
            for (int x = 0; x < W; x++)
                assert_true(dx[offset(&s.src, n, c, H - 1, x)] == UNTOUCHED);
    for (int n = 0; n < N; n++)
        for (int c = lc->channels; c < s.src.block * s.src.nblocks; c++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    assert_true(dst[offset(&s.dst, n, c, oy, ox)] == 0.0f);
                    assert_true(dx[offset(&s.src, n, c, 2 * oy, 2 * ox)] == 0.0f);
                }
    free(src);
    free(dst);
    free(dy);
    free(dx);
    free(arg);
}

static const struct layout_case CASES[] = {
    {"nhwc 1", 1, 0},   {"nhwc 6", 6, 0},          {"nhwc 16", 16, 0}, {"nhwc 24", 24, 0},
    {"nhwc 33", 33, 0}, {"16-blocks, 20 of 32", 20, 16}, {"8-blocks, 13 of 16", 13, 8},
};

static void test_matches_plain_loop(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        check_case(&CASES[i], false);
        check_case(&CASES[i], true);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matches_plain_loop)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
