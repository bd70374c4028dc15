/* Every oneDNN kernel that can run one convolution, timed: what the engine's
 * kernel choices rest on (src/nn/onednn.c, conv_fwd_avoid).  For each pass
 * (forward, backward-data, backward-weights) it walks oneDNN's candidate
 * list in order (the first is what oneDNN would pick) and prints the median
 * of 15 runs of each, skipping the reference kernels.
 *
 *   st-conv-candidates BATCH IN_C OUT_C SIZE KERNEL PAD [nhwc]
 *
 * e.g. lenet's first layer in 16-image chunks: 16 1 6 28 5 2 nhwc.  Threads
 * as OMP_NUM_THREADS says. */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <dnnl_debug.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static dnnl_engine_t eng;
static dnnl_stream_t strm;

#define CHECK(call)                                                                            \
    do {                                                                                       \
        dnnl_status_t s_ = (call);                                                             \
        if (s_ != dnnl_success) {                                                              \
            fprintf(stderr, "st-conv-candidates: %s failed: %s\n", #call, dnnl_status2str(s_)); \
            exit(1);                                                                           \
        }                                                                                      \
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
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
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

static void time_candidate(const_dnnl_primitive_desc_t pd, enum pass pass, const char *impl)
{
    static const char *names[] = {"forward", "backward-data", "backward-weights"};
    dnnl_exec_arg_t args[3];
    if (pass == FWD) {
        args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, filled(pd, dnnl_query_src_md)};
        args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, filled(pd, dnnl_query_weights_md)};
        args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, filled(pd, dnnl_query_dst_md)};
    } else if (pass == BWD_DATA) {
        args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, filled(pd, dnnl_query_diff_dst_md)};
        args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, filled(pd, dnnl_query_weights_md)};
        args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, filled(pd, dnnl_query_diff_src_md)};
    } else {
        args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, filled(pd, dnnl_query_src_md)};
        args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, filled(pd, dnnl_query_diff_dst_md)};
        args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, filled(pd, dnnl_query_diff_weights_md)};
    }
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    double t[15];
    for (int r = 0; r < 15; r++) {
        double t0 = now_s();
        CHECK(dnnl_primitive_execute(p, strm, 3, args));
        CHECK(dnnl_stream_wait(strm));
        t[r] = now_s() - t0;
    }
    qsort(t, 15, sizeof *t, by_double);
    printf("%-17s %-24s %8.3f ms\n", names[pass], impl, t[7] * 1e3);
    CHECK(dnnl_primitive_destroy(p));
    for (int i = 0; i < 3; i++)
        CHECK(dnnl_memory_destroy(args[i].memory));
}

static void walk(const void *op_desc, const_dnnl_primitive_desc_t hint, enum pass pass)
{
    dnnl_primitive_desc_iterator_t it;
    CHECK(dnnl_primitive_desc_iterator_create(&it, op_desc, NULL, eng, hint));
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl = NULL;
        if (!pd)
            break;
        CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
        if (strncmp(impl, "ref", 3))
            time_candidate(pd, pass, impl);
        CHECK(dnnl_primitive_desc_destroy(pd));
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    CHECK(dnnl_primitive_desc_iterator_destroy(it));
}

static int positive(const char *arg, const char *what)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*end || v < 0 || v > 4096) {
        fprintf(stderr, "st-conv-candidates: %s '%s' is not a size\n", what, arg);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc < 7 || argc > 8 || (argc == 8 && strcmp(argv[7], "nhwc"))) {
        fprintf(stderr, "usage: st-conv-candidates BATCH IN_C OUT_C SIZE KERNEL PAD [nhwc]\n");
        return 2;
    }
    const int mb = positive(argv[1], "BATCH"), ic = positive(argv[2], "IN_C"), oc = positive(argv[3], "OUT_C"),
              size = positive(argv[4], "SIZE"), k = positive(argv[5], "KERNEL"), pad = positive(argv[6], "PAD");
    const int out = size + 2 * pad - k + 1;
    if (!mb || !ic || !oc || !k || out < 1) {
        fprintf(stderr, "st-conv-candidates: the kernel does not fit the padded input\n");
        return 2;
    }
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const dnnl_format_tag_t act = argc == 8 ? dnnl_nhwc : dnnl_format_tag_any;
    dnnl_dims_t sd = {mb, ic, size, size}, wd = {oc, ic, k, k}, dd = {mb, oc, out, out}, strides = {1, 1},
                pads = {pad, pad};
    dnnl_memory_desc_t src, wei, dst;
    CHECK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, act));
    CHECK(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, act));
    dnnl_convolution_desc_t fd, bd, wdsc;
    CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src, &wei, NULL,
                                             &dst, strides, pads, pads));
    CHECK(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src, &wei, &dst, strides, pads,
                                                   pads));
    CHECK(dnnl_convolution_backward_weights_desc_init(&wdsc, dnnl_convolution_direct, &src, &wei, NULL, &dst,
                                                      strides, pads, pads));
    dnnl_primitive_desc_t hint;
    CHECK(dnnl_primitive_desc_create(&hint, &fd, NULL, eng, NULL));
    printf("# conv %dx%dx%dx%d -> %d channels, %dx%d kernel, pad %d, %s, in oneDNN's order\n", mb, ic, size, size, oc,
           k, k, pad, argc == 8 ? "nhwc" : "layouts any");
    walk(&fd, NULL, FWD);
    walk(&bd, hint, BWD_DATA);
    walk(&wdsc, hint, BWD_WEIGHTS);
    CHECK(dnnl_primitive_desc_destroy(hint));
    CHECK(dnnl_stream_destroy(strm));
    CHECK(dnnl_engine_destroy(eng));
    return 0;
}
