/* Internal: what the hand-vectorised C kernels share.
 *
 * ST_MULTIVERSION compiles a function for x86-64-v4, -v3 and the baseline
 * (src/common/multiversion.h says why levels).  The files using it are compiled with
 * -ffp-contract=fast (CMakeLists.txt; -std=c11 turns contraction off):
 * gpt-mini's GELU 12% faster, its loss 8% (2-vCPU EPYC).
 *
 * nn_lines_alloc: memory those vectors stream through, in whole cache lines
 * from a line's start (64-byte aligned): malloc's 16-byte offset put every
 * 64-byte vector across two lines, and attention's fp32 kernels ran 1.2x
 * slower so (docs/benchmarks.md 0l).  count elements of size bytes, as
 * calloc takes them; NULL when out of memory or when count x size does not
 * fit a size_t; free() frees it.
 *
 * nn_expf: e^x in plain arithmetic that GCC vectorises (libm's expf is a
 * call per element: oneDNN 2.6's AVX2 GELU ran at 5 ns per element here,
 * the one built on this at 1.6).  Cephes' single-precision polynomial after
 * a Cody-Waite reduction by ln 2: relative error below 2e-7 on [-87, 88],
 * inputs clamped there (e^-87 ~ 1.6e-38 is the smallest normal result).
 * A file using it is compiled with -fno-trapping-math (CMakeLists.txt):
 * GCC turns the clamps into blends, and so vectorises the loop, only when
 * a compare may not raise an FP exception. */
#ifndef SHMTRAIN_NN_SIMD_H
#define SHMTRAIN_NN_SIMD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/multiversion.h"

#define ST_MULTIVERSION ST_CLONES_BY_LEVEL

/* Lane i of the result is a[mask[i]]: a permutation chosen at run time (the
 * stem's, by channel count).  GCC's __builtin_shuffle; clang's vector
 * extensions take only constant indices, so there a loop it vectorises. */
#ifdef __clang__
#define ST_PERMUTE(a, mask)                                                              \
    ({                                                                                    \
        __typeof__(a) st_a_ = (a), st_r_;                                                 \
        for (unsigned st_i_ = 0; st_i_ < sizeof st_a_ / sizeof st_a_[0]; st_i_++)         \
            st_r_[st_i_] = st_a_[(mask)[st_i_] & (sizeof st_a_ / sizeof st_a_[0] - 1)];   \
        st_r_;                                                                            \
    })
#else
#define ST_PERMUTE(a, mask) __builtin_shuffle(a, mask)
#endif

static inline void *nn_lines_alloc(size_t count, size_t size, bool zeroed)
{
    if (size && count > (SIZE_MAX - 63) / size)  /* the product, or its rounding up, would wrap: calloc's refusal */
        return NULL;
    const size_t bytes = count * size, whole = (bytes ? bytes + 63 : 64) / 64 * 64;
    void *p = aligned_alloc(64, whole);
    if (p && zeroed)
        memset(p, 0, whole);
    return p;
}

static inline float nn_expf(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* round(x / ln 2) */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = 1 - 2 / (e^2u + 1): absolute error about 1e-7. */
static inline float nn_tanhf(float u) { return 1.0f - 2.0f / (nn_expf(2.0f * u) + 1.0f); }

#endif
