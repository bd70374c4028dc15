/* bfloat16: the top 16 bits of an IEEE binary32.  Conversions round to
 * nearest, ties to even (as oneDNN and PyTorch do); a NaN stays a (quiet)
 * NaN.  The element conversions are inline here (they are the definition);
 * the array ones, the same bits in vector lanes, are in src/common/dtype.c
 * (libshmtrain-common, libc only), shared by the collectives and the trainer. */
#ifndef SHMTRAIN_BF16_H
#define SHMTRAIN_BF16_H

#include <stddef.h>
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

/* out[i] = st_bf16_from_f32(in[i]) and out[i] = st_bf16_to_f32(in[i]) for
 * i < n, vectorised. */
void st_bf16_from_f32_n(st_bf16 *restrict out, const float *restrict in, size_t n);
void st_bf16_to_f32_n(float *restrict out, const st_bf16 *restrict in, size_t n);

/* The same on `rows` rows of n elements, ldo and ldi elements apart: one
 * call for a matrix's columns (an attention head's, 32 elements a row, where
 * a call a row cost a third of the conversion). */
void st_bf16_from_f32_rows(st_bf16 *out, size_t ldo, const float *in, size_t ldi, size_t rows, size_t n);
void st_bf16_to_f32_rows(float *out, size_t ldo, const st_bf16 *in, size_t ldi, size_t rows, size_t n);

#endif
