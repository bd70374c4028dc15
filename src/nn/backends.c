/* The backends' registry, above the net: the one place a backend is named
 * (st_backend -> struct nn_backend), and the public entrances that pick
 * one.  The net (net.c, precision.c) asks the backend it was given and
 * knows no backend by name; the backends know the net. */
#include "net.h"

extern const struct nn_backend nn_reference_backend, nn_onednn_backend;

/* Indexed by st_backend; a backend missing here is a build error. */
static const struct nn_backend *const nn_backends[] = {
    [ST_BACKEND_ONEDNN] = &nn_onednn_backend,
    [ST_BACKEND_REFERENCE] = &nn_reference_backend,
};
_Static_assert(sizeof nn_backends / sizeof *nn_backends == ST_BACKEND_REFERENCE + 1,
               "every st_backend has an entry in nn_backends");

static const struct nn_backend *backend_of(st_backend b)
{
    return (size_t)b < sizeof nn_backends / sizeof *nn_backends ? nn_backends[b] : NULL;
}

st_status st_nn_precision_check(st_dtype precision, st_backend backend, const st_nn_tuning *t)
{
    if (precision == ST_DTYPE_F32)
        return ST_OK;
    if (!st_dtype_is_rounding(precision))
        return st_fail(ST_ERR_INVALID, "precision %s: a net computes in fp32, bf16 or fp16", st_dtype_name(precision));
    const struct nn_backend *b = backend_of(backend);
    if (!b)
        return st_fail(ST_ERR_INVALID, "net: unknown backend %d", (int)backend);
    return b->takes(precision, t);
}

st_status st_net_create(st_net **out, const st_model *m, const st_net_config *cfg)
{
    *out = NULL;
    if (!m || !cfg || cfg->batch < 1)
        return st_fail(ST_ERR_INVALID, "net: batch size must be at least 1");
    const struct nn_backend *b = backend_of(cfg->backend);
    if (!b)
        return st_fail(ST_ERR_INVALID, "net: unknown backend %d", (int)cfg->backend);
    st_status st = st_nn_precision_check(cfg->precision, cfg->backend, &cfg->tuning);
    return st != ST_OK ? st : nn_net_create(out, m, cfg, b);
}
