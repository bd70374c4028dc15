/* A one-channel stem convolution (stem.h). */
#include "stem.h"

#include <string.h>

#include "simd.h"

typedef float v16 __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));
/* The same vector at any address (nhwc pixels of c floats). */
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));

#define TILE_PAIRS 14  /* 28 output pixels (a lenet row): 14 accumulators, enough multiply-adds in flight */

/* Vectors move by pointer and macro: a 64-byte vector passed or returned by
 * value would change the ABI of the baseline clone. */
#define LOADU(p) (*(const v16u *)(p))
#define RELU(v) ((v16)((v16i)(v) & (v16i)((v) > (v16){0})))

/* The spread image: for every column c of the zero-padded image (and one
 * more), pixel c 8 times then pixel c + 1 8 times, 64 bytes, so that every
 * load of a pair is one aligned vector (a load across two cache lines costs
 * two).  The scratch holds it, then the backward's output-gradient pairs. */
static long spread_cols(const struct stem_shape *s)
{
    return s->w + 2 * s->pad + 1;  /* an odd width's last pair reads one column past its last pixel */
}

static size_t spread_floats(const struct stem_shape *s)
{
    return (size_t)(s->h + 2 * s->pad) * (size_t)spread_cols(s) * STEM_LANES;
}

static long pairs_of(const struct stem_shape *s)
{
    return (s->ow + 1) / 2;
}

size_t stem_scratch_floats(const struct stem_shape *s)
{
    return spread_floats(s) + (size_t)(s->oh * pairs_of(s)) * STEM_LANES;
}

size_t stem_partial_floats(const struct stem_shape *s)
{
    return (size_t)(s->k * s->k + 1) * STEM_LANES;
}

/* Only the image's pixels are written: the padding stays as first zeroed.
 * Inlined into each clone, so that it is vectorised as the kernels are. */
static inline __attribute__((always_inline)) void spread(const struct stem_shape *s, const float *img, float *out)
{
    const long cols = spread_cols(s);
    for (long r = 0; r < s->h; r++) {
        float *row = out + (r + s->pad) * cols * STEM_LANES;
        for (long c = 0; c < s->w; c++) {
            const float v = img[r * s->w + c];
            const long at = c + s->pad;
            for (int l = 0; l < 8; l++)
                row[at * STEM_LANES + l] = v;  /* as its pair's first pixel */
            for (int l = 0; at > 0 && l < 8; l++)
                row[(at - 1) * STEM_LANES + 8 + l] = v;  /* as the second of the pair before */
        }
    }
}

/* Lanes between the kernels' pairs (pixel p in lanes 0-7, p + 1 in 8-15,
 * channels past c zero) and nhwc's (pixel p's c channels, then p + 1's). */
struct lanes {
    v16i to_nhwc, from_nhwc, keep;
};

static void lanes_of(const struct stem_shape *s, struct lanes *l)
{
    for (int i = 0; i < STEM_LANES; i++) {
        l->to_nhwc[i] = i < s->c ? i : i < 2 * s->c ? 8 + i - s->c : 0;
        l->from_nhwc[i] = i % 8 < s->c ? (i < 8 ? i : s->c + i - 8) : 0;
        l->keep[i] = i % 8 < s->c ? -1 : 0;
    }
}

/* Floats of nhwc from pixel `first` of a row that a pair moves: a whole
 * vector while that stays inside the row, else just the pair's own. */
static inline long pair_floats(const struct stem_shape *s, long first)
{
    if (first * s->c + STEM_LANES <= s->ow * s->c)
        return STEM_LANES;
    return (s->ow - first < 2 ? s->ow - first : 2) * s->c;
}

/* A tap's weights for lanes 0-7 and again 8-15 (channels past c: 0). */
static void tap_vectors(const struct stem_shape *s, const float *w, v16 *taps)
{
    const int kk = s->k * s->k;
    for (int t = 0; t < kk; t++)
        for (int l = 0; l < STEM_LANES; l++)
            taps[t][l] = l % 8 < s->c ? w[(l % 8) * kk + t] : 0.0f;
}

/* A tile's pairs into nhwc, in order along the row: a whole store's floats
 * past its pair are the next pairs', which write them after. */
static inline __attribute__((always_inline)) void store_tile(const struct stem_shape *s, const v16 *acc, bool relu,
                                                             long oh, long col, int pairs, const struct lanes *l,
                                                             float *y)
{
    for (int q = 0; q < pairs; q++) {
        const v16 v = ST_PERMUTE(relu ? RELU(acc[q]) : acc[q], l->to_nhwc);
        const long pixel = col + 2 * q, floats = pair_floats(s, pixel);
        float *out = y + (oh * s->ow + pixel) * s->c;
        if (floats == STEM_LANES)
            *(v16u *)out = v;
        else
            for (long i = 0; i < floats; i++)
                out[i] = v[i];
    }
}

/* `pairs` is a constant at each call (always_inline), so acc stays in registers. */
static inline __attribute__((always_inline)) void row_tile(const struct stem_shape *s, const float *xe, const v16 *taps,
                                                           const v16 *bias, bool relu, long oh, long col, int pairs,
                                                           const struct lanes *l, float *y)
{
    const long cols = spread_cols(s);
    v16 acc[TILE_PAIRS];
    for (int q = 0; q < pairs; q++)
        acc[q] = *bias;
    for (int kh = 0; kh < s->k; kh++) {
        const v16 *row = (const v16 *)(xe + ((oh + kh) * cols + col) * STEM_LANES);
        for (int kw = 0; kw < s->k; kw++) {
            const v16 t = taps[kh * s->k + kw];
            for (int q = 0; q < pairs; q++)
                acc[q] += row[2 * q + kw] * t;
        }
    }
    store_tile(s, acc, relu, oh, col, pairs, l, y);
}

/* The same sums for a tile of constant `pairs` and kernel `k`, each spread
 * column loaded once per kernel row: column c is tap kw of pair
 * (c - kw) / 2 for each kw of c's parity, so one load serves up to k / 2
 * multiply-adds (each accumulator still takes its taps in kw order).  With
 * a load per multiply-add, as in row_tile, loads bound the loop. */
static inline __attribute__((always_inline)) void row_tile_reuse(const struct stem_shape *s, const float *xe,
                                                                 const v16 *taps, const v16 *bias, bool relu, long oh,
                                                                 long col, int pairs, int k, const struct lanes *l,
                                                                 float *y)
{
    const long cols = spread_cols(s);
    v16 acc[TILE_PAIRS];
    for (int q = 0; q < pairs; q++)
        acc[q] = *bias;
    for (int kh = 0; kh < k; kh++) {
        const v16 *row = (const v16 *)(xe + ((oh + kh) * cols + col) * STEM_LANES), *t = taps + kh * k;
#pragma GCC unroll 64
        for (int c = 0; c < 2 * pairs + k - 1; c++) {
            const v16 xv = row[c];
#pragma GCC unroll 8
            for (int kw = c & 1; kw < k; kw += 2)
                if (c - kw >= 0 && (c - kw) / 2 < pairs)
                    acc[(c - kw) / 2] += xv * t[kw];
        }
    }
    store_tile(s, acc, relu, oh, col, pairs, l, y);
}

/* Tiles of other sizes and kernels: row_tile with `pairs` constant. */
static inline __attribute__((always_inline)) void row_tile_any(const struct stem_shape *s, const float *xe,
                                                               const v16 *taps, const v16 *bias, bool relu, long oh,
                                                               long col, int pairs, const struct lanes *l, float *y)
{
    switch (pairs) {
    case 14: row_tile(s, xe, taps, bias, relu, oh, col, 14, l, y); break;
    case 7: row_tile(s, xe, taps, bias, relu, oh, col, 7, l, y); break;
    case 6: row_tile(s, xe, taps, bias, relu, oh, col, 6, l, y); break;
    case 5: row_tile(s, xe, taps, bias, relu, oh, col, 5, l, y); break;
    case 4: row_tile(s, xe, taps, bias, relu, oh, col, 4, l, y); break;
    case 3: row_tile(s, xe, taps, bias, relu, oh, col, 3, l, y); break;
    case 2: row_tile(s, xe, taps, bias, relu, oh, col, 2, l, y); break;
    default: row_tile(s, xe, taps, bias, relu, oh, col, 1, l, y); break;
    }
}

ST_MULTIVERSION void stem_forward(const struct stem_shape *s, const float *x, const float *w, const float *bias,
                                  bool relu, float *y, long images, float *scratch)
{
    v16 taps[STEM_MAX_KERNEL * STEM_MAX_KERNEL], b = {0};
    struct lanes l;
    lanes_of(s, &l);
    tap_vectors(s, w, taps);
    for (int i = 0; bias && i < STEM_LANES; i++)
        b[i] = i % 8 < s->c ? bias[i % 8] : 0.0f;
    const long pairs = pairs_of(s);
    for (long i = 0; i < images; i++) {
        spread(s, x + i * s->h * s->w, scratch);
        float *yi = y + i * s->oh * s->ow * s->c;
        for (long oh = 0; oh < s->oh; oh++)
            for (long p = 0, n; p < pairs; p += n)
                switch ((n = pairs - p >= TILE_PAIRS ? TILE_PAIRS : pairs - p >= 7 ? 7 : pairs - p) * 8 + s->k) {
                case 14 * 8 + 5: row_tile_reuse(s, scratch, taps, &b, relu, oh, 2 * p, 14, 5, &l, yi); break;
                case 7 * 8 + 5: row_tile_reuse(s, scratch, taps, &b, relu, oh, 2 * p, 7, 5, &l, yi); break;
                case 14 * 8 + 3: row_tile_reuse(s, scratch, taps, &b, relu, oh, 2 * p, 14, 3, &l, yi); break;
                case 7 * 8 + 3: row_tile_reuse(s, scratch, taps, &b, relu, oh, 2 * p, 7, 3, &l, yi); break;
                default: row_tile_any(s, scratch, taps, &b, relu, oh, 2 * p, (int)n, &l, yi); break;
                }
    }
}

/* Every output-gradient pair of one image in the kernels' lanes, once for
 * all kernel rows: a last pixel's partner zero, masked by the ReLU's
 * output where y. */
static inline __attribute__((always_inline)) void gradient_pairs(const struct stem_shape *s, const float *dy,
                                                                 const float *y, const struct lanes *l, v16 *out)
{
    const long pairs = pairs_of(s);
    for (long oh = 0; oh < s->oh; oh++)
        for (long q = 0; q < pairs; q++) {
            const long at = (oh * s->ow + 2 * q) * s->c, floats = pair_floats(s, 2 * q);
            v16 d = {0}, v = {0};
            if (floats == STEM_LANES) {
                d = LOADU(dy + at);
                if (y)
                    v = LOADU(y + at);
            } else {
                for (long i = 0; i < floats; i++) {
                    d[i] = dy[at + i];
                    v[i] = y ? y[at + i] : 0.0f;
                }
            }
            d = (v16)((v16i)ST_PERMUTE(d, l->from_nhwc) & l->keep);
            if (y)
                d = (v16)((v16i)d & (v16i)(ST_PERMUTE(v, l->from_nhwc) > (v16){0}));
            out[oh * pairs + q] = d;
        }
}

/* One kernel row kh of one image: acc[kw] += dy(pair) * x(pair shifted by
 * kw), the even pairs and the odd ones in accumulators of their own (twice
 * the multiply-adds in flight), added at the end. */
static inline __attribute__((always_inline)) void grad_row(const struct stem_shape *s, const float *xe, const v16 *dyp,
                                                           int kh, int k, v16 *sums)
{
    v16 even[STEM_MAX_KERNEL] = {{0}}, odd[STEM_MAX_KERNEL] = {{0}};
    const long pairs = pairs_of(s), cols = spread_cols(s);
    for (long oh = 0; oh < s->oh; oh++) {
        const v16 *row = (const v16 *)(xe + (oh + kh) * cols * STEM_LANES), *d = dyp + oh * pairs;
        long q = 0;
        for (; q + 1 < pairs; q += 2)
            for (int kw = 0; kw < k; kw++) {
                even[kw] += d[q] * row[2 * q + kw];
                odd[kw] += d[q + 1] * row[2 * q + 2 + kw];
            }
        for (; q < pairs; q++)
            for (int kw = 0; kw < k; kw++)
                even[kw] += d[q] * row[2 * q + kw];
    }
    for (int kw = 0; kw < k; kw++)
        sums[kh * k + kw] += even[kw] + odd[kw];
}

ST_MULTIVERSION void stem_backward_weights(const struct stem_shape *s, const float *x, const float *dy, const float *y,
                                           long images, float *partial, float *scratch)
{
    v16 sums[STEM_MAX_KERNEL * STEM_MAX_KERNEL + 1] = {{0}};
    v16 *bias_sum = &sums[s->k * s->k], *dyp = (v16 *)(scratch + spread_floats(s));
    const long per_image = s->oh * s->ow * s->c, npairs = s->oh * pairs_of(s);
    struct lanes l;
    lanes_of(s, &l);
    for (long i = 0; i < images; i++) {
        spread(s, x + i * s->h * s->w, scratch);
        gradient_pairs(s, dy + i * per_image, y ? y + i * per_image : NULL, &l, dyp);
        for (long p = 0; p < npairs; p++)
            *bias_sum += dyp[p];
        for (int kh = 0; kh < s->k; kh++)
            switch (s->k) {
            case 7: grad_row(s, scratch, dyp, kh, 7, sums); break;
            case 5: grad_row(s, scratch, dyp, kh, 5, sums); break;
            case 3: grad_row(s, scratch, dyp, kh, 3, sums); break;
            default: grad_row(s, scratch, dyp, kh, s->k, sums); break;
            }
    }
    memcpy(partial, sums, stem_partial_floats(s) * sizeof(float));
}

void stem_reduce(const struct stem_shape *s, const float *partials, int threads, float *dw, float *db)
{
    const int kk = s->k * s->k;
    const size_t stride = stem_partial_floats(s);
    for (int c = 0; c < s->c; c++)
        for (int t = 0; t < kk + (db != NULL); t++) {
            float sum = 0;
            for (int th = 0; th < threads; th++) {
                const float *v = partials + th * stride + t * STEM_LANES;
                sum += v[c] + v[8 + c];
            }
            if (t < kk)
                dw[c * kk + t] = sum;
            else
                db[c] = sum;
        }
}
