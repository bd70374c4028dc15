/* Every oneDNN kernel that can run one layer, timed: what the engine's
 * kernel and layout choices rest on (src/nn/onednn/onednn_weights.c and onednn_context.c: dn_conv_avoid,
 * plain_weights).  For each pass (forward, backward-data, backward-weights)
 * it walks oneDNN's candidate list in order (the first is what oneDNN would
 * pick), skips the reference kernels, and prints the median of 15 runs and
 * the GFLOPS that makes.
 *
 *   st-kernel-candidates [--cold] conv BATCH IN_C OUT_C SIZE KERNEL PAD [nhwc]
 *   st-kernel-candidates [--cold] linear BATCH IN OUT
 *
 * e.g. lenet's first layer in 16-image chunks: conv 16 1 6 28 5 2 nhwc;
 * mlp's first layer: linear 64 784 256.  A linear layer is tried with its
 * weights out x in (the parameter buffer's layout), in x out, and in
 * oneDNN's own blocked layout, as an inner product and as a matmul.
 * --cold streams 8 MB between runs, so that operands come from L3 as they
 * do inside a training step.  Threads as OMP_NUM_THREADS says. */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <dnnl_debug.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RUNS = 15, COLD_FLOATS = 2 << 20 };

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static float *cold;  /* streamed between runs with --cold, else NULL */

#define CHECK(call)                                                                              \
    do {                                                                                         \
        dnnl_status_t s_ = (call);                                                               \
        if (s_ != dnnl_success) {                                                                \
            fprintf(stderr, "st-kernel-candidates: %s failed: %s\n", #call, dnnl_status2str(s_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A memory in the layout the candidate wants, filled with small values. */
static dnnl_memory_t filled(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(pd, what, 0);
    dnnl_memory_t m;
    void *p;
    CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_get_data_handle(m, &p));
    float *f = p;
    for (size_t i = 0; i < dnnl_memory_desc_get_size(md) / sizeof(float); i++)
        f[i] = (float)(i * 7919 % 1000) / 1000.0f - 0.5f;
    return m;
}

enum pass { FWD, BWD_DATA, BWD_WEIGHTS };

/* What one candidate is: the pass, a label for the layouts, its FLOPs,
 * and whether it is a matmul (whose arguments are always src, weights, dst). */
struct trial {
    enum pass pass;
    const char *label;
    double flops;
    bool matmul;
};

static void time_candidate(const_dnnl_primitive_desc_t pd, const struct trial *t, const char *impl)
{
    static const char *names[] = {"forward", "backward-data", "backward-weights"};
    static const int keys[3][3] = {
        {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
        {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
        {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
    };
    static const dnnl_query_t mds[3][3] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
        {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
        {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md},
    };
    const enum pass as = t->matmul ? FWD : t->pass;
    dnnl_exec_arg_t args[3];
    for (int i = 0; i < 3; i++)
        args[i] = (dnnl_exec_arg_t){keys[as][i], filled(pd, mds[as][i])};
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    double ts[RUNS];
    for (int r = -2; r < RUNS; r++) {
        for (size_t i = 0; cold && i < COLD_FLOATS; i += 16)
            cold[i] += 1.0f;
        double t0 = now_s();
        CHECK(dnnl_primitive_execute(p, strm, 3, args));
        CHECK(dnnl_stream_wait(strm));
        if (r >= 0)
            ts[r] = now_s() - t0;
    }
    qsort(ts, RUNS, sizeof *ts, by_double);
    const double med = ts[RUNS / 2];
    printf("%-17s %-16s %-26s %8.3f ms %7.1f GFLOPS\n", names[t->pass], t->label, impl, med * 1e3,
           t->flops / med * 1e-9);
    CHECK(dnnl_primitive_destroy(p));
    for (int i = 0; i < 3; i++)
        CHECK(dnnl_memory_destroy(args[i].memory));
}

/* Times each of oneDNN's candidates for the pass in its order, moving pd
 * along them (3.x's way: the pd itself steps to the next), then frees it. */
static void walk(dnnl_status_t created, dnnl_primitive_desc_t *made, const struct trial *t)
{
    dnnl_primitive_desc_t pd = *made;  /* read after the call that made it: argument order is unspecified */
    if (created != dnnl_success) {
        printf("%-17s %-16s (no kernel for these layouts)\n", "", t->label);
        return;
    }
    do {
        const char *impl = NULL;
        CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
        if (strncmp(impl, "ref", 3))
            time_candidate(pd, t, impl);  /* its primitive keeps this candidate */
    } while (dnnl_primitive_desc_next_impl(pd) == dnnl_success);
    CHECK(dnnl_primitive_desc_destroy(pd));
}

static int size_arg(const char *arg, const char *what, int min)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (!*arg || *end || v < min || v > 65536) {
        fprintf(stderr, "st-kernel-candidates: %s '%s' is not a size (%d..65536)\n", what, arg, min);
        exit(2);
    }
    return (int)v;
}

static dnnl_memory_desc_t md_of(int ndims, const dnnl_dims_t dims, dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    CHECK(dnnl_memory_desc_create_with_tag(&md, ndims, dims, dnnl_f32, tag));
    return md;
}

static dnnl_memory_desc_t md2(dnnl_dim_t rows, dnnl_dim_t cols, dnnl_format_tag_t tag)
{
    return md_of(2, (dnnl_dims_t){rows, cols}, tag);
}

static void conv(int nargs, char **argv)
{
    const int mb = size_arg(argv[0], "BATCH", 1), ic = size_arg(argv[1], "IN_C", 1),
              oc = size_arg(argv[2], "OUT_C", 1), size = size_arg(argv[3], "SIZE", 1),
              k = size_arg(argv[4], "KERNEL", 1), pad = size_arg(argv[5], "PAD", 0), out = size + 2 * pad - k + 1;
    if (out < 1) {
        fprintf(stderr, "st-kernel-candidates: the kernel does not fit the padded input\n");
        exit(2);
    }
    const bool nhwc = nargs == 7;
    const dnnl_format_tag_t act = nhwc ? dnnl_nhwc : dnnl_format_tag_any;
    dnnl_dims_t sd = {mb, ic, size, size}, wd = {oc, ic, k, k}, dd = {mb, oc, out, out}, strides = {1, 1},
                pads = {pad, pad}, dil = {0, 0};
    dnnl_memory_desc_t src = md_of(4, sd, act), wei = md_of(4, wd, dnnl_format_tag_any), dst = md_of(4, dd, act);
    dnnl_primitive_desc_t hint, pd;
    CHECK(dnnl_convolution_forward_primitive_desc_create(&hint, eng, dnnl_forward_training, dnnl_convolution_direct,
                                                         src, wei, NULL, dst, strides, dil, pads, pads, NULL));
    printf("# conv %dx%dx%dx%d -> %d channels, %dx%d kernel, pad %d, in oneDNN's order\n", mb, ic, size, size, oc,
           k, k, pad);
    const double flops = 2.0 * mb * oc * out * out * ic * k * k;
    const char *label = nhwc ? "nhwc" : "any";
    walk(dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_training, dnnl_convolution_direct, src,
                                                        wei, NULL, dst, strides, dil, pads, pads, NULL),
         &pd, &(struct trial){FWD, label, flops, false});
    walk(dnnl_convolution_backward_data_primitive_desc_create(&pd, eng, dnnl_convolution_direct, src, wei, dst,
                                                              strides, dil, pads, pads, hint, NULL),
         &pd, &(struct trial){BWD_DATA, label, flops, false});
    walk(dnnl_convolution_backward_weights_primitive_desc_create(&pd, eng, dnnl_convolution_direct, src, wei, NULL,
                                                                 dst, strides, dil, pads, pads, hint, NULL),
         &pd, &(struct trial){BWD_WEIGHTS, label, flops, false});
    CHECK(dnnl_primitive_desc_destroy(hint));
    CHECK(dnnl_memory_desc_destroy(src));
    CHECK(dnnl_memory_desc_destroy(wei));
    CHECK(dnnl_memory_desc_destroy(dst));
}

/* An inner product with its weights (OUT x IN) in `tag`. */
static void linear_ip(int mb, int in, int out, dnnl_format_tag_t tag, const char *label)
{
    dnnl_memory_desc_t src = md2(mb, in, dnnl_ab), wei = md2(out, in, tag), dst = md2(mb, out, dnnl_ab);
    dnnl_primitive_desc_t hint, pd;
    CHECK(dnnl_inner_product_forward_primitive_desc_create(&hint, eng, dnnl_forward_training, src, wei, NULL, dst,
                                                           NULL));
    const double flops = 2.0 * mb * in * out;
    walk(dnnl_inner_product_forward_primitive_desc_create(&pd, eng, dnnl_forward_training, src, wei, NULL, dst, NULL),
         &pd, &(struct trial){FWD, label, flops, false});
    walk(dnnl_inner_product_backward_data_primitive_desc_create(&pd, eng, src, wei, dst, hint, NULL), &pd,
         &(struct trial){BWD_DATA, label, flops, false});
    walk(dnnl_inner_product_backward_weights_primitive_desc_create(&pd, eng, src, wei, NULL, dst, hint, NULL), &pd,
         &(struct trial){BWD_WEIGHTS, label, flops, false});
    CHECK(dnnl_primitive_desc_destroy(hint));
    CHECK(dnnl_memory_desc_destroy(src));
    CHECK(dnnl_memory_desc_destroy(wei));
    CHECK(dnnl_memory_desc_destroy(dst));
}

/* One matmul c = a.b on the given layouts, every candidate timed. */
static void matmul(dnnl_memory_desc_t a, dnnl_memory_desc_t b, dnnl_memory_desc_t c, const struct trial *t)
{
    dnnl_primitive_desc_t pd;
    walk(dnnl_matmul_primitive_desc_create(&pd, eng, a, b, NULL, c, NULL), &pd, t);
    CHECK(dnnl_memory_desc_destroy(a));
    CHECK(dnnl_memory_desc_destroy(b));
    CHECK(dnnl_memory_desc_destroy(c));
}

/* The same three products as matmuls on the parameter buffer's OUT x IN
 * weights: X.W^T, dY.W and dY^T.X (a transposed operand is a "ba" view). */
static void linear_matmul(int mb, int in, int out)
{
    const double flops = 2.0 * mb * in * out;
    matmul(md2(mb, in, dnnl_ab), md2(in, out, dnnl_ba), md2(mb, out, dnnl_ab),
           &(struct trial){FWD, "matmul X.W^T", flops, true});
    matmul(md2(mb, out, dnnl_ab), md2(out, in, dnnl_ab), md2(mb, in, dnnl_ab),
           &(struct trial){BWD_DATA, "matmul dY.W", flops, true});
    matmul(md2(out, mb, dnnl_ba), md2(mb, in, dnnl_ab), md2(out, in, dnnl_ab),
           &(struct trial){BWD_WEIGHTS, "matmul dY^T.X", flops, true});
}

static void linear(char **argv)
{
    const int mb = size_arg(argv[0], "BATCH", 1), in = size_arg(argv[1], "IN", 1), out = size_arg(argv[2], "OUT", 1);
    printf("# linear %d -> %d, batch %d, in oneDNN's order per layout\n", in, out, mb);
    linear_ip(mb, in, out, dnnl_ab, "W out x in");
    linear_ip(mb, in, out, dnnl_ba, "W in x out");
    linear_ip(mb, in, out, dnnl_format_tag_any, "W blocked");
    linear_matmul(mb, in, out);
}

int main(int argc, char **argv)
{
    int at = 1;
    if (at < argc && !strcmp(argv[at], "--cold")) {
        cold = calloc(COLD_FLOATS, sizeof(float));
        if (!cold) {
            fprintf(stderr, "st-kernel-candidates: out of memory\n");
            return 1;
        }
        at++;
    }
    const int rest = argc - at - 1;
    const bool is_conv = at < argc && !strcmp(argv[at], "conv") &&
                         (rest == 6 || (rest == 7 && !strcmp(argv[argc - 1], "nhwc")));
    const bool is_linear = at < argc && !strcmp(argv[at], "linear") && rest == 3;
    if (!is_conv && !is_linear) {
        fprintf(stderr, "usage: st-kernel-candidates [--cold] conv BATCH IN_C OUT_C SIZE KERNEL PAD [nhwc]\n"
                        "       st-kernel-candidates [--cold] linear BATCH IN OUT\n");
        return 2;
    }
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    if (is_conv)
        conv(rest, argv + at + 1);
    else
        linear(argv + at + 1);
    CHECK(dnnl_stream_destroy(strm));
    CHECK(dnnl_engine_destroy(eng));
    free(cold);
    return 0;
}
