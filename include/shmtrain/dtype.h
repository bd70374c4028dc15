/* Element types, shared by the engine (tensors) and the collectives
 * (payloads).  Implemented in src/common/dtype.c (libc only). */
#ifndef SHMTRAIN_DTYPE_H
#define SHMTRAIN_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

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
/* A precision as a user types it ("fp32" or "bf16"); false for anything else. */
bool st_dtype_parse(const char *name, st_dtype *out);
size_t st_dtype_size(st_dtype t);        /* bytes per element */

#ifdef __cplusplus
}
#endif
#endif
