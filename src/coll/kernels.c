/* The collectives' element loops: reductions, and copies into a caller's
 * buffer in an order that does not alias (coll_internal.h). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "coll_internal.h"

/* Built for several ISAs, picked at load time (ifunc): the library stays
 * portable while the reduction uses the widest vectors the CPU has. */
#define ST_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))

ST_MULTIVERSION
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

ST_MULTIVERSION
static void add_backward(float *dst, const float *src, size_t n)
{
    size_t i = n;
    for (; i >= 8; i -= 8) {
        coll_f8 a, b;
        memcpy(&a, dst + i - 8, sizeof a);
        memcpy(&b, src + i - 8, sizeof b);
        a += b;
        memcpy(dst + i - 8, &a, sizeof a);
    }
    while (i-- > 0)
        dst[i] += src[i];
}

ST_MULTIVERSION
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
        add_backward(dst, src, n);
    else
        coll_add_into(dst, src, n);
}

ST_MULTIVERSION
void coll_add_into_div(float *restrict dst, const float *restrict src, size_t n, float div)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (dst[i] + src[i]) / div;
}

