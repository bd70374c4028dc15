/* The weight copies' layouts (copy_layouts.h, st_copy_layout in optim.h).
 *
 * AMX's two pair layouts were a oneDNN reorder from a plain bf16 copy
 * before each forward pass: gpt2's 50 a step took 41 ms of a 874 ms bf16
 * step on a 2-vCPU AMX Xeon (12-17 GB/s, where a copy moves 25; oneDNN's
 * verbose log), besides the plain copy's own writes.  An element-by-element
 * scatter into them from the optimizer made it twice as slow
 * (docs/benchmarks.md 0o: 4 bytes of a 64-byte line at a time).  Here a
 * group of 64 rows (a block's height in ALONG_ROWS, two in DOWN_COLUMNS)
 * is rounded into a small buffer, in slabs of columns, and leaves it as
 * whole lines: in ALONG_ROWS each 64-byte line holds one column pair of 16
 * rows (16 x 16 transpositions of 32-bit words), in DOWN_COLUMNS one row
 * pair's 32 columns side by side.  A range that cuts a group writes its
 * rows element by element, the same words.  SGD over 85M parameters
 * keeping such a copy (2 threads, a 2-vCPU AMX Xeon) took 55 ms with
 * 16-row groups, 51-53 with 64-row ones, 46-47 with the lines streamed
 * past the caches (store_lines), as long as with a plain copy (45-48;
 * none: 34): the reorders they replace cost a read and a write more.
 * Streaming a plain copy's lines gained nothing (46.6-47.1): its stores
 * run in order, which the caches already take whole. */
#include "copy_layouts.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "shmtrain/bf16.h"
#include "simd.h"

enum { GROUP_ROWS = 64, SLAB = 256 /* columns rounded at a time: 32 KB of bf16 */ };

static long blocks_of(long n, long block) { return (n + block - 1) / block; }

/* ------------------------------------------------------------ places -- */

static size_t place_along_rows(const st_weight_copy *c, long r, long col)
{
    return (size_t)(((r / 64) * blocks_of(c->cols, 32) + col / 32) * 2048 + (col % 32) / 2 * 128 + (r % 64) * 2 +
                    col % 2);
}

static size_t place_down_columns(const st_weight_copy *c, long r, long col)
{
    return (size_t)(((col / 64) * blocks_of(c->rows, 32) + r / 32) * 2048 + (r % 32) / 2 * 128 + (col % 64) * 2 +
                    r % 2);
}

static size_t place_listed(const st_weight_copy *c, long r, long col)
{
    (void)r;
    return c->index ? c->index[col] : (size_t)col;
}

/* ------------------------------------------------------- whole groups -- */

typedef uint32_t words16 __attribute__((vector_size(64)));

/* Rows x and y = rows i and i | 1 << b: swap bit b of the row index with
 * bit b of the column index; four of these (b = 0..3) transpose 16 x 16. */
#define SWAP_BIT(r, b, ...)                                                                                            \
    for (int i = 0; i < 16; i++)                                                                                       \
        if (!(i >> (b) & 1)) {                                                                                         \
            const words16 x = r[i], y = r[i | 1 << (b)];                                                               \
            r[i] = __builtin_shufflevector(x, y, __VA_ARGS__);                                                         \
            r[i | 1 << (b)] = __builtin_shufflevector(x, y, SWAP_BIT_##b##_Y);                                         \
        }
#define SWAP_BIT_0_Y 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define SWAP_BIT_1_Y 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define SWAP_BIT_2_Y 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define SWAP_BIT_3_Y 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31

/* ------------------------------------------------------ line stores -- */

/* n 64-byte lines from src to dst + k * stride bytes (64-byte aligned):
 * where the CPU has AVX-512, past the caches (a copy is next read by the
 * next forward pass, after the rest of the update has moved through them:
 * a cached store would first read each line in for nothing, 2 bytes a
 * parameter); else plain copies. */
__attribute__((target("avx512f"))) static void lines_streamed(char *dst, size_t stride, const char *src, int n)
{
    for (int k = 0; k < n; k++)
        _mm512_stream_si512((void *)(dst + (size_t)k * stride), _mm512_loadu_si512(src + 64 * k));
}

static void lines_cached(char *dst, size_t stride, const char *src, int n)
{
    for (int k = 0; k < n; k++)
        memcpy(dst + (size_t)k * stride, src + 64 * k, 64);
}

static void store_lines(void *dst, size_t stride, const void *src, int n)
{
    static int streamed = -1;  /* a benign race: every thread finds the same */
    if (streamed < 0)
        streamed = __builtin_cpu_supports("avx512f");
    (streamed && (uintptr_t)dst % 64 == 0 ? lines_streamed : lines_cached)(dst, stride, src, n);
}

/* Streamed stores are ordered by nothing else: before the caller's threads
 * meet and the copies are read. */
static void stores_done(void) { _mm_sfence(); }

/* Columns c0.. (a slab, or what is left) of the group's GROUP_ROWS rows
 * rounded into buf (GROUP_ROWS rows of SLAB words); the slab's width. */
static long round_slab(st_bf16 *buf, const float *group, long cols, long c0)
{
    const long w = cols - c0 < SLAB ? cols - c0 : SLAB;
    for (int i = 0; i < GROUP_ROWS; i++)
        st_bf16_from_f32_n(buf + i * SLAB, group + i * cols + c0, (size_t)w);
    return w;
}

ST_MULTIVERSION static void along_rows_group(const st_weight_copy *c, const float *group, long r0)
{
    st_bf16 buf[GROUP_ROWS * SLAB];
    for (long c0 = 0; c0 < c->cols; c0 += SLAB) {
        const long w = round_slab(buf, group, c->cols, c0), whole = w / 32 * 32;
        for (long cb = 0; cb < whole; cb += 32)
            for (int q = 0; q < GROUP_ROWS; q += 16) {  /* rows q..q + 15: a quarter of each line of the block */
                words16 r[16];
                for (int i = 0; i < 16; i++)
                    memcpy(&r[i], buf + (q + i) * SLAB + cb, sizeof r[i]);
                SWAP_BIT(r, 0, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
                SWAP_BIT(r, 1, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
                SWAP_BIT(r, 2, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
                SWAP_BIT(r, 3, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
                store_lines(c->dst + place_along_rows(c, r0 + q, c0 + cb), 256, r, 16);
            }
        for (int i = 0; i < GROUP_ROWS; i++)  /* a last block of fewer than 32 columns */
            for (long col = whole; col < w; col++)
                c->dst[place_along_rows(c, r0 + i, c0 + col)] = buf[i * SLAB + col];
    }
}

ST_MULTIVERSION static void down_columns_group(const st_weight_copy *c, const float *group, long r0)
{
    st_bf16 buf[GROUP_ROWS * SLAB];
    for (long c0 = 0; c0 < c->cols; c0 += SLAB) {
        const long w = round_slab(buf, group, c->cols, c0), whole = w / 64 * 64;
        for (long cb = 0; cb < whole; cb += 64)
            for (int i = 0; i < GROUP_ROWS; i += 2) {
                const st_bf16 *restrict even = buf + i * SLAB + cb, *restrict odd = even + SLAB;
                uint32_t pairs[64];
                for (int col = 0; col < 64; col++)
                    pairs[col] = even[col] | (uint32_t)odd[col] << 16;
                store_lines(c->dst + place_down_columns(c, r0 + i, c0 + cb), 64, pairs, 4);
            }
        for (int i = 0; i < GROUP_ROWS; i++)  /* a last block of fewer than 64 columns */
            for (long col = whole; col < w; col++)
                c->dst[place_down_columns(c, r0 + i, c0 + col)] = buf[i * SLAB + col];
    }
}

/* ------------------------------------------------------------ ranges -- */

static void write_elements(const st_weight_copy *c, const float *master, size_t from, size_t to,
                           size_t (*place)(const st_weight_copy *, long, long))
{
    for (size_t i = from; i < to; i++)
        c->dst[place(c, (long)i / c->cols, (long)i % c->cols)] = st_bf16_from_f32(master[i]);
}

static void write_pairs(const st_weight_copy *c, const float *master, size_t from, size_t to,
                        size_t (*place)(const st_weight_copy *, long, long),
                        void (*group)(const st_weight_copy *, const float *, long))
{
    const size_t per_group = GROUP_ROWS * (size_t)c->cols;
    const size_t g0 = (from + per_group - 1) / per_group, g1 = to / per_group;  /* the whole groups inside */
    if (g0 >= g1) {
        write_elements(c, master, from, to, place);
        return;
    }
    write_elements(c, master, from, g0 * per_group, place);
    for (size_t g = g0; g < g1; g++)
        group(c, master + g * per_group, (long)g * GROUP_ROWS);
    stores_done();
    write_elements(c, master, g1 * per_group, to, place);
}

static void write_listed(const st_weight_copy *c, const float *master, size_t from, size_t to)
{
    if (c->index)
        st_dtype_scatter_n(c->dst, c->index + from, c->type, master + from, to - from);
    else
        st_dtype_convert_n(c->dst + from, c->type, master + from, ST_DTYPE_F32, to - from);
}

static void write_along_rows(const st_weight_copy *c, const float *master, size_t from, size_t to)
{
    write_pairs(c, master, from, to, place_along_rows, along_rows_group);
}

static void write_down_columns(const st_weight_copy *c, const float *master, size_t from, size_t to)
{
    write_pairs(c, master, from, to, place_down_columns, down_columns_group);
}

/* ------------------------------------------------------------- table -- */

static const struct {
    void (*write)(const st_weight_copy *, const float *, size_t, size_t);
    size_t (*place)(const st_weight_copy *, long, long);
    bool grouped;
} layouts[] = {
    [ST_COPY_LISTED] = {write_listed, place_listed, false},
    [ST_COPY_PAIRS_ALONG_ROWS] = {write_along_rows, place_along_rows, true},
    [ST_COPY_PAIRS_DOWN_COLUMNS] = {write_down_columns, place_down_columns, true},
};

void nn_copy_write(const st_weight_copy *c, const float *master, size_t from, size_t to)
{
    if (from < to)
        layouts[c->layout].write(c, master, from, to);
}

size_t nn_copy_unit(const st_weight_copy *c)
{
    return layouts[c->layout].grouped ? GROUP_ROWS * (size_t)c->cols : 1;
}

size_t st_weight_copy_place(const st_weight_copy *c, size_t i)
{
    if (!layouts[c->layout].grouped)
        return place_listed(c, 0, (long)i);
    return layouts[c->layout].place(c, (long)i / c->cols, (long)i % c->cols);
}
