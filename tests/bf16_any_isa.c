/* A verification aid for CPUs without native bf16 (preloaded by the
 * test_*_any_isa ctest entries, never by shmtrain itself).
 *
 * oneDNN creates no bf16 primitive on a CPU without AVX-512 (it answers
 * "unimplemented"), so the engine's bf16 path cannot run there.  In
 * LD_PRELOAD, this library answers oneDNN's internal "does this CPU support
 * bf16 (for training)?" with yes: the two functions are exported by the
 * distributions' and PyPI's libdnnl and called through the PLT, so the
 * preloaded definitions win.  The engine then, under SHMTRAIN_BF16_ANY_ISA,
 * takes oneDNN's reference implementation for every primitive that touches
 * bf16 (dn_pd_keep): the jit ones would be offered too, then fault on a CPU
 * without the instructions.  The reference kernels compute what bf16
 * computes (operands rounded to bf16, products summed in fp32), slowly.
 * What this cannot check is the native kernels themselves.
 *
 * C, not C++: the two are named by their C++ symbols, so the project needs
 * no C++ compiler (a minimal Debian has none). */
#include <dnnl.h>
#include <stdbool.h>

bool st_any_isa_has_data_type_support(dnnl_data_type_t t)
    __asm__("_ZN4dnnl4impl3cpu8platform21has_data_type_supportE16dnnl_data_type_t");
bool st_any_isa_has_training_support(dnnl_data_type_t t)
    __asm__("_ZN4dnnl4impl3cpu8platform20has_training_supportE16dnnl_data_type_t");

bool st_any_isa_has_data_type_support(dnnl_data_type_t t)
{
    return t != dnnl_f16;
}

bool st_any_isa_has_training_support(dnnl_data_type_t t)
{
    return t != dnnl_f16;
}
