/* The loss: softmax cross-entropy at every row, its gradient w.r.t. the
 * logits, and the scores of an evaluation (nn.h's st_net_loss and
 * st_net_score).  Over whole logits here; a backend that fuses the loss
 * with a tied head (struct nn_backend's loss, chosen in st_net_create)
 * computes the same rows, a chunk at a time, with the same nn_loss_row. */
#define _GNU_SOURCE
#include "net.h"
#include "kernels/simd.h"

#include <math.h>
#include <omp.h>

/* sum of e[0..k) in double, in eight lanes added in a fixed order: the same
 * bits on every ISA (GCC's vector type keeps its lanes; an `omp simd`
 * reduction would not), and eight chains instead of one: the sum in order
 * waited a double add's latency per logit, 80% of the loss at gpt2's
 * 50304 words (docs/benchmarks.md 0p). */
typedef double double8 __attribute__((vector_size(64)));

ST_MULTIVERSION static double sum_of(const float *restrict e, int k)
{
    double8 lanes = {0};
    int j = 0;
    for (; j + 8 <= k; j += 8)
        lanes += (double8){e[j], e[j + 1], e[j + 2], e[j + 3], e[j + 4], e[j + 5], e[j + 6], e[j + 7]};
    double sum = 0;
    for (int l = 0; l < 8; l++)
        sum += lanes[l];
    for (; j < k; j++)
        sum += e[j];
    return sum;
}

/* One row's softmax cross-entropy: its loss, and d(loss)/d(logits) / rows
 * into dz, or rounded to bf16 into dz16 where given (a bf16 head's
 * products read it so: no pass converting it after); returns whether the
 * top logit is the label. */
ST_MULTIVERSION bool nn_loss_row(const float *z, float *dz, st_bf16 *dz16, int k, int label, int rows,
                                 double *row_loss)
{
    float zmax = z[0];
#pragma omp simd reduction(max : zmax)
    for (int j = 1; j < k; j++)
        zmax = z[j] > zmax ? z[j] : zmax;
    int best = 0;  /* the first logit at the maximum, as a scan would find it */
    while (z[best] != zmax && best < k - 1)
        best++;
    const float z_label = z[label];  /* dz may be z */
    /* One exp per logit, vectorised (libm's double exp was 3% of a GPT's
     * step: batch x context x vocabulary of them): the softmax is e_j / sum,
     * and e_j waits in dz. */
#pragma omp simd
    for (int j = 0; j < k; j++)
        dz[j] = nn_expf(z[j] - zmax);
    const double sum = sum_of(dz, k);
    *row_loss = zmax + log(sum) - z_label;
    /* d(mean loss)/dz = (softmax - onehot) / rows: one double multiply per
     * logit (two double divisions each were most of the loss's time). */
    const double scale = 1.0 / (sum * rows), e_label = dz[label];
    const float d_label = (float)((e_label / sum - 1.0) / rows);
    if (dz16) {
#pragma omp simd
        for (int j = 0; j < k; j++)
            dz16[j] = st_bf16_from_f32((float)((double)dz[j] * scale));
        dz16[label] = st_bf16_from_f32(d_label);
    } else {
#pragma omp simd
        for (int j = 0; j < k; j++)
            dz[j] = (float)((double)dz[j] * scale);
        dz[label] = d_label;
    }
    return best == label;
}

static st_status check_labels(const st_net *n, const int *labels, int rows)
{
    const int k = st_model_classes(n->model);
    for (int i = 0; i < rows; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return st_fail(ST_ERR_INVALID, "loss: label %d of sample %d is not a class of this model "
                                           "(0..%d)", labels[i], i, k - 1);
    return ST_OK;
}

/* Each of the first `rows` rows' loss into n->loss_rows, and the count
 * right; the gradient too where `gradient` (else dlogits is scratch).  Rows
 * in parallel (a language model scores batch x context of them), their
 * losses summed afterwards in row order: the same bits at any thread
 * count. */
static st_status score_rows(st_net *n, const int *labels, int rows, bool gradient, int *correct)
{
    st_status st = nn_runnable(n) == ST_OK ? check_labels(n, labels, rows) : ST_ERR_INVALID;
    if (st != ST_OK)
        return st;
    if (n->fused_loss) {
        const double head_before = n->prof[NODE_HEAD], t0 = n->profiling ? st_now_s() : 0;
        st = n->backend->loss(n, labels, rows, gradient, n->loss_rows, correct);
        if (n->profiling)  /* the head's products counted as the head's, the rest as the loss */
            n->prof[NODE_KINDS + 1] += st_now_s() - t0 - (n->prof[NODE_HEAD] - head_before);
        return st;
    }
    const double t0 = n->profiling ? st_now_s() : 0;
    const int k = st_model_classes(n->model);
    int right = 0;
#pragma omp parallel for schedule(static) reduction(+ : right) if (rows >= 64)
    for (int i = 0; i < rows; i++)
        right += nn_loss_row(n->logits + (size_t)i * k, n->dlogits + (size_t)i * k, NULL, k, labels[i], rows,
                             &n->loss_rows[i]);
    *correct = right;
    if (n->profiling)
        n->prof[NODE_KINDS + 1] += st_now_s() - t0;
    return ST_OK;
}

/* The rows' losses summed, and their count right, with or without the
 * gradient: what st_net_loss averages and st_net_score reports. */
static st_status score_sum(st_net *n, const int *labels, int rows, bool gradient, double *sum, int *correct)
{
    st_status st = score_rows(n, labels, rows, gradient, correct);
    *sum = 0;
    for (int i = 0; st == ST_OK && i < rows; i++)
        *sum += n->loss_rows[i];
    return st;
}

st_status st_net_loss(st_net *n, const int *labels, float *loss, int *correct)
{
    const int rows = n->batch * st_model_positions(n->model);
    int right = 0;
    double total;
    st_status st = score_sum(n, labels, rows, true, &total, &right);
    if (st != ST_OK)
        return st;
    if (loss)
        *loss = (float)(total / rows);
    if (correct)
        *correct = right;
    return ST_OK;
}

st_status st_net_score(st_net *n, const int *labels, int rows, double *loss_sum, int *correct)
{
    if (rows < 0 || rows > n->batch * st_model_positions(n->model))
        return st_fail(ST_ERR_INVALID, "score: %d rows, the batch holds %d", rows,
                       n->batch * st_model_positions(n->model));
    return score_sum(n, labels, rows, false, loss_sum, correct);
}
