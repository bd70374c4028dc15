/* A matrix transposed in 8 x 8 blocks of vector shuffles (transpose.h).
 * A scalar loop over gpt-mini's 64 x 32 head took as long as the product
 * it fed; this, about a quarter of it. */
#include "transpose.h"

#include <stdbool.h>
#include <string.h>

#include "simd.h"

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));

/* dst rows n = src columns n of an 8 x 8 block: three rounds of shuffles
 * (AVX2's unpack, shufps and 128-bit permute).  With sum: the block's rows
 * added to it one after another (the first block's first row assigned). */
static inline __attribute__((always_inline)) void transpose8(float *dst, long ldd, const float *src, long lds,
                                                             v8 *sum, bool first)
{
    v8 r[8], t[8], u[8];
    for (int m = 0; m < 8; m++)
        r[m] = *(const v8u *)(src + m * lds);
    if (sum) {
        *sum = first ? r[0] : *sum + r[0];
        for (int m = 1; m < 8; m++)
            *sum += r[m];
    }
    for (int m = 0; m < 8; m += 2) {
        t[m] = __builtin_shufflevector(r[m], r[m + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[m + 1] = __builtin_shufflevector(r[m], r[m + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int m = 0; m < 8; m += 4)
        for (int e = 0; e < 2; e++) {
            u[m + e] = __builtin_shufflevector(t[m + e], t[m + e + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[m + e + 2] = __builtin_shufflevector(t[m + e], t[m + e + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    /* u[0] u[2] u[1] u[3] hold columns 0 1 2 3 of rows 0-3 (low half) and 4-7 of them (high half) */
    static const int order[4] = {0, 2, 1, 3};
    for (int n = 0; n < 4; n++) {
        *(v8u *)(dst + n * ldd) = __builtin_shufflevector(u[order[n]], u[order[n] + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        *(v8u *)(dst + (n + 4) * ldd) = __builtin_shufflevector(u[order[n]], u[order[n] + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

/* Column by column block, rows in order, so each column's sum is the
 * sequence of additions a plain loop down the column makes. */
ST_MULTIVERSION void nn_transpose(float *dst, long ldd, const float *src, long lds, long rows, long cols, float *sums)
{
    const long r8 = rows & ~7L, c8 = cols & ~7L;
    for (long c = 0; c < c8; c += 8) {
        v8 sum = {0};
        for (long r = 0; r < r8; r += 8)
            transpose8(dst + c * ldd + r, ldd, src + r * lds + c, lds, sums ? &sum : NULL, r == 0);
        float lane[8];
        memcpy(lane, &sum, sizeof lane);
        for (long r = r8; r < rows; r++)
            for (int k = 0; k < 8; k++) {
                const float v = src[r * lds + c + k];
                dst[(c + k) * ldd + r] = v;
                lane[k] = r == 0 ? v : lane[k] + v;
            }
        if (sums)
            memcpy(sums + c, lane, sizeof lane);
    }
    for (long c = c8; c < cols; c++) {
        float sum = 0;
        for (long r = 0; r < rows; r++) {
            const float v = src[r * lds + c];
            dst[c * ldd + r] = v;
            sum = r == 0 ? v : sum + v;
        }
        if (sums)
            sums[c] = sum;
    }
}
