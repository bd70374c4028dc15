/* The arithmetic a layer does: each kind's floating-point operations per
 * sample, the layer table's `flops` column, for the roofline (st-roofline)
 * and for whatever states a step's FLOPs.  A multiply-add is two; only the
 * products are counted (a convolution's, a linear map's, the head's,
 * attention's), as FLOP figures of models are usually stated: the layers
 * that only move data (activations, pools, norms, adds) count 0 and are
 * bound by the bytes they move instead. */
#include "model.h"

typedef double flops_fn(const st_model *m, int i);

double flops_none(const st_model *m, int i)
{
    (void)m, (void)i;
    return 0;
}

/* A convolution or a linear map: fan_in products per output element, and
 * a linear map on a sequence at every position. */
double flops_weighted(const st_model *m, int i)
{
    const struct node *nd = &m->nodes[i];
    const double positions = nd->t > 0 ? nd->t : 1;
    return 2.0 * nd->fan_in * (double)nd->c * nd->h * nd->w * positions;
}

/* Every position's scores over the vocabulary (the embedding's table). */
double flops_head(const st_model *m, int i)
{
    const struct node *nd = &m->nodes[i];
    return 2.0 * nd->t * (double)m->nodes[nd->in].c * nd->vocab;
}

/* Causal: Q K^T and P V over the t (t + 1) / 2 pairs a query sees, every
 * head's hs columns making the model's c. */
double flops_attention(const st_model *m, int i)
{
    const struct node *nd = &m->nodes[i];
    return 2.0 * 2.0 * nd->c * ((double)nd->t * (nd->t + 1) / 2);
}

static flops_fn *const FLOPS[] = {
#define FLOPS_OF(KIND, keyword, parse, init, scratch, fwd, bwd, build, lowp, summary, flops) [NODE_##KIND] = flops,
    NN_LAYER_TABLE(FLOPS_OF)
#undef FLOPS_OF
};
_Static_assert(sizeof FLOPS / sizeof *FLOPS == NODE_KINDS, "a FLOP count per layer kind");

/* Backward: the input's gradient (the forward's products again, with the
 * other operand) where the input takes one, and the weights' (the tied
 * head's go to the embedding's table), as the usual "backward is twice
 * forward" counts it; attention has no weights but four products (dP, dV,
 * dQ, dK) to the forward's two. */
double model_layer_flops(const st_model *m, int i, bool backward, bool input_grad)
{
    const struct node *nd = &m->nodes[i];
    const double forward = FLOPS[nd->kind](m, i);
    if (!backward)
        return forward;
    if (nd->kind == NODE_ATTENTION)
        return 2 * forward;
    const bool weights = nd->w_count > 0 || nd->kind == NODE_HEAD;
    return forward * ((input_grad ? 1 : 0) + (weights ? 1 : 0));
}
