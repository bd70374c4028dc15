#include "shmtrain/dtype.h"

#include <string.h>

#include "shmtrain/bf16.h"
#include "shmtrain/fp16.h"
#include "multiversion.h"

const char *st_dtype_name(st_dtype t)
{
    static const char *const names[] = {[ST_DTYPE_F32] = "fp32", [ST_DTYPE_BF16] = "bf16", [ST_DTYPE_I32] = "i32",
                                        [ST_DTYPE_F16] = "fp16", [ST_DTYPE_I64] = "i64", [ST_DTYPE_F64] = "fp64"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

bool st_dtype_parse(const char *name, st_dtype *out)
{
    if (!strcmp(name, "fp32"))
        *out = ST_DTYPE_F32;
    else if (!strcmp(name, "bf16"))
        *out = ST_DTYPE_BF16;
    else if (!strcmp(name, "fp16"))
        *out = ST_DTYPE_F16;
    else
        return false;
    return true;
}

size_t st_dtype_size(st_dtype t)
{
    return t == ST_DTYPE_BF16 || t == ST_DTYPE_F16 ? 2 : t == ST_DTYPE_I64 || t == ST_DTYPE_F64 ? 8 : 4;
}

/* The array conversions: the integer operations of bf16.h without a
 * branch, so GCC vectorises them, built for several ISAs and picked at
 * load time.  A step's gradients (millions) cross them twice when they are
 * exchanged in bf16; element at a time that cost more than the exchange. */

ST_CLONES_BY_EXTENSION
static void from_f32_portable(st_bf16 *restrict out, const float *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &in[i], sizeof u);
        const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t quiet_nan = (u >> 16) | 0x40u;
        out[i] = (st_bf16)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    }
}

#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 11)
#include <immintrin.h>
#define HAVE_NATIVE_BF16 1

/* AVX512-BF16's conversion: the same rounding and the same quiet NaN, 16
 * at a time, 2.6x the portable loop (235,146 floats: 11.4 vs 29.5 us on a
 * Zen 5).  It takes denormal inputs as zero, so a block holding one goes
 * the portable way: the bits stay bf16.h's on every CPU. */
__attribute__((target("avx512f,avx512bf16"))) static void from_f32_native(st_bf16 *restrict out,
                                                                          const float *restrict in, size_t n)
{
    const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(in + i);
        const __m512i u = _mm512_castps_si512(v);
        const __mmask16 denormal = _mm512_testn_epi32_mask(u, exponent) & _mm512_test_epi32_mask(u, mantissa);
        if (denormal)
            from_f32_portable(out + i, in + i, 16);
        else
            _mm256_storeu_si256((__m256i *)(out + i), (__m256i)_mm512_cvtneps_pbh(v));
    }
    from_f32_portable(out + i, in + i, n - i);
}
#endif

void st_bf16_from_f32_n(st_bf16 *restrict out, const float *restrict in, size_t n)
{
    st_bf16_from_f32_rows(out, n, in, n, 1, n);
}

void st_bf16_from_f32_rows(st_bf16 *out, size_t ldo, const float *in, size_t ldi, size_t rows, size_t n)
{
#ifdef HAVE_NATIVE_BF16
    static int native = -1;  /* a benign race: every thread finds the same */
    if (native < 0)
        native = __builtin_cpu_supports("avx512bf16");
    if (native) {
        for (size_t r = 0; r < rows; r++)
            from_f32_native(out + r * ldo, in + r * ldi, n);
        return;
    }
#endif
    for (size_t r = 0; r < rows; r++)
        from_f32_portable(out + r * ldo, in + r * ldi, n);
}

ST_CLONES_BY_EXTENSION
void st_bf16_to_f32_n(float *restrict out, const st_bf16 *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)in[i] << 16;
        memcpy(&out[i], &u, sizeof u);
    }
}

ST_CLONES_BY_EXTENSION
void st_bf16_to_f32_rows(float *out, size_t ldo, const st_bf16 *in, size_t ldi, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++) {
        float *restrict o = out + r * ldo;
        const st_bf16 *restrict i16 = in + r * ldi;
        for (size_t i = 0; i < n; i++) {
            const uint32_t u = (uint32_t)i16[i] << 16;
            memcpy(&o[i], &u, sizeof u);
        }
    }
}

/* fp16 arrays (fp16.h): the element conversions, vectorised by the compiler. */
ST_CLONES_BY_EXTENSION
void st_f16_from_f32_n(st_f16 *restrict out, const float *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = st_f16_from_f32(in[i]);
}

ST_CLONES_BY_EXTENSION
void st_f16_to_f32_n(float *restrict out, const st_f16 *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = st_f16_to_f32(in[i]);
}

/* By type: after the multiversioned array conversions above (clang will not
 * make a function multiversioned after a use of it). */
bool st_dtype_is_rounding(st_dtype t) { return t == ST_DTYPE_BF16 || t == ST_DTYPE_F16; }

bool st_dtype_convert_n(void *restrict dst, st_dtype to, const void *restrict src, st_dtype from, size_t n)
{
    if (to == from)
        memcpy(dst, src, n ? n * st_dtype_size(to) : 0);
    else if (from == ST_DTYPE_F32 && to == ST_DTYPE_BF16)
        st_bf16_from_f32_n(dst, src, n);
    else if (from == ST_DTYPE_F32 && to == ST_DTYPE_F16)
        st_f16_from_f32_n(dst, src, n);
    else if (from == ST_DTYPE_BF16 && to == ST_DTYPE_F32)
        st_bf16_to_f32_n(dst, src, n);
    else if (from == ST_DTYPE_F16 && to == ST_DTYPE_F32)
        st_f16_to_f32_n(dst, src, n);
    else
        return false;
    return true;
}

void st_dtype_scatter_n(uint16_t *restrict dst, const uint32_t *restrict index, st_dtype to,
                        const float *restrict src, size_t n)
{
    for (size_t i = 0; to == ST_DTYPE_BF16 && i < n; i++)
        dst[index[i]] = st_bf16_from_f32(src[i]);
    for (size_t i = 0; to == ST_DTYPE_F16 && i < n; i++)
        dst[index[i]] = st_f16_from_f32(src[i]);
}

void st_dtype_round_n(float *x, st_dtype t, size_t n)
{
    for (size_t i = 0; t == ST_DTYPE_BF16 && i < n; i++)
        x[i] = st_bf16_to_f32(st_bf16_from_f32(x[i]));
    for (size_t i = 0; t == ST_DTYPE_F16 && i < n; i++)
        x[i] = st_f16_to_f32(st_f16_from_f32(x[i]));
}
