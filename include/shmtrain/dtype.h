/* Element types, shared by the engine (tensors) and the collectives
 * (payloads).  Implemented in src/common/dtype.c (libc only). */
#ifndef SHMTRAIN_DTYPE_H
#define SHMTRAIN_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* f32 everywhere today; bf16 (mixed precision, a halved gradient exchange)
 * and i32 (token ids at a model's input) are the next. */
typedef enum st_dtype { ST_DTYPE_F32 = 0, ST_DTYPE_BF16 = 1, ST_DTYPE_I32 = 2 } st_dtype;
const char *st_dtype_name(st_dtype t);   /* "f32", "bf16", "i32", or "?" */
size_t st_dtype_size(st_dtype t);        /* bytes per element */

#ifdef __cplusplus
}
#endif
#endif
