// A verification aid for CPUs without native bf16 (preloaded by the
// test_*_any_isa ctest entries, never by shmtrain itself).
//
// oneDNN 2.6.3 offers no bf16 kernel below AVX-512 (primitive creation
// says "unimplemented"), so the engine's bf16 path cannot run there.  This
// library, in LD_PRELOAD, (1) answers oneDNN's internal "does this CPU
// support bf16?" with yes (the function is exported by Debian's libdnnl and
// called through the PLT, so the preloaded definition wins), and (2) wraps
// dnnl_primitive_desc_create so that a primitive touching bf16 gets
// oneDNN's reference implementation: the jit and gemm ones would be
// accepted too, then fail or fault on a CPU without the instructions.  The
// reference kernels compute what bf16 computes (operands rounded to bf16,
// products summed in fp32), slowly; with SHMTRAIN_BF16_ANY_ISA=1 the engine
// takes them.  What this cannot check is the native kernels themselves.
#include <dnnl.h>
#include <string.h>

namespace dnnl {
namespace impl {
namespace cpu {
namespace platform {
bool has_data_type_support(dnnl_data_type_t t);
bool has_data_type_support(dnnl_data_type_t t) { return t != dnnl_f16; }
}  // namespace platform
}  // namespace cpu
}  // namespace impl
}  // namespace dnnl

static bool touches_bf16(const_dnnl_primitive_desc_t pd)
{
    static const dnnl_query_t queries[] = {dnnl_query_src_md,      dnnl_query_weights_md,      dnnl_query_dst_md,
                                           dnnl_query_diff_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md};
    for (dnnl_query_t q : queries) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, q, 0);
        if (md && md->ndims > 0 && md->data_type == dnnl_bf16)
            return true;
    }
    return false;
}

extern "C" dnnl_status_t dnnl_primitive_desc_create(dnnl_primitive_desc_t *out, const_dnnl_op_desc_t op_desc,
                                                    const_dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                                                    const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_desc_iterator_t it;
    dnnl_status_t s = dnnl_primitive_desc_iterator_create(&it, op_desc, attr, engine, hint);
    if (s != dnnl_success)
        return s;
    *out = nullptr;
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        if (!pd)
            break;
        const char *impl = nullptr;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
            (!touches_bf16(pd) || (impl && !strncmp(impl, "ref", 3)))) {
            *out = pd;
            break;
        }
        dnnl_primitive_desc_destroy(pd);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    return *out ? dnnl_success : dnnl_unimplemented;
}
