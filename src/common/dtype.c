#include "shmtrain/dtype.h"

#include <string.h>

#include "shmtrain/bf16.h"

const char *st_dtype_name(st_dtype t)
{
    static const char *const names[] = {[ST_DTYPE_F32] = "fp32", [ST_DTYPE_BF16] = "bf16", [ST_DTYPE_I32] = "i32"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

bool st_dtype_parse(const char *name, st_dtype *out)
{
    if (!strcmp(name, "fp32"))
        *out = ST_DTYPE_F32;
    else if (!strcmp(name, "bf16"))
        *out = ST_DTYPE_BF16;
    else
        return false;
    return true;
}

size_t st_dtype_size(st_dtype t) { return t == ST_DTYPE_BF16 ? 2 : 4; }

/* The array conversions: the integer operations of bf16.h without a
 * branch, so GCC vectorises them, built for several ISAs and picked at
 * load time.  A step's gradients (millions) cross them twice when they are
 * exchanged in bf16; element at a time that cost more than the exchange. */
#define ST_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))

ST_MULTIVERSION
void st_bf16_from_f32_n(st_bf16 *restrict out, const float *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &in[i], sizeof u);
        const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t quiet_nan = (u >> 16) | 0x40u;
        out[i] = (st_bf16)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    }
}

ST_MULTIVERSION
void st_bf16_to_f32_n(float *restrict out, const st_bf16 *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)in[i] << 16;
        memcpy(&out[i], &u, sizeof u);
    }
}
