/* What oneDNN runs on this CPU: its version, library and ISA (for reports,
 * so results compare across machines), which types it computes natively,
 * and the AMX rules the builders share.  Below every builder: it asks
 * oneDNN, never the net's graph. */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "onednn_internal.h"

/* oneDNN 3's ISA values are bit sets, each containing the ones below it:
 * AVX512-BF16, AMX, AVX10 and whatever follows all contain the bf16 bits. */
bool st_nn_native(st_dtype type, const st_nn_tuning *t)
{
    if (type == ST_DTYPE_F32)
        return true;
    if (type != ST_DTYPE_BF16)  /* fp16's kernels (AVX512-FP16, AMX-FP16) are not wired */
        return false;
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return (isa & bf16) == bf16 || (t && t->bf16_any_isa);
}

bool st_nn_amx_supported(void)
{
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    return (isa & amx) == amx;
}

/* Where oneDNN has AMX, a bf16 inner product of at least this many rows a
 * step takes oneDNN's blocked weights: only its brgemm kernels run on the
 * tiles (on the plain layout gemm:jit computes with AVX512-BF16, at less
 * than half the forward's rate), and from about here the tiles save more
 * than the blocked copy and reorders cost (docs/benchmarks.md, 0o, steps:
 * gpt-mini at 768 rows 1.28x, gpt and gpt2 at 1024 1.19x and 1.08x, mlp at
 * 1024 1.07x; mlp at 64 and 256 rows 0.77x and 0.81x).  The weight
 * gradient stays plain either way (blocked, then reordered into the flat
 * buffer, those steps ran 1.06-1.15x slower).  The weight gradient's
 * matmul (onednn_wgrad.c) and the head's blocked table (onednn_head.c) go
 * by the same rows (dn_amx_rows). */
#define AMX_ROWS 512

bool dn_amx_rows(const st_net *n, const struct xnode *x)
{
    return st_nn_amx_supported() && nn_rows(n, x->nd) >= AMX_ROWS;
}

void st_nn_onednn_version(char *buf, size_t len)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, len, "%d.%d.%d", v->major, v->minor, v->patch);
}

void st_nn_onednn_library(char *buf, size_t len)
{
    Dl_info info;
    snprintf(buf, len, "%s", dladdr((void *)dnnl_version, &info) && info.dli_fname ? info.dli_fname : "(unknown)");
}

const char *st_nn_onednn_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    default: return "newer than this build knows";
    }
}
