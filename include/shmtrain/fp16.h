/* IEEE binary16 (fp16, PyTorch's float16): 1 sign, 5 exponent, 10 mantissa
 * bits.  Conversions round to nearest, ties to even, as PyTorch and numpy
 * do; past 65504 (at 65520 and above) a value becomes infinity; a NaN stays
 * a NaN, made quiet, sign kept.  The element conversions are inline here
 * (they are the definition); the array ones are in src/common/dtype.c. */
#ifndef SHMTRAIN_FP16_H
#define SHMTRAIN_FP16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t st_f16;

static inline st_f16 st_f16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (st_f16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* quiet NaN */
    if (a >= 0x477ff000u)  /* 65520 and above, and infinity */
        return (st_f16)(sign | 0x7c00u);
    if (a < 0x38800000u) {  /* below 2^-14: a subnormal or zero */
        if (a <= 0x33000000u)  /* 2^-25 and below: half the smallest subnormal rounds to even, 0 */
            return (st_f16)sign;
        const int shift = 126 - (int)(a >> 23);  /* 14 .. 24 */
        const uint32_t m = (a & 0x7fffffu) | 0x800000u, half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
        uint32_t r = m >> shift;
        r += rest > half || (rest == half && (r & 1u));
        return (st_f16)(sign | r);
    }
    uint32_t r = a - 0x38000000u;  /* the exponent rebiased, 127 to 15 */
    r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return (st_f16)(sign | r);
}

static inline float st_f16_to_f32(st_f16 h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        x = sign | ((e + 112) << 23) | (m << 13);
    } else if (!m) {
        x = sign;
    } else {  /* a subnormal: normalised */
        uint32_t k = 0;
        while (!(m & 0x400u))
            m <<= 1, k++;
        x = sign | ((113 - k) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* out[i] = st_f16_from_f32(in[i]) and out[i] = st_f16_to_f32(in[i]), i < n. */
void st_f16_from_f32_n(st_f16 *restrict out, const float *restrict in, size_t n);
void st_f16_to_f32_n(float *restrict out, const st_f16 *restrict in, size_t n);

#endif
