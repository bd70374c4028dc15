/* The heads both attention tests run (test_attention_bf16.c,
 * test_attention_fp32.c): T and head sizes that cut every tile and stripe
 * (the dot products' tiles are 8 rows by 32 columns, pairs of k, their
 * stripes 32 rows), one head and several; and the matmul kernel's stripes
 * of 32, 7 and 100 rows, the last past the transposed softmax's blocks of
 * 64 queries. */
#ifndef SHMTRAIN_TESTS_ATTENTION_SHAPES_H
#define SHMTRAIN_TESTS_ATTENTION_SHAPES_H

struct shape {
    int t, hs, heads;
};

static const struct shape SHAPES[] = {{1, 1, 1},  {7, 3, 1},   {9, 5, 2},   {33, 17, 1}, {40, 64, 2},
                                      {70, 7, 3}, {64, 64, 1}, {97, 16, 1}, {130, 9, 2}};
static const long STRIPES[] = {32, 7, 100};

#define NSHAPES (sizeof SHAPES / sizeof *SHAPES)
#define NSTRIPES (sizeof STRIPES / sizeof *STRIPES)

#endif
