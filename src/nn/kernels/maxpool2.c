/* 2x2/2 max-pooling on channels-innermost layouts (see maxpool2.h).
 *
 * One output row at a time.  On AVX-512 machines a kernel written with
 * intrinsics handles up to 16 channels per call with masks: GCC 12 turns the
 * portable loop below into 128-bit pieces with byte-to-float widening and
 * alias checks, several times slower (docs/benchmarks-history.md, section
 * 2).  Elsewhere the portable loop runs,
 * compiled for several ISAs and picked at load time, since the library
 * targets baseline x86-64. */
#include "maxpool2.h"

#include <immintrin.h>
#include <stddef.h>

typedef void (*row_fwd_fn)(const float *r0, const float *r1, float *q, uint8_t *a, int ow_count, int lanes, long ssw,
                           long dsw);
typedef void (*row_bwd_fn)(float *r0, float *r1, const float *g, const uint8_t *a, int ow_count, int lanes, long ssw,
                           long dsw);

/* ------------------------------------------------------------ portable -- */

#include "simd.h"

/* Written once, instantiated for the usual widths: a constant lane count
 * turns the channel loop into whole-vector operations. */
#define MAXPOOL2_ROW_FWD(name, LANES, RELU)                                                              \
    ST_MULTIVERSION static void name(const float *restrict r0, const float *restrict r1, float *restrict q, \
                                     uint8_t *restrict a, int ow_count, int lanes, long ssw, long dsw)    \
    {                                                                                                    \
        (void)lanes;                                                                                     \
        for (int ow = 0; ow < ow_count; ow++, r0 += 2 * ssw, r1 += 2 * ssw, q += dsw, a += dsw) {      \
            const float *p01 = r0 + ssw, *p11 = r1 + ssw;                                                \
            for (int c = 0; c < (LANES); c++) {                                                          \
                float m = r0[c];                                                                         \
                uint8_t k = 0;                                                                           \
                if (p01[c] > m) m = p01[c], k = 1;                                                       \
                if (r1[c] > m) m = r1[c], k = 2;                                                         \
                if (p11[c] > m) m = p11[c], k = 3;                                                       \
                if ((RELU) && !(m > 0)) m = 0.0f, k = 4;  /* clipped: no gradient reaches the window */ \
                q[c] = m;                                                                                \
                a[c] = k;                                                                                \
            }                                                                                            \
        }                                                                                                \
    }

#define MAXPOOL2_ROW_BWD(name, LANES)                                                                    \
    ST_MULTIVERSION static void name(float *restrict r0, float *restrict r1, const float *restrict g,     \
                                     const uint8_t *restrict a, int ow_count, int lanes, long ssw,        \
                                     long dsw)                                                            \
    {                                                                                                    \
        (void)lanes;                                                                                     \
        for (int ow = 0; ow < ow_count; ow++, r0 += 2 * ssw, r1 += 2 * ssw, g += dsw, a += dsw) {      \
            float *p01 = r0 + ssw, *p11 = r1 + ssw;                                                      \
            for (int c = 0; c < (LANES); c++) {                                                          \
                r0[c] = a[c] == 0 ? g[c] : 0.0f;                                                         \
                p01[c] = a[c] == 1 ? g[c] : 0.0f;                                                        \
                r1[c] = a[c] == 2 ? g[c] : 0.0f;                                                         \
                p11[c] = a[c] == 3 ? g[c] : 0.0f;                                                        \
            }                                                                                            \
        }                                                                                                \
    }

MAXPOOL2_ROW_FWD(row_fwd, lanes, 0)
MAXPOOL2_ROW_FWD(row_fwd16, 16, 0)
MAXPOOL2_ROW_FWD(row_fwd8, 8, 0)
MAXPOOL2_ROW_FWD(row_fwd_relu, lanes, 1)
MAXPOOL2_ROW_FWD(row_fwd16_relu, 16, 1)
MAXPOOL2_ROW_FWD(row_fwd8_relu, 8, 1)
MAXPOOL2_ROW_BWD(row_bwd, lanes)
MAXPOOL2_ROW_BWD(row_bwd16, 16)
MAXPOOL2_ROW_BWD(row_bwd8, 8)

/* ------------------------------------------------------------- AVX-512 -- */

/* Up to 16 lanes per call, masked: a 16-channel block is one full vector,
 * lenet's 6-channel nhwc rows one masked vector per pixel, wider blocks
 * several calls.  The same comparisons as the portable loop, lane for lane:
 * strictly greater replaces (first maximum wins, NaN never does), and the
 * fused ReLU clips what is not greater than 0. */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

AVX512 static inline void take_if_greater(__m512 *m, __m512i *k, __m512 v, int index)
{
    const __mmask16 greater = _mm512_cmp_ps_mask(v, *m, _CMP_GT_OQ);
    *m = _mm512_mask_mov_ps(*m, greater, v);
    *k = _mm512_mask_mov_epi32(*k, greater, _mm512_set1_epi32(index));
}

#define MAXPOOL2_ROW_FWD_AVX512(name, RELU)                                                              \
    AVX512 static void name(const float *restrict r0, const float *restrict r1, float *restrict q,        \
                            uint8_t *restrict a, int ow_count, int lanes, long ssw, long dsw)             \
    {                                                                                                    \
        const __mmask16 on = (__mmask16)((1u << lanes) - 1);                                             \
        for (int ow = 0; ow < ow_count; ow++, r0 += 2 * ssw, r1 += 2 * ssw, q += dsw, a += dsw) {      \
            __m512 m = _mm512_maskz_loadu_ps(on, r0);                                                    \
            __m512i k = _mm512_setzero_si512();                                                          \
            take_if_greater(&m, &k, _mm512_maskz_loadu_ps(on, r0 + ssw), 1);                             \
            take_if_greater(&m, &k, _mm512_maskz_loadu_ps(on, r1), 2);                                   \
            take_if_greater(&m, &k, _mm512_maskz_loadu_ps(on, r1 + ssw), 3);                             \
            if (RELU) {                                                                                  \
                const __mmask16 clip = _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_NGT_UQ);         \
                m = _mm512_mask_mov_ps(m, clip, _mm512_setzero_ps());                                    \
                k = _mm512_mask_mov_epi32(k, clip, _mm512_set1_epi32(4));                                \
            }                                                                                            \
            _mm512_mask_storeu_ps(q, on, m);                                                             \
            _mm512_mask_cvtepi32_storeu_epi8(a, on, k);                                                  \
        }                                                                                                \
    }

MAXPOOL2_ROW_FWD_AVX512(row_fwd_avx512, 0)
MAXPOOL2_ROW_FWD_AVX512(row_fwd_relu_avx512, 1)

/* Plain stores: streaming ones (no read for ownership of the input-sized
 * gradient) made the pass plus its consumer's read slower, since the next
 * convolution then reads the gradient from memory instead of cache. */
AVX512 static inline void store_where(float *p, __mmask16 on, __m512i k, int index, __m512 g)
{
    _mm512_mask_storeu_ps(p, on, _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(index)), g));
}

AVX512 static void row_bwd_avx512(float *restrict r0, float *restrict r1, const float *restrict g,
                                  const uint8_t *restrict a, int ow_count, int lanes, long ssw, long dsw)
{
    const __mmask16 on = (__mmask16)((1u << lanes) - 1);
    for (int ow = 0; ow < ow_count; ow++, r0 += 2 * ssw, r1 += 2 * ssw, g += dsw, a += dsw) {
        const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(on, a));
        const __m512 gv = _mm512_maskz_loadu_ps(on, g);
        store_where(r0, on, k, 0, gv);
        store_where(r0 + ssw, on, k, 1, gv);
        store_where(r1, on, k, 2, gv);
        store_where(r1 + ssw, on, k, 3, gv);
    }
}

/* --------------------------------------------------------------- passes -- */

static int min_int(int a, int b) { return a < b ? a : b; }

static bool avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* Lanes per row call: at most 16 with AVX-512, else the whole block. */
static int lanes_per_call(int block)
{
    return avx512() && block > 16 ? 16 : block;
}

static row_fwd_fn pick_fwd(int block, bool relu)
{
    if (avx512())
        return relu ? row_fwd_relu_avx512 : row_fwd_avx512;
    if (relu)
        return block == 16 ? row_fwd16_relu : block == 8 ? row_fwd8_relu : row_fwd_relu;
    return block == 16 ? row_fwd16 : block == 8 ? row_fwd8 : row_fwd;
}

static row_bwd_fn pick_bwd(int block)
{
    if (avx512())
        return row_bwd_avx512;
    return block == 16 ? row_bwd16 : block == 8 ? row_bwd8 : row_bwd;
}

void maxpool2_forward(const struct maxpool2_shape *sh, const float *src, float *dst, uint8_t *arg, bool relu)
{
    const struct pool_layout *s = &sh->src, *d = &sh->dst;
    const int lanes = lanes_per_call(s->block);
    const row_fwd_fn row = pick_fwd(s->block, relu);
#pragma omp parallel for collapse(3) schedule(static)
    for (int i = 0; i < sh->batch; i++)
        for (int cb = 0; cb < s->nblocks; cb++)
            for (int oh = 0; oh < sh->out_h; oh++) {
                const float *r0 = src + i * s->sn + cb * s->sc + 2L * oh * s->sh;
                const long o = i * d->sn + cb * d->sc + oh * d->sh;
                for (int c = 0; c < s->block; c += lanes)
                    row(r0 + c, r0 + s->sh + c, dst + o + c, arg + o + c, sh->out_w, min_int(lanes, s->block - c),
                        s->sw, d->sw);
            }
}

void maxpool2_backward(const struct maxpool2_shape *sh, const float *diff_dst, const uint8_t *arg, float *diff_src)
{
    const struct pool_layout *s = &sh->src, *d = &sh->dst;
    const int lanes = lanes_per_call(s->block);
    const row_bwd_fn row = pick_bwd(s->block);
#pragma omp parallel for collapse(3) schedule(static)
    for (int i = 0; i < sh->batch; i++)
        for (int cb = 0; cb < s->nblocks; cb++)
            for (int oh = 0; oh < sh->out_h; oh++) {
                float *r0 = diff_src + i * s->sn + cb * s->sc + 2L * oh * s->sh;
                const long o = i * d->sn + cb * d->sc + oh * d->sh;
                for (int c = 0; c < s->block; c += lanes)
                    row(r0 + c, r0 + s->sh + c, diff_dst + o + c, arg + o + c, sh->out_w,
                        min_int(lanes, s->block - c), s->sw, d->sw);
            }
}
