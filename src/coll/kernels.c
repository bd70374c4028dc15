/* The collectives' element loops: reductions, and copies into a caller's
 * buffer in an order that does not alias (coll_internal.h). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"
#include "shmtrain/bf16.h"
#include "../common/multiversion.h"

/* Built for several ISAs, picked at load time (ifunc): the library stays
 * portable while the reduction uses the widest vectors the CPU has. */
ST_CLONES_BY_EXTENSION
void coll_add_into(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* A user's buffer just above a segment array modulo 4 KiB (glibc's large
 * allocations start 16 bytes into a page, the segment's arrays at a page)
 * makes the forward order's loads, running ahead, match the low 12 bits of
 * stores still in flight: each load then waits for a store (4K aliasing),
 * and the copying path ran 2-5x slower than on the zero-copy region at
 * 4-256 KiB.  The same work last element first has no such pairs. */
static bool aliases_forward(const void *dst, const void *src)
{
    const uintptr_t d = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    return d != 0 && d < 2048;
}

typedef float coll_f8 __attribute__((vector_size(32)));

/* dst = (own + theirs) / div (div 1: the plain sum), first element first,
 * or last element first (where own may be dst: coll_add_to_user's +=). */
ST_CLONES_BY_EXTENSION
static void add_out_forward(float *restrict dst, const float *restrict own, const float *restrict theirs, size_t n,
                            float div)
{
    if (div == 1.0f)
        for (size_t i = 0; i < n; i++)
            dst[i] = own[i] + theirs[i];
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = (own[i] + theirs[i]) / div;
}

ST_CLONES_BY_EXTENSION
static void add_out_backward(float *dst, const float *own, const float *theirs, size_t n, float div)
{
    size_t i = n;
    for (; i >= 8; i -= 8) {
        coll_f8 a, b;
        memcpy(&a, own + i - 8, sizeof a);
        memcpy(&b, theirs + i - 8, sizeof b);
        a += b;
        if (div != 1.0f)
            a /= div;
        memcpy(dst + i - 8, &a, sizeof a);
    }
    while (i-- > 0)
        dst[i] = div != 1.0f ? (own[i] + theirs[i]) / div : own[i] + theirs[i];
}

ST_CLONES_BY_EXTENSION
static void copy_backward(char *dst, const char *src, size_t bytes)
{
    size_t i = bytes;
    for (; i >= sizeof(coll_f8); i -= sizeof(coll_f8)) {
        coll_f8 a;
        memcpy(&a, src + i - sizeof a, sizeof a);
        memcpy(dst + i - sizeof a, &a, sizeof a);
    }
    while (i-- > 0)
        dst[i] = src[i];
}

/* dst (a caller's buffer) = or += src (a segment array), in the order
 * that does not alias. */
void coll_copy_to_user(void *dst, const void *src, size_t bytes)
{
    if (aliases_forward(dst, src))
        copy_backward(dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

void coll_add_to_user(float *dst, const float *src, size_t n)
{
    if (aliases_forward(dst, src))
        add_out_backward(dst, dst, src, n, 1.0f);
    else
        coll_add_into(dst, src, n);
}

/* dst (a segment array) = (own + theirs) / div, own a caller's buffer:
 * the sum of ring.c's dst += theirs, bit for bit, in the order that does
 * not alias. */
void coll_add_out(float *dst, const float *own, const float *theirs, size_t n, float div)
{
    if (aliases_forward(dst, own))
        add_out_backward(dst, own, theirs, n, div);
    else
        add_out_forward(dst, own, theirs, n, div);
}

ST_CLONES_BY_EXTENSION
void coll_add_into_div(float *restrict dst, const float *restrict src, size_t n, float div)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (dst[i] + src[i]) / div;
}


/* bf16 payloads with a stage (across nodes), which takes fp32 sums: the
 * conversions of bf16.h as integer lanes GCC vectorises. */
ST_CLONES_BY_EXTENSION
void coll_bf16_sum(float *restrict sums, uint16_t *const *bufs, int world, size_t lo, size_t hi)
{
    const size_t n = hi - lo;
    for (size_t i = 0; i < n; i++)
        sums[i] = st_bf16_to_f32(bufs[0][lo + i]);
    for (int q = 1; q < world; q++) {
        const uint16_t *restrict b = bufs[q] + lo;
        for (size_t i = 0; i < n; i++) {
            const uint32_t u = (uint32_t)b[i] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            sums[i] += f;
        }
    }
}

/* The same without an fp32 buffer: sum, divide and round in registers.
 * The conversions' instructions, not the bytes, bound this loop, so AVX2
 * gets its own: a bf16 widens to fp32 by interleaving zeros below it
 * (vpunpck{l,h}wd, in-lane), and the rounded halves pack back with
 * vpackusdw, whose in-lane order undoes the interleave.  It rounds without
 * the NaN rule: a sum of two or more bf16 values, or a quotient, is a NaN
 * only as the FPU makes one, already quiet and with the low 16 bits zero,
 * which the rounding leaves as it is.  Bit for bit the definition. */
static void reduce_scalar(uint16_t *out, uint16_t *const *bufs, int world, size_t lo, size_t hi, float div)
{
    for (size_t i = lo; i < hi; i++) {
        float sum = st_bf16_to_f32(bufs[0][i]);
        for (int q = 1; q < world; q++)
            sum += st_bf16_to_f32(bufs[q][i]);
        out[i] = st_bf16_from_f32(div != 1.0f ? sum / div : sum);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static inline __m256i round_to_bf16(__m256 sums)
{
    const __m256i u = _mm256_castps_si256(sums);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
}

__attribute__((target("avx2"))) static size_t reduce_avx2(uint16_t *out, uint16_t *const *bufs, int world, size_t lo,
                                                          size_t hi, float div)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256 d = _mm256_set1_ps(div);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(bufs[0] + i));
        __m256 s0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x0));
        __m256 s1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x0));
        for (int q = 1; q < world; q++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(bufs[q] + i));
            s0 = _mm256_add_ps(s0, _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x)));
            s1 = _mm256_add_ps(s1, _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x)));
        }
        if (div != 1.0f)
            s0 = _mm256_div_ps(s0, d), s1 = _mm256_div_ps(s1, d);
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_packus_epi32(round_to_bf16(s0), round_to_bf16(s1)));
    }
    return i;
}
#endif

void coll_bf16_reduce(uint16_t *restrict out, uint16_t *const *bufs, int world, size_t lo, size_t hi, float div)
{
#if defined(__x86_64__)
    if (world >= 2 && __builtin_cpu_supports("avx2"))
        lo = reduce_avx2(out, bufs, world, lo, hi, div);
#endif
    reduce_scalar(out, bufs, world, lo, hi, div);
}
