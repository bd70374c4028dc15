/* Element types, shared by the engine (tensors) and the collectives
 * (payloads).  Implemented in src/common/dtype.c (libc only). */
#ifndef SHMTRAIN_DTYPE_H
#define SHMTRAIN_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* fp32 (the default, and every master weight and gradient), bf16 (mixed
 * precision's compute and activations, a halved gradient exchange), i32
 * (token ids at a model's input); fp16, i64 and fp64 (the collectives'
 * payloads for PyTorch's float16, int64 and float64 tensors). */
typedef enum st_dtype {
    ST_DTYPE_F32 = 0,
    ST_DTYPE_BF16 = 1,
    ST_DTYPE_I32 = 2,
    ST_DTYPE_F16 = 3,
    ST_DTYPE_I64 = 4,
    ST_DTYPE_F64 = 5
} st_dtype;
/* The one spelling users type and read: "fp32", "bf16" ("i32", "fp16", "i64", "fp64", "?"). */
const char *st_dtype_name(st_dtype t);
/* A floating type as a user types it ("fp32", "bf16" or "fp16"); false for anything else. */
bool st_dtype_parse(const char *name, st_dtype *out);
size_t st_dtype_size(st_dtype t);        /* bytes per element */

/* The rounding types: fp32 values may be carried as bf16 or fp16 (the
 * collectives' wire, the engine's low-precision copies). */
bool st_dtype_is_rounding(st_dtype t);

/* n elements of `from` at src as `to` at dst: a copy when the types are
 * the same, else fp32 to a rounding type (round to nearest even, shmtrain/
 * bf16.h's and fp16.h's definitions) or back (exact).  Every conversion
 * the collectives and the engine make goes through here or the element
 * functions of bf16.h and fp16.h.  Returns false for any other pair. */
bool st_dtype_convert_n(void *dst, st_dtype to, const void *src, st_dtype from, size_t n);

/* n fp32 values rounded to a rounding type `to`, value i at dst[index[i]]
 * (a kernel's layout); nothing for any other type. */
void st_dtype_scatter_n(uint16_t *dst, const uint32_t *index, st_dtype to, const float *src, size_t n);
/* x[i] = x[i] as a rounding type `t` carries it (rounded, widened back), in
 * place; fp32 is left as it is. */
void st_dtype_round_n(float *x, st_dtype t, size_t n);

#ifdef __cplusplus
}
#endif
#endif
