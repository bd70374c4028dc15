/* bfloat16: the top 16 bits of an IEEE binary32.  Conversions round to
 * nearest, ties to even (as oneDNN and PyTorch do); a NaN stays a (quiet)
 * NaN.  Header-only: the collectives (libc only) and the engine share it. */
#ifndef SHMTRAIN_BF16_H
#define SHMTRAIN_BF16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t st_bf16;

static inline st_bf16 st_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (st_bf16)((u >> 16) | 0x40u);  /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (st_bf16)(u >> 16);
}

static inline float st_bf16_to_f32(st_bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
