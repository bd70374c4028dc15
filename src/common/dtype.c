#include "shmtrain/dtype.h"

const char *st_dtype_name(st_dtype t)
{
    static const char *const names[] = {[ST_DTYPE_F32] = "f32", [ST_DTYPE_BF16] = "bf16", [ST_DTYPE_I32] = "i32"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

size_t st_dtype_size(st_dtype t) { return t == ST_DTYPE_BF16 ? 2 : 4; }
