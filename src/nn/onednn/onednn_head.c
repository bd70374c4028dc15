/* The tied head on the oneDNN backend: logits = x E^T through the embed's
 * token table E [vocab, c], and, where net.c chose it (n->fused_loss), the
 * softmax cross-entropy fused with it, in chunks of rows.
 *
 * Fused, no [rows, vocabulary] tensor exists: each chunk's logits are
 * computed, turned in place into their gradient by the loss, and spent at
 * once on the chunk's input gradient (dz E) and on the table's gradient
 * (dz^T x, summed over chunks).  For gpt2 at its recipe's batch 12 x 1024
 * the logits, their gradient and the loss's copy were three 2.5 GB
 * tensors; a chunk is HEAD_CHUNK_BYTES.  The logits in full are still
 * computed, chunk by chunk, for whoever asks (st_net_output: sampling).
 *
 * In a bf16 net the head computes in bf16 (the layer table's lowp column):
 * the three products are oneDNN matmuls on a bf16 copy of the table that
 * the optimizer writes in its update pass, as for the linear layers, with
 * each chunk's input rows converted to bf16 and the logits' gradient
 * written in bf16 by the fused loss (both counted as conversions), and
 * everything accumulated in fp32: the table's gradient lands in fp32 in
 * the embed's own, where the embed then adds its part.  Where oneDNN has
 * AMX, the products read the table (and the rows) in brgemm's blocked
 * layouts (blocked_tables).
 * In fp32 the products are dnnl_sgemm's, as before the fusion, and a fused
 * and an unfused net agree bit for bit (test_head_loss): both run the same
 * chunks, only where the logits wait differs. */
#define _GNU_SOURCE
#include <limits.h>
#include <omp.h>

#include "onednn_internal.h"

/* A chunk's logits take at most this much (st_net_config.head_chunk_rows
 * can ask for fewer rows).  Each chunk's weight-gradient product adds into
 * the whole table gradient (154 MB for gpt2), and AMX's products want many
 * rows: gpt2's 50304 words make 1334 rows a chunk, one at batch 1 x 1024
 * and 10 at the recipe's 12 x 1024.  64 MB chunks (333 rows) made gpt2's
 * bf16 step 1.02-1.12x slower on a 2-vCPU AMX Xeon, its fp32 step level
 * (docs/benchmarks.md 0o, 0p); the chunk's logits and their bf16 gradient
 * (384 MB) are a small part of the recipe's peak memory. */
#define HEAD_CHUNK_BYTES (256L << 20)

/* As many chunks as HEAD_CHUNK_BYTES (or the config) asks for, of equal
 * rows: a short last chunk would cost a whole pass over the table's
 * gradient for a few rows. */
static long chunk_rows(const st_net *n, long rows, long vocab)
{
    const long asked = n->cfg.head_chunk_rows > 0 ? n->cfg.head_chunk_rows : LONG_MAX;
    const long bytes_hold = HEAD_CHUNK_BYTES / (vocab * (long)sizeof(float));
    const long most = asked < bytes_hold ? asked : bytes_hold;
    if (most < 1)
        return 1;
    const long chunks = (rows + most - 1) / most;
    return (rows + chunks - 1) / chunks;
}

static const struct node *table_of(const st_net *n, const struct xnode *x)
{
    return &n->model->nodes[x->nd->embed];
}

static st_status sgemm(st_net *n, char ta, char tb, long m, long nn, long k, const float *a, long lda, const float *b,
                       long ldb, float beta, float *c, long ldc)
{
    dnnl_status_t s = dnnl_sgemm(ta, tb, m, nn, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return s == dnnl_success ? ST_OK : dn_dnnl_error(n, "dnnl_sgemm", s);
}

/* src[m, cols] to bf16, rows in parallel; counted as one conversion. */
static void to_bf16(st_net *n, st_bf16 *dst, const float *src, long m, long cols)
{
#pragma omp parallel for schedule(static) if (m * cols >= 65536)
    for (long r = 0; r < m; r++)
        st_bf16_from_f32_n(dst + r * cols, src + r * cols, (size_t)cols);
    n->counters.conversions++;
    n->counters.converted_bytes += (size_t)(m * cols) * sizeof(float);
}

static st_status matmul(st_net *n, dnnl_primitive_t p, dnnl_memory_t src, void *src_ptr, dnnl_memory_t wei,
                        void *wei_ptr, dnnl_memory_t dst, void *dst_ptr)
{
    TRY(dnnl_memory_set_data_handle(src, src_ptr));
    TRY(dnnl_memory_set_data_handle(wei, wei_ptr));
    TRY(dnnl_memory_set_data_handle(dst, dst_ptr));
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    TRY(dnnl_primitive_execute(p, dn_net(n)->strm, 3, args));
    return ST_OK;
}

static const struct dn_head_matmuls *matmuls_for(const struct dn_head_state *h, long m)
{
    return m == h->chunk ? &h->full : &h->tail;
}

/* The logits of rows [r0, r0 + m) into out [m, vocab]. */
static st_status chunk_logits(st_net *n, const struct xnode *x, long r0, long m, float *out)
{
    const struct node *e = table_of(n, x);
    const struct dn_head_state *h = &dn_state(x)->head;
    const float *src = (const float *)dn_mem_ptr(dn_state(x)->seq.src) + r0 * e->c;
    if (!x->lowp)
        return sgemm(n, 'N', 'T', m, e->vocab, e->c, src, e->c, n->params + e->w_off, e->c, 0.0f, out, e->vocab);
    const struct dn_head_matmuls *mm = matmuls_for(h, m);
    to_bf16(n, h->rows, src, m, e->c);
    return matmul(n, mm->logits, mm->rows, h->rows, mm->table_logits, dn_mem_ptr(mm->table_logits), mm->out, out);
}

/* From dz [m, vocab], the gradient of rows [r0, r0 + m)'s logits: their
 * input's gradient, and the table's, written by the first chunk and added
 * to by the others.  fused: chunk_logits has just converted this chunk's
 * rows, and in bf16 the loss wrote dz rounded into h->dz itself. */
static st_status chunk_grads(st_net *n, const struct xnode *x, long r0, long m, const float *dz, bool fused)
{
    const struct node *e = table_of(n, x);
    const struct dn_head_state *h = &dn_state(x)->head;
    const float *src = (const float *)dn_mem_ptr(dn_state(x)->seq.src) + r0 * e->c;
    float *dx = dn_state(x)->seq.target ? (float *)dn_mem_ptr(dn_state(x)->seq.target) + r0 * e->c : NULL;
    float *dtable = n->grads + e->w_off;
    if (!x->lowp) {
        if (dx)
            OK(sgemm(n, 'N', 'N', m, e->c, e->vocab, dz, e->vocab, n->params + e->w_off, e->c, 0.0f, dx, e->c));
        return sgemm(n, 'T', 'N', e->vocab, e->c, m, dz, e->vocab, src, e->c, r0 ? 1.0f : 0.0f, dtable, e->c);
    }
    const struct dn_head_matmuls *mm = matmuls_for(h, m);
    if (!fused) {
        to_bf16(n, h->rows, src, m, e->c);
        to_bf16(n, h->dz, dz, m, e->vocab);
    } else {  /* the loss rounded dz as it wrote it: the same edge converted, counted as such */
        n->counters.conversions++;
        n->counters.converted_bytes += (size_t)(m * e->vocab) * sizeof(float);
    }
    if (dx)
        OK(matmul(n, mm->dx, mm->dz, h->dz, mm->table_dx, dn_mem_ptr(mm->table_dx), mm->dx_out, dx));
    void *rows = h->rows;
    if (mm->rows_blocked) {
        TRY(dnnl_memory_set_data_handle(mm->rows, h->rows));
        const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, mm->rows}, {DNNL_ARG_TO, mm->rows_dtable}};
        TRY(dnnl_primitive_execute(mm->rows_blocked, dn_net(n)->strm, 2, args));
        rows = dn_mem_ptr(mm->rows_dtable);
    }
    return matmul(n, r0 ? mm->dtable_add : mm->dtable, mm->dz_t, h->dz, mm->rows_dtable, rows, h->dtable, dtable);
}

static double head_clock(const st_net *n) { return n->profiling ? st_now_s() : 0; }

static void head_time(st_net *n, double t0)
{
    if (n->profiling)
        n->prof[NODE_HEAD] += st_now_s() - t0;
}

st_status dn_head_loss(st_net *n, const int *labels, int rows, bool gradient, double *row_loss, int *correct)
{
    const struct xnode *x = &n->x[n->nx - 1];
    struct dn_head_state *h = &dn_state(x)->head;
    const int vocab = table_of(n, x)->vocab, all = (int)nn_rows(n, x->nd);
    int right = 0;
    h->grads_done = false;
    for (long r0 = 0; r0 < rows; r0 += h->chunk) {
        /* the chunk's rows as the products were built for; the first m scored
         * (an evaluation's short last batch leaves padding rows unscored) */
        const long built = all - r0 < h->chunk ? all - r0 : h->chunk, m = rows - r0 < built ? rows - r0 : built;
        double t0 = head_clock(n);
        OK(chunk_logits(n, x, r0, built, h->logits));
        head_time(n, t0);
        st_bf16 *dz16 = gradient && x->lowp ? h->dz : NULL;  /* what the bf16 products read */
#pragma omp parallel for schedule(static) reduction(+ : right) if (m >= 64)
        for (long i = 0; i < m; i++) {
            float *z = h->logits + i * vocab;
            right += nn_loss_row(z, z, dz16 ? dz16 + i * vocab : NULL, vocab, labels[r0 + i], all, &row_loss[r0 + i]);
        }
        t0 = head_clock(n);
        if (gradient)
            OK(chunk_grads(n, x, r0, m, h->logits, true));
        head_time(n, t0);
    }
    TRY(dnnl_stream_wait(dn_net(n)->strm));
    h->grads_done = gradient && rows == all;
    *correct = right;
    return ST_OK;
}

st_status dn_head_output(st_net *n, float *out)
{
    const struct xnode *x = &n->x[n->nx - 1];
    const long rows = (long)nn_rows(n, x->nd), vocab = table_of(n, x)->vocab, chunk = dn_state(x)->head.chunk;
    for (long r0 = 0; r0 < rows; r0 += chunk)
        OK(chunk_logits(n, x, r0, rows - r0 < chunk ? rows - r0 : chunk, out + r0 * vocab));
    TRY(dnnl_stream_wait(dn_net(n)->strm));
    return ST_OK;
}

void dn_head_take_gradient(st_net *n, const float *dy) { dn_state(&n->x[n->nx - 1])->head.dy = dy; }

static st_status head_fwd(st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    dn_state(x)->head.grads_done = false;
    if (n->fused_loss)  /* the loss computes the logits, a chunk at a time */
        return ST_OK;
    const long rows = (long)nn_rows(n, x->nd), vocab = table_of(n, x)->vocab, chunk = dn_state(x)->head.chunk;
    float *logits = dn_mem_ptr(dn_state(x)->dst.mem);
    for (long r0 = 0; r0 < rows; r0 += chunk)
        OK(chunk_logits(n, x, r0, rows - r0 < chunk ? rows - r0 : chunk, logits + r0 * vocab));
    return ST_OK;
}

/* From the whole logits' gradient (unfused, or a caller's through
 * st_net_backward_from), or nothing left to do after a fused loss. */
static st_status head_bwd(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct dn_head_state *h = &dn_state(x)->head;
    const float *dy = n->fused_loss ? h->dy : dn_mem_ptr(dn_state(x)->diff.mem);
    h->dy = NULL;
    if (!dy) {
        if (!h->grads_done)
            return st_fail(ST_ERR_INVALID, "net: backward without a loss or a gradient of the output");
        h->grads_done = false;
        return ST_OK;
    }
    const long rows = (long)nn_rows(n, x->nd), vocab = table_of(n, x)->vocab;
    for (long r0 = 0; r0 < rows; r0 += h->chunk)
        OK(chunk_grads(n, x, r0, rows - r0 < h->chunk ? rows - r0 : h->chunk, dy + r0 * vocab, false));
    return ST_OK;
}

/* ----------------------------------------------------------- build -- */

/* The product src . wei -> dst (added to dst's contents with `add`), into
 * *p unless p is NULL; *chosen (if given) the weights' layout it reads,
 * oneDNN's choice where wei is `any`. */
static st_status matmul_pd(st_net *n, dnnl_primitive_t *p, const_dnnl_memory_desc_t src,
                           const_dnnl_memory_desc_t wei, const_dnnl_memory_desc_t dst, bool add,
                           const_dnnl_memory_desc_t *chosen)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (add) {
        TRY(dnnl_post_ops_create(&po));
        dnnl_status_t s = dnnl_post_ops_append_sum(po, 1.0f, 0, dnnl_data_type_undef);
        if (s == dnnl_success)
            s = dnnl_primitive_attr_create(&attr);
        if (s == dnnl_success)
            s = dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_post_ops_destroy(po);
        if (s != dnnl_success) {
            dnnl_primitive_attr_destroy(attr);
            return dn_dnnl_error(n, "the head's sum post-op", s);
        }
    }
    dnnl_primitive_desc_t pd;
    st_status st = DN_PD(n, pd, NULL, dnnl_matmul_primitive_desc_create(&pd, dn_net(n)->eng, src, wei, NULL, dst, attr));
    dnnl_primitive_attr_destroy(attr);
    if (st == ST_OK && chosen)
        *chosen = dn_query(pd, dnnl_query_weights_md, 0);
    return st == ST_OK && p ? dn_prim_new(n, p, pd) : st;
}

/* One of the table's blocked copies refreshed before the head's forward
 * step, counted as a weight reorder. */
static st_status table_reorder(st_net *n, struct xnode *x, dnnl_memory_t from, dnnl_memory_t to)
{
    struct oplist *l = &dn_state(x)->fwd;
    const int at = l->n;
    OK(dn_add_reorder(n, l, from, to));
    l->v[at].counted = OP_COUNTS_WEIGHT_REORDER;
    return ST_OK;
}

/* The three products for chunks of m rows, and the memories they read
 * through (their buffers set at each call). */
static st_status build_matmuls(st_net *n, const struct xnode *x, struct dn_head_matmuls *mm, long m)
{
    const struct node *e = table_of(n, x);
    const long v = e->vocab, c = e->c;
    const struct dn_head_state *h = &dn_state(x)->head;
    const_dnnl_memory_desc_t rows, out, dz, dz_t, dx_out;
    OK(dn_md2(n, &rows, m, c, dnnl_bf16, dnnl_ab));
    OK(dn_md2(n, &out, m, v, dnnl_f32, dnnl_ab));
    OK(dn_md2(n, &dz, m, v, dnnl_bf16, dnnl_ab));
    OK(dn_md2(n, &dz_t, v, m, dnnl_bf16, dnnl_ba));  /* dz read transposed */
    OK(dn_md2(n, &dx_out, m, c, dnnl_f32, dnnl_ab));
    OK(dn_mem_unbacked(n, &mm->rows, rows));
    OK(dn_mem_unbacked(n, &mm->out, out));
    OK(dn_mem_unbacked(n, &mm->dz, dz));
    OK(dn_mem_unbacked(n, &mm->dz_t, dz_t));
    OK(dn_mem_unbacked(n, &mm->dx_out, dx_out));
    mm->table_logits = h->table_logits ? h->table_logits : h->table_t;
    mm->table_dx = h->table_dx ? h->table_dx : h->table;
    OK(matmul_pd(n, &mm->logits, rows, dn_mem_md(mm->table_logits), out, false, NULL));
    OK(matmul_pd(n, &mm->dx, dz, dn_mem_md(mm->table_dx), dx_out, false, NULL));
    mm->rows_dtable = mm->rows;
    const_dnnl_memory_desc_t rows_read = rows;
    if (h->table_logits) {  /* AMX (blocked_tables): the rows too, reordered each chunk (30 us at 1024 rows) */
        const dnnl_dims_t d = {m, c};
        OK(dn_md_tag(n, &rows_read, 2, d, dnnl_bf16, dnnl_format_tag_any));
    }
    OK(matmul_pd(n, &mm->dtable, dz_t, rows_read, dn_mem_md(h->dtable), false, &rows_read));
    if (!dn_same(rows_read, rows)) {
        dnnl_primitive_desc_t r;
        OK(dn_mem_new(n, &mm->rows_dtable, rows_read, NULL));
        OK(DN_PD(n, r, NULL, dnnl_reorder_primitive_desc_create(&r, rows, dn_net(n)->eng, rows_read, dn_net(n)->eng, NULL)));
        OK(dn_prim_new(n, &mm->rows_blocked, r));
    }
    return matmul_pd(n, &mm->dtable_add, dz_t, dn_mem_md(mm->rows_dtable), dn_mem_md(h->dtable), true, NULL);
}

/* Where oneDNN has AMX and the head has rows enough (dn_amx_rows), its
 * products read the table in the blocked layouts brgemm packs it into
 * itself otherwise, at every call: two copies of the table (77 MB each for
 * gpt2), against products 1.15x (logits) and 1.25x (the input's gradient)
 * faster at 1024 rows, every chunk (docs/benchmarks.md 0p).  The optimizer
 * writes both (paired[]: copy_layouts.c's pair layouts), where it can;
 * else they are reordered from its plain one before each forward pass
 * (counted as weight reorders; 6-7 ms each on two AMX cores).
 * SHMTRAIN_ONEDNN_IP_PLAIN keeps the plain table. */
static st_status blocked_tables(st_net *n, struct xnode *x, long m, bool paired[2])
{
    struct dn_head_state *h = &dn_state(x)->head;
    const struct node *e = table_of(n, x);
    const long v = e->vocab, c = e->c;
    paired[0] = paired[1] = false;
    if (!dn_amx_rows(n, x) || dn_net(n)->opt.ip_plain)
        return ST_OK;
    const_dnnl_memory_desc_t rows, out, dz, dx_out, any_t, any, logits_md, dx_md;
    OK(dn_md2(n, &rows, m, c, dnnl_bf16, dnnl_ab));
    OK(dn_md2(n, &out, m, v, dnnl_f32, dnnl_ab));
    OK(dn_md2(n, &dz, m, v, dnnl_bf16, dnnl_ab));
    OK(dn_md2(n, &dx_out, m, c, dnnl_f32, dnnl_ab));
    OK(dn_md2(n, &any_t, c, v, dnnl_bf16, dnnl_format_tag_any));
    OK(dn_md2(n, &any, v, c, dnnl_bf16, dnnl_format_tag_any));
    OK(matmul_pd(n, NULL, rows, any_t, out, false, &logits_md));
    OK(matmul_pd(n, NULL, dz, any, dx_out, false, &dx_md));
    OK(dn_mem_new(n, &h->table_logits, logits_md, NULL));
    OK(dn_mem_new(n, &h->table_dx, dx_md, NULL));
    OK(dn_add_pair_copy(n, x, e->w_off, v, c, h->table_logits, &paired[0]));
    return dn_add_pair_copy(n, x, e->w_off, v, c, h->table_dx, &paired[1]);
}

/* The optimizer's plain bf16 copy of the table, its transposed view, and
 * the reorders into the blocked tables it does not write itself: none of
 * it where it writes both (nothing reads a plain table then: 77 MB for
 * gpt2). */
static st_status plain_table(st_net *n, struct xnode *x, const bool paired[2])
{
    const struct node *e = table_of(n, x);
    struct dn_head_state *h = &dn_state(x)->head;
    if (paired[0] && paired[1])
        return ST_OK;
    const_dnnl_memory_desc_t table, table_t;
    OK(dn_md2(n, &table, e->vocab, e->c, dnnl_bf16, dnnl_ab));
    OK(dn_md2(n, &table_t, e->c, e->vocab, dnnl_bf16, dnnl_ba));
    OK(dn_mem_new(n, &h->table, table, NULL));
    OK(dn_mem_new(n, &h->table_t, table_t, dn_mem_ptr(h->table)));
    OK(nn_copy_add(n, e->w_off, e->w_count, dn_mem_ptr(h->table), ST_DTYPE_BF16, NULL));
    if (h->table_logits && !paired[0])
        OK(table_reorder(n, x, h->table_t, h->table_logits));
    return h->table_dx && !paired[1] ? table_reorder(n, x, h->table, h->table_dx) : ST_OK;
}

/* The bf16 tables, the chunk buffers and the products for a whole chunk
 * and for the last, shorter one. */
static st_status build_bf16(st_net *n, struct xnode *x, long rows)
{
    const struct node *e = table_of(n, x);
    struct dn_head_state *h = &dn_state(x)->head;
    const long v = e->vocab, c = e->c;
    const_dnnl_memory_desc_t dtable;
    OK(dn_md2(n, &dtable, v, c, dnnl_f32, dnnl_ab));
    OK(dn_mem_unbacked(n, &h->dtable, dtable));
    h->rows = nn_lines_alloc((size_t)h->chunk * (size_t)c, sizeof(st_bf16), false);
    h->dz = nn_lines_alloc((size_t)h->chunk * (size_t)v, sizeof(st_bf16), false);
    if (!h->rows || !h->dz)
        return st_fail(ST_ERR_NOMEM, "net: out of memory for the head's bf16 rows");
    bool paired[2];
    OK(blocked_tables(n, x, h->chunk, paired));
    OK(plain_table(n, x, paired));
    OK(build_matmuls(n, x, &h->full, h->chunk));
    return rows % h->chunk ? build_matmuls(n, x, &h->tail, rows % h->chunk) : ST_OK;
}

/* The output and its gradient: real memories unfused; fused, descriptors
 * only (nothing holds the logits). */
static st_status build_output(st_net *n, struct xnode *x, const_dnnl_memory_desc_t md)
{
    if (!n->fused_loss)
        return dn_set_dst(n, x, md);
    OK(dn_mem_unbacked(n, &dn_state(x)->dst.mem, md));
    dn_state(x)->dst.md = dn_mem_md(dn_state(x)->dst.mem);
    OK(dn_mem_unbacked(n, &dn_state(x)->diff.mem, md));
    dn_state(x)->diff.md = dn_mem_md(dn_state(x)->diff.mem);
    return ST_OK;
}

st_status dn_build_head(st_net *n, int j)
{
    struct xnode *x = &n->x[j];
    struct dn_head_state *h = &dn_state(x)->head;
    const struct node *e = table_of(n, x);
    const long rows = (long)nn_rows(n, x->nd);
    h->chunk = chunk_rows(n, rows, e->vocab);
    snprintf(x->impl, sizeof x->impl, "%s through the embed's table, %ld rows a chunk%s",
             x->lowp ? "bf16 matmul" : "sgemm", h->chunk, n->fused_loss ? ", fused with the loss" : "");
    const_dnnl_memory_desc_t out, in;
    OK(dn_md2(n, &out, rows, e->vocab, dnnl_f32, dnnl_ab));
    OK(dn_md2(n, &in, rows, e->c, dnnl_f32, dnnl_ab));
    OK(build_output(n, x, out));
    OK(dn_input_as(n, x, in, &dn_state(x)->seq.src));
    if (n->fused_loss && !(h->logits = nn_lines_alloc((size_t)h->chunk * (size_t)e->vocab, sizeof(float), false)))
        return st_fail(ST_ERR_NOMEM, "net: out of memory for the head's chunk of logits");
    if (x->lowp)
        OK(build_bf16(n, x, rows));
    if (h->table_logits) {
        const size_t said = strlen(x->impl);
        snprintf(x->impl + said, sizeof x->impl - said, ", AMX-blocked%s",
                 dn_state(x)->weights_paired ? " by the optimizer" : "");
    }
    OK(dn_add_step(n, &dn_state(x)->bwd, head_bwd, NODE_HEAD));
    OK(dn_deliver(n, j, x->in, in, NULL, &dn_state(x)->seq.target));
    return dn_add_step(n, &dn_state(x)->fwd, head_fwd, NODE_HEAD);
}

void dn_head_free(struct dn_head_state *h)
{
    free(h->logits);
    free(h->rows);
    free(h->dz);
}
