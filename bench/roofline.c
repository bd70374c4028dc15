/* Each layer of a training step against the machine's own bounds: a
 * per-layer roofline (issue 66).
 *
 *   st-roofline MODEL [--batch B] [--threads N] [--precision fp32|bf16] [--top K] [--csv]
 *
 * Every layer's forward and backward (and the logits' and loss gradient's
 * reorders) is timed in the step's order (op_timing.h: each op's median of
 * 5 passes).  Beside each, what the machine allows it, measured in the
 * same run with the net's engine and thread count:
 *   matmul rate    a 1024^3 oneDNN matmul in the layer's compute type (fp32,
 *                  or bf16 with fp32 sums), GFLOP/s;
 *   copy bandwidth memcpy of 64 MiB between two buffers, bytes read and
 *                  written, GB/s (DRAM's: a layer whose data stays in cache
 *                  can beat it, and its share then exceeds 1).
 * A layer's FLOPs are its products' (model_flops.c: the layer table's
 * `flops` column, backward twice forward where the input takes a gradient);
 * its bytes are the sizes of the memories its ops read and write (each
 * once; scratchpads left out; a C step: its input and output edges).  Its
 * bound is the larger of FLOPs / rate and bytes / bandwidth; share = bound /
 * time, lost = time - bound.  A tied head whose loss is fused with it
 * (gpt presets) is one row, "head+loss": its three products' FLOPs, and
 * per chunk of rows the table read three times and its gradient read and
 * written, the chunk's logits written, read and written by the loss, read
 * by two products, the rows read twice and their gradient written.  The rates are measured before and after the
 * step's timing and the higher kept (a shared machine drifts; the bound is
 * then the stricter).  Markdown (the layers, the step's sums, the top K by
 * time lost), or --csv: one row per layer and pass. */
#define _GNU_SOURCE
#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "op_timing.h"
#include "shmtrain/dtype.h"
#include "step_rig.h"

enum { STEPS = 11, COPY_MIB = 64 };

struct row {
    const struct timed_list *l;
    char layer[64];
    int index;                 /* the model's node (as --summary numbers them); -1: logits, loss */
    const char *computes;
    double seconds, flops, bytes, rate, bound;
};

static void die(const char *what)
{
    fprintf(stderr, "st-roofline: %s\n", what);
    exit(1);
}

#define DN(call) \
    do { \
        if ((call) != dnnl_success) \
            die("oneDNN refused the rate probe's matmul: " #call); \
    } while (0)

/* Operands of small values, so that no rate is a denormal's or a NaN's. */
static void fill(dnnl_memory_t mem, dnnl_data_type_t dt)
{
    void *p;
    const_dnnl_memory_desc_t md;
    DN(dnnl_memory_get_data_handle(mem, &p));
    DN(dnnl_memory_get_memory_desc(mem, &md));
    const size_t bytes = dnnl_memory_desc_get_size(md);
    for (size_t i = 0; i < bytes / (dt == dnnl_bf16 ? 2 : 4); i++) {
        const float v = (float)((i * 7) % 13) / 13.0f - 0.5f;
        if (dt == dnnl_bf16)
            ((st_bf16 *)p)[i] = st_bf16_from_f32(v);
        else
            ((float *)p)[i] = v;
    }
}

/* A 1024^3 matmul of `dt` operands (fp32 sums) on the net's engine, GFLOP/s. */
static double matmul_rate(st_net *n, dnnl_data_type_t dt, double seconds)
{
    const dnnl_dim_t m = 1024;
    dnnl_engine_t eng = dn_net(n)->eng;
    dnnl_memory_desc_t a, b_any, c;
    DN(dnnl_memory_desc_create_with_tag(&a, 2, (dnnl_dims_t){m, m}, dt, dnnl_ab));
    DN(dnnl_memory_desc_create_with_tag(&b_any, 2, (dnnl_dims_t){m, m}, dt, dnnl_format_tag_any));
    DN(dnnl_memory_desc_create_with_tag(&c, 2, (dnnl_dims_t){m, m}, dnnl_f32, dnnl_ab));
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t ma, mb, mc;
    DN(dnnl_matmul_primitive_desc_create(&pd, eng, a, b_any, NULL, c, NULL));
    DN(dnnl_primitive_create(&prim, pd));
    DN(dnnl_memory_create(&ma, a, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mb, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mc, c, eng, DNNL_MEMORY_ALLOCATE));
    fill(ma, dt), fill(mb, dt);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    int reps = 0;
    double t = 0, best = 1e30;
    while (reps < 3 || t < seconds) {  /* the fastest run: the rate the core reaches */
        const double t0 = rig_now();
        DN(dnnl_primitive_execute(prim, dn_net(n)->strm, 3, args));
        DN(dnnl_stream_wait(dn_net(n)->strm));
        const double one = rig_now() - t0;
        best = one < best ? one : best;
        t += one, reps++;
    }
    dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(prim), dnnl_primitive_desc_destroy(pd);
    dnnl_memory_desc_destroy(a), dnnl_memory_desc_destroy(b_any), dnnl_memory_desc_destroy(c);
    return 2.0 * m * m * m / best / 1e9;
}

/* memcpy between two buffers beyond the caches, every thread its share:
 * bytes read and written, GB/s (the fastest round). */
static double copy_rate(int threads, double seconds)
{
    const size_t bytes = (size_t)COPY_MIB << 20;
    char *from = malloc(bytes), *to = malloc(bytes);
    if (!from || !to)
        die("out of memory");
    memset(from, 1, bytes), memset(to, 2, bytes);
    int reps = 0;
    double t = 0, best = 1e30;
    while (reps < 3 || t < seconds) {
        const double t0 = rig_now();
#pragma omp parallel num_threads(threads)
        {
            const size_t share = bytes / (size_t)omp_get_num_threads(), at = share * (size_t)omp_get_thread_num();
            memcpy(to + at, from + at, share);
        }
        const double one = rig_now() - t0;
        best = one < best ? one : best;
        t += one, reps++;
    }
    free(from), free(to);
    return 2.0 * (double)bytes / best / 1e9;
}

static double md_bytes(dnnl_memory_t mem)
{
    const_dnnl_memory_desc_t md;
    return mem && dnnl_memory_get_memory_desc(mem, &md) == dnnl_success ? (double)dnnl_memory_desc_get_size(md) : 0;
}

/* What a list's ops read and write, each memory once an op. */
static double list_bytes(st_net *n, const struct timed_list *l)
{
    double bytes = 0;
    for (int o = 0; o < l->ops->n; o++) {
        const struct op *op = &l->ops->v[o];
        if (op->step && l->node > 0) {  /* a C step: its edges (backward: dy and x in, dx out) */
            const struct xnode *x = &n->x[l->node];
            const double out = md_bytes(dn_state(x)->dst.mem);
            const double in = x->in >= 0 ? md_bytes(dn_state(&n->x[x->in])->dst.mem) : 0;
            /* the GELU keeps its tanh, fp32, for its backward: written, then read */
            const double kept = dn_state(x)->seq.tanh_u ? (double)nn_node_size(n, x->nd) * sizeof(float) : 0;
            bytes += (l->backward ? out + 2 * in : out + in) + kept;
        }
        for (int a = 0; a < op->nargs; a++)
            if (op->args[a].arg != DNNL_ARG_SCRATCHPAD)
                bytes += md_bytes(op->args[a].memory);
    }
    return bytes;
}

/* What the fused head and loss read and write (the file's comment). */
static double fused_bytes(st_net *n, const struct xnode *x)
{
    const struct dn_head_state *h = &dn_state(x)->head;
    const struct node *nd = x->nd;
    const double rows = (double)nn_rows(n, nd), chunks = ceil(rows / (double)h->chunk);
    const double width = n->model->nodes[nd->in].c, vocab = nd->vocab;
    const double elt = x->compute == ST_DTYPE_BF16 ? 2 : 4;
    const double table = vocab * width * elt, table_grad = vocab * width * 4;
    return chunks * (3 * table + 2 * table_grad) + rows * vocab * 4 * 5 + rows * width * elt * 3;
}

static void describe(const struct step_rig *r, const struct timed_list *l, struct row *w, int batch)
{
    st_net *n = r->net;
    w->l = l;
    w->index = -1;
    w->seconds = op_timing_list_sum(l, false);
    w->bytes = l->fused_loss ? fused_bytes(n, &n->x[l->node]) : list_bytes(n, l);
    if (l->node < 0) {
        snprintf(w->layer, sizeof w->layer, "%s", l->node == -1 ? "(logits)" : "(loss gradient)");
        w->computes = "-";
        return;
    }
    const struct xnode *x = &n->x[l->node];
    const int i = (int)(x->nd - r->model->nodes);
    char shape[32];
    st_shape_str(&x->nd->shape, shape, sizeof shape);
    w->index = i;
    snprintf(w->layer, sizeof w->layer, "#%d %s%s %s", i, node_kind_name(x->kind), l->fused_loss ? "+loss" : "",
             shape);
    w->computes = st_dtype_name(x->compute);
    const bool input_grad = x->in >= 0 && n->x[x->in].wants_diff;
    w->flops = model_layer_flops(r->model, i, l->backward, input_grad) * batch;
    if (l->fused_loss)
        w->flops += model_layer_flops(r->model, i, true, input_grad) * batch;
}

struct machine {
    double fp32_gflops, bf16_gflops, copy_gbs;
};

static void measure_machine(st_net *n, int threads, bool bf16, struct machine *m)
{
    const double f = matmul_rate(n, dnnl_f32, 0.3), b = bf16 ? matmul_rate(n, dnnl_bf16, 0.3) : 0;
    const double c = copy_rate(threads, 0.3);
    m->fp32_gflops = f > m->fp32_gflops ? f : m->fp32_gflops;
    m->bf16_gflops = b > m->bf16_gflops ? b : m->bf16_gflops;
    m->copy_gbs = c > m->copy_gbs ? c : m->copy_gbs;
}

static void bound_row(struct row *w, const struct machine *m)
{
    w->rate = !strcmp(w->computes, "bf16") ? m->bf16_gflops : m->fp32_gflops;
    const double compute = w->flops / (w->rate * 1e9), memory = w->bytes / (m->copy_gbs * 1e9);
    w->bound = compute > memory ? compute : memory;
}

/* Work that ran inside another layer's ops (the chunking pass moves a
 * convolution into its max-pool's steps, forward and a first layer's
 * backward-weights): a layer timed at under half its FLOPs' time at the
 * matmul rate cannot have done them itself.  Its FLOPs go to the layer
 * whose ops ran them: of the same pass, the nearest after it in the model
 * (the pool), named there as "+#i kind". */
static void merge_moved(struct row *rows, int k)
{
    for (int i = 0; i < k; i++) {
        struct row *w = &rows[i];
        if (w->l->node <= 0 || w->flops <= 0 || w->seconds >= 0.5 * w->flops / (w->rate * 1e9))
            continue;
        struct row *to = NULL;
        for (int j = 0; j < k; j++) {
            const struct row *c = &rows[j];
            if (c->l->backward == w->l->backward && c->l->node > w->l->node && c->l->ops->n &&
                c->seconds >= 0.5 * c->flops / (c->rate * 1e9) && (!to || c->l->node < to->l->node))
                to = &rows[j];
        }
        if (!to)
            continue;
        to->flops += w->flops;
        w->flops = 0;
        const size_t used = strlen(to->layer);
        snprintf(to->layer + used, sizeof to->layer - used, " +#%d", w->index);
    }
}

static int by_lost(const void *a, const void *b)
{
    const struct row *x = *(const struct row *const *)a, *y = *(const struct row *const *)b;
    const double lx = x->seconds - x->bound, ly = y->seconds - y->bound;
    return (lx < ly) - (lx > ly);
}

static void print_row(const struct row *w, bool csv)
{
    const double ms = w->seconds * 1e3, share = w->seconds > 0 ? w->bound / w->seconds : 0;
    const double gflops = w->seconds > 0 ? w->flops / w->seconds / 1e9 : 0, gbs = w->seconds > 0 ? w->bytes / w->seconds / 1e9 : 0;
    if (csv)
        printf("%s,%s,%s,%.4f,%.6f,%.3f,%.1f,%.2f,%.4f,%.3f,%.4f\n", w->layer,
               w->l->fused_loss ? "forward+backward" : w->l->backward ? "backward" : "forward",
               w->computes, ms, w->flops / 1e9, w->bytes / 1e6, gflops, gbs, w->bound * 1e3, share,
               (w->seconds - w->bound) * 1e3);
    else
        printf("| %s | %s | %s | %.3f | %.3f | %.2f | %.1f | %.2f | %.3f | %.2f | %.3f |\n", w->layer,
               w->l->fused_loss ? "fwd+bwd" : w->l->backward ? "bwd" : "fwd", w->computes, ms, w->flops / 1e9, w->bytes / 1e6, gflops, gbs,
               w->bound * 1e3, share, (w->seconds - w->bound) * 1e3);
}

static void report(struct row *rows, int k, int top, double step, const struct machine *m, bool csv)
{
    const char *header = csv ? "layer,pass,computes,ms,gflop,mb,gflop_s,gb_s,bound_ms,share,lost_ms\n"
                             : "| layer | pass | computes | ms | GFLOP | MB | GFLOP/s | GB/s | bound ms | share | lost ms |\n"
                               "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    double in_rows = 0, bounds = 0, flops = 0;
    printf("%s", header);
    for (int i = 0; i < k; i++) {
        if (!rows[i].l->ops->n)
            continue;
        print_row(&rows[i], csv);
        in_rows += rows[i].seconds, bounds += rows[i].bound, flops += rows[i].flops;
    }
    if (csv)
        return;
    char of_bf16[40] = "";
    if (m->bf16_gflops > 0)
        snprintf(of_bf16, sizeof of_bf16, ", %.2f of the bf16 one", flops / step / 1e9 / m->bf16_gflops);
    printf("\nstep %.3f ms (median of %d): its layers %.3f ms, bound %.3f ms: **%.2f of the roofline**; "
           "%.2f GFLOP a step at %.1f GFLOP/s = %.2f of the fp32 matmul rate%s\n",
           step * 1e3, STEPS, in_rows * 1e3, bounds * 1e3, bounds / step, flops / 1e9, flops / step / 1e9,
           flops / step / 1e9 / m->fp32_gflops, of_bf16);
    struct row **order = malloc((size_t)k * sizeof *order);
    if (!order)
        die("out of memory");
    for (int i = 0; i < k; i++)
        order[i] = &rows[i];
    qsort(order, (size_t)k, sizeof *order, by_lost);
    printf("\ntop %d by time lost against the bound:\n\n%s", top, header);
    for (int i = 0; i < k && i < top; i++)
        print_row(order[i], false);
    free(order);
}

struct options {
    const char *model;
    int batch, threads, top;
    bool csv;
    st_dtype precision;
};

static bool parse(int argc, char **argv, struct options *o)
{
    *o = (struct options){.batch = 64, .threads = 1, .top = 8, .precision = ST_DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--batch") && v)
            o->batch = atoi(v), i++;
        else if (!strcmp(a, "--threads") && v)
            o->threads = atoi(v), i++;
        else if (!strcmp(a, "--top") && v)
            o->top = atoi(v), i++;
        else if (!strcmp(a, "--precision") && v && st_dtype_parse(v, &o->precision) &&
                 (o->precision == ST_DTYPE_F32 || o->precision == ST_DTYPE_BF16))
            i++;
        else if (!strcmp(a, "--csv"))
            o->csv = true;
        else if (a[0] != '-' && !o->model)
            o->model = a;
        else
            return false;
    }
    return o->model && o->batch >= 1 && o->threads >= 1 && o->top >= 1;
}

/* The step's median time, after warm-up steps. */
static double median_step(struct step_rig *r)
{
    double steps[STEPS];
    for (int w = 0; w < 3; w++)
        rig_step(r);
    for (int s = 0; s < STEPS; s++) {
        const double t0 = rig_now();
        rig_step(r);
        steps[s] = rig_now() - t0;
    }
    return op_timing_median(steps, STEPS);
}

int main(int argc, char **argv)
{
    struct options o;
    if (!parse(argc, argv, &o)) {
        fprintf(stderr, "usage: st-roofline MODEL [--batch B >= 1] [--threads N >= 1] [--precision fp32|bf16] "
                        "[--top K >= 1] [--csv]\n");
        return 2;
    }
    struct step_rig r;
    rig_create_in(&r, "st-roofline", o.model, o.batch, o.threads, o.precision);
    st_net *n = r.net;
    const bool bf16 = o.precision == ST_DTYPE_BF16;
    struct machine m = {0};
    measure_machine(n, o.threads, bf16, &m);
    struct timed_list *l = calloc(2 * (size_t)n->nx + 2, sizeof *l);
    struct row *rows = calloc(2 * (size_t)n->nx + 2, sizeof *rows);
    if (!l || !rows)
        die("out of memory");
    const int k = op_timing_collect(n, r.labels, l, "st-roofline");
    const double step = median_step(&r);
    double in_step, alone;
    op_timing_round(n, l, k, &in_step, &alone);
    measure_machine(n, o.threads, bf16, &m);
    for (int i = 0; i < k; i++) {
        describe(&r, &l[i], &rows[i], o.batch);
        bound_row(&rows[i], &m);
    }
    merge_moved(rows, k);
    for (int i = 0; i < k; i++)
        bound_row(&rows[i], &m);
    char bf16_rate[48] = "";
    if (bf16)
        snprintf(bf16_rate, sizeof bf16_rate, ", bf16 matmul %.1f GFLOP/s", m.bf16_gflops);
    if (!o.csv)
        printf("%s %s, batch %d, %d thread%s: fp32 matmul %.1f GFLOP/s%s, copy %.2f GB/s\n\n", o.model,
               st_dtype_name(o.precision), o.batch, o.threads, o.threads > 1 ? "s" : "", m.fp32_gflops, bf16_rate,
               m.copy_gbs);
    report(rows, k, o.top, step, &m, o.csv);
    op_timing_free(l, k);
    free(l), free(rows);
    rig_destroy(&r);
    return 0;
}
