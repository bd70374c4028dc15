/* The low-precision plan, for every backend: what each layer kind does in
 * a net of a low precision (the layer table's lowp column, each rule asked
 * with that precision, bf16 or fp16) and, from that, the type of every
 * tensor edge.  oneDNN's kernels compute in bf16 only; the reference
 * backend emulates any rounding type (values rounded where the plan keeps
 * them low), so it defines what a bf16 or an fp16 net computes. */
#define _GNU_SOURCE
#include "net.h"

/* A convolution reading fewer channels than this stays fp32 in a
 * low-precision net: with one input channel oneDNN's bf16 kernels lose to
 * its fp32 ones, on AMX and on AVX512-BF16 alike, and three (RGB) already
 * win, the whole stem then carrying bf16 (docs/benchmarks.md, section 0c).
 * The reference follows it, so both backends plan the same net. */
#define LOWP_MIN_CONV_CHANNELS 3

/* Has this net's backend kernels that compute x in `low`?  The reference
 * emulates every rounding type; oneDNN answers per layer kind. */
static bool kernels_in(const st_net *n, const struct xnode *x, st_dtype low)
{
    return n->backend->computes(n, x, low);
}

enum lowp_role lowp_never(const st_net *n, const struct xnode *x, st_dtype low)
{
    (void)n, (void)x, (void)low;
    return LOWP_NO;
}

enum lowp_role lowp_computes(const st_net *n, const struct xnode *x, st_dtype low)
{
    if (!kernels_in(n, x, low))
        return LOWP_NO;
    return x->kind != NODE_CONV || n->x[x->in].nd->c >= LOWP_MIN_CONV_CHANNELS ? LOWP_COMPUTES : LOWP_NO;
}

enum lowp_role lowp_carries(const st_net *n, const struct xnode *x, st_dtype low)
{
    (void)n, (void)x, (void)low;
    return LOWP_CARRIES;
}

/* Layer norm computes in fp32 (its statistics need it) and writes the low
 * precision for consumers that take it, as PyTorch's autocast keeps only
 * the bf16 copy its linear layer casts: the fp32 output and the conversion
 * pass go (905 MB of gpt2 at batch 12).  Its output gradient is then low
 * too, as autocast's is.  Where the backend writes it (oneDNN's own layer
 * norm, tuning.onednn_layernorm, does not). */
enum lowp_role lowp_writes(const st_net *n, const struct xnode *x, st_dtype low)
{
    return kernels_in(n, x, low) ? LOWP_WRITES : LOWP_NO;
}

/* Attention computes in the low type where the backend's kernels do.  Its
 * edges are then low too: its products round Q, K, V and dY as they read
 * them, and its consumers and producer round Y and dQKV as they read them,
 * so an edge rounded once where written holds the same values, and the
 * conversions between the linear layers and attention go (two a block). */
enum lowp_role lowp_attention(const st_net *n, const struct xnode *x, st_dtype low)
{
    return kernels_in(n, x, low) ? LOWP_COMPUTES : LOWP_NO;
}

/* Each layer kind's rule, from the layer table's lowp column. */
static enum lowp_role (*const lowp_rules[])(const st_net *n, const struct xnode *x, st_dtype low) = {
#define LOWP_RULE(KIND, keyword, parse, init, scratch, fwd, bwd, build, lowp, ...) [NODE_##KIND] = lowp,
    NN_LAYER_TABLE(LOWP_RULE)
#undef LOWP_RULE
};
_Static_assert(sizeof lowp_rules / sizeof *lowp_rules == NODE_KINDS, "a low-precision rule per layer kind");

void nn_assign_roles(st_net *n)
{
    for (int j = 0; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        x->lowp_role = n->cfg.precision != ST_DTYPE_F32 ? lowp_rules[x->kind](n, x, n->cfg.precision) : LOWP_NO;
        x->lowp = x->lowp_role == LOWP_COMPUTES;
    }
}

/* Will node j's output be low, judged by the roles alone (not by its
 * consumers)?  For an add's other input, which may be planned after the
 * layer asking. */
static bool could_be_lowp(const st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    switch (x->lowp_role) {
    case LOWP_COMPUTES: return x->lowp;
    case LOWP_CARRIES:
        return could_be_lowp(n, x->in) && (x->in2 < 0 || could_be_lowp(n, x->in2));
    default: return false;
    }
}

/* Does consumer c take node j's output in the low precision as it is? */
static bool takes_lowp(const st_net *n, const struct xnode *c, int j)
{
    switch (c->lowp_role) {
    case LOWP_COMPUTES: return c->lowp && c->kind != NODE_HEAD;  /* the head rounds its rows per chunk */
    case LOWP_CARRIES:
        if (c->in2 < 0)
            return true;
        return could_be_lowp(n, c->in == j ? c->in2 : c->in);
    default: return false;
    }
}

bool nn_consumers_take_lowp(const st_net *n, int j)
{
    const struct xnode *x = &n->x[j];
    if ((x->lowp_role != LOWP_COMPUTES && x->lowp_role != LOWP_WRITES) || (!x->lowp && x->lowp_role == LOWP_COMPUTES) ||
        x->consumers == 0)
        return false;
    for (int c = j + 1; c < n->nx; c++)
        if ((n->x[c].in == j || n->x[c].in2 == j) && !takes_lowp(n, &n->x[c], j))
            return false;
    return true;
}

static void plan_from(st_net *n, int first)
{
    const st_dtype low = n->cfg.precision;
    for (int j = first; j < n->nx; j++) {
        struct xnode *x = &n->x[j];
        bool out = false;
        if (x->lowp_role == LOWP_CARRIES)
            out = n->x[x->in].stored == low && (x->in2 < 0 || n->x[x->in2].stored == low);
        else if (j > 0)
            out = nn_consumers_take_lowp(n, j);
        x->stored = out ? low : ST_DTYPE_F32;
        x->compute = x->lowp || (x->lowp_role == LOWP_CARRIES && out) ? low : ST_DTYPE_F32;
    }
}

void nn_plan_precision(st_net *n) { plan_from(n, 0); }

void nn_plan_fallback(st_net *n, int j)
{
    n->x[j].lowp = false;
    plan_from(n, j);
}
