/* A bf16 linear layer's weight gradient dW = dY^T X as a oneDNN matmul, on
 * AMX's tiles, instead of the inner product's backward-weights pass.
 *
 * With plain weights oneDNN's inner product computes dW on `gemm:jit`, which
 * is AVX512-BF16's, at about half the rate its AMX forward reaches; its
 * blocked brgemm kernels write a blocked gradient that must be reordered
 * into the flat buffer every step (that cost more than it saved:
 * docs/benchmarks.md, 0o).  A matmul whose source is dY read transposed
 * (the layout `ba` over dY's own rows, as the head reads its logits'
 * gradient) writes dW plain, straight into the flat gradient buffer, on
 * `brg:avx512_core_amx`.  The bias gradient, which the inner product summed
 * on the way, is dY's column sums here (oneDNN 3.2's reduction over rows of
 * bf16 has only its reference kernel).
 *
 * Ownership: the primitives and memories belong to the net's registry; the
 * step only points the transposed view at dY's buffer of the moment (a
 * gradient buffer shared by liveness gets its address after the build). */
#define _GNU_SOURCE
#include "onednn_internal.h"

/* Below this many inputs or outputs the inner product's kernel, which sums
 * the bias gradient as it reads dY, stays ahead: gpt-mini's 128-wide
 * layers ran their step 0.97-0.99x as fast with the matmul, gpt's 384-wide
 * 1.00-1.14x, gpt2's 768-wide 1.05x (docs/benchmarks.md 0p). */
#define WGRAD_MIN_WIDTH 256

bool dn_wgrad_matmul_wanted(const st_net *n, const struct xnode *x)
{
    const long in = n->x[x->in].nd->c * n->x[x->in].nd->h * n->x[x->in].nd->w, out = x->nd->c;
    return x->kind == NODE_LINEAR && x->lowp && !dn_net(n)->opt.wgrad_ip && dn_amx_rows(n, x) &&
           in >= WGRAD_MIN_WIDTH && out >= WGRAD_MIN_WIDTH;
}

#define COLUMN_BLOCK 64L /* bias columns a thread sums at a time: two cache lines of a bf16 row */

/* sum[c] = sum over rows of m[r][c] in fp32, rows in order (the same bits
 * at any thread count: the threads split the columns). */
ST_MULTIVERSION static void column_sums(float *restrict sum, const st_bf16 *restrict m, long rows, long cols,
                                        long first, long last)
{
#pragma omp simd
    for (long c = first; c < last; c++)
        sum[c] = st_bf16_to_f32(m[c]);
    for (long r = 1; r < rows; r++) {
        const st_bf16 *restrict row = m + r * cols;
#pragma omp simd
        for (long c = first; c < last; c++)
            sum[c] += st_bf16_to_f32(row[c]);
    }
}

static st_status wgrad_step(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    const struct dn_wgrad_state *w = &dn_state(x)->wgrad;
    const st_bf16 *dy = dn_mem_ptr(w->dy);
    TRY(dnnl_memory_set_data_handle(w->dy_t, (void *)dy));
    const dnnl_exec_arg_t product[] = {{DNNL_ARG_SRC, w->dy_t}, {DNNL_ARG_WEIGHTS, w->x}, {DNNL_ARG_DST, w->dw}};
    TRY(dnnl_primitive_execute(w->product, dn_net(n)->strm, 3, product));
    if (!x->nd->bias)
        return ST_OK;
    float *db = n->grads + x->nd->b_off;
    const long rows = (long)nn_rows(n, x->nd), out = x->nd->c;
#pragma omp parallel for schedule(static)
    for (long c = 0; c < out; c += COLUMN_BLOCK)
        column_sums(db, dy, rows, out, c, out - c < COLUMN_BLOCK ? out : c + COLUMN_BLOCK);
    return ST_OK;
}

/* The product's primitive; *real false where oneDNN would run it on its
 * reference kernel (then the inner product stays). */
static st_status make_primitives(st_net *n, struct xnode *x, const struct weights_layer *wl,
                                 struct dn_wgrad_state *w, const_dnnl_memory_desc_t xs, bool *real)
{
    const long rows = (long)wl->src[0], in = (long)wl->src[1], out = (long)wl->dst[1];
    const_dnnl_memory_desc_t dy_t, dw;
    OK(dn_md2(n, &dy_t, out, rows, dnnl_bf16, dnnl_ba));
    OK(dn_md2(n, &dw, out, in, dnnl_f32, dnnl_ab));
    dnnl_primitive_desc_t pd;
    OK(DN_PD(n, pd, NULL, dnnl_matmul_primitive_desc_create(&pd, dn_net(n)->eng, dy_t, xs, NULL, dw, NULL)));
    *real = !dn_is_reference_impl(pd);
    if (!*real)
        return ST_OK;
    dn_impl_name(x, pd);
    OK(dn_prim_new(n, &w->product, pd));
    OK(dn_mem_unbacked(n, &w->dy_t, dy_t));
    return dn_mem_new(n, &w->dw, dw, n->grads + x->nd->w_off);
}

st_status dn_build_wgrad_matmul(st_net *n, int j, const struct weights_layer *wl, dnnl_memory_t *ddst, bool *built)
{
    struct xnode *x = &n->x[j];
    struct dn_wgrad_state *w = &dn_state(x)->wgrad;
    const_dnnl_memory_desc_t dy, xs;
    OK(dn_md2(n, &dy, (long)wl->dst[0], (long)wl->dst[1], dnnl_bf16, dnnl_ab));
    OK(dn_md2(n, &xs, (long)wl->src[0], (long)wl->src[1], dnnl_bf16, dnnl_ab));
    OK(make_primitives(n, x, wl, w, xs, built));
    if (!*built)
        return ST_OK;
    OK(dn_bwd_input(n, &dn_state(x)->bwd, dn_state(x)->src, xs, DN_TEMP_SRC, &w->x));
    OK(dn_bwd_input(n, &dn_state(x)->bwd, dn_state(x)->diff.mem, dy, DN_TEMP_DIFF_DST, &w->dy));
    *ddst = w->dy;
    return dn_add_step(n, &dn_state(x)->bwd, wgrad_step, x->kind);
}
