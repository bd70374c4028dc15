#include "ref.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define X4(a, i, j, k, l, C, H, W) (a)[(((size_t)(i) * (C) + (j)) * (H) + (k)) * (W) + (l)]

void ref_conv_fwd(float *y, const float *x, const float *w, const float *b, const struct conv_shape *cs)
{
    for (int n = 0; n < cs->n; n++)
        for (int o = 0; o < cs->o; o++)
            for (int oy = 0; oy < cs->oh; oy++)
                for (int ox = 0; ox < cs->ow; ox++) {
                    double acc = b ? b[o] : 0.0;
                    for (int c = 0; c < cs->c; c++)
                        for (int ky = 0; ky < cs->kh; ky++) {
                            int iy = oy * cs->s - cs->p + ky;
                            if (iy < 0 || iy >= cs->h)
                                continue;
                            for (int kx = 0; kx < cs->kw; kx++) {
                                int ix = ox * cs->s - cs->p + kx;
                                if (ix < 0 || ix >= cs->w)
                                    continue;
                                acc += (double)X4(x, n, c, iy, ix, cs->c, cs->h, cs->w) *
                                       X4(w, o, c, ky, kx, cs->c, cs->kh, cs->kw);
                            }
                        }
                    X4(y, n, o, oy, ox, cs->o, cs->oh, cs->ow) = (float)acc;
                }
}

void ref_conv_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                  const struct conv_shape *cs)
{
    if (dx)
        memset(dx, 0, sizeof(float) * (size_t)cs->n * cs->c * cs->h * cs->w);
    if (dw)
        memset(dw, 0, sizeof(float) * (size_t)cs->o * cs->c * cs->kh * cs->kw);
    if (db)
        memset(db, 0, sizeof(float) * (size_t)cs->o);
    for (int n = 0; n < cs->n; n++)
        for (int o = 0; o < cs->o; o++)
            for (int oy = 0; oy < cs->oh; oy++)
                for (int ox = 0; ox < cs->ow; ox++) {
                    float g = X4(dy, n, o, oy, ox, cs->o, cs->oh, cs->ow);
                    if (db)
                        db[o] += g;
                    for (int c = 0; c < cs->c; c++)
                        for (int ky = 0; ky < cs->kh; ky++) {
                            int iy = oy * cs->s - cs->p + ky;
                            if (iy < 0 || iy >= cs->h)
                                continue;
                            for (int kx = 0; kx < cs->kw; kx++) {
                                int ix = ox * cs->s - cs->p + kx;
                                if (ix < 0 || ix >= cs->w)
                                    continue;
                                if (dw)
                                    X4(dw, o, c, ky, kx, cs->c, cs->kh, cs->kw) +=
                                        g * X4(x, n, c, iy, ix, cs->c, cs->h, cs->w);
                                if (dx)
                                    X4(dx, n, c, iy, ix, cs->c, cs->h, cs->w) +=
                                        g * X4(w, o, c, ky, kx, cs->c, cs->kh, cs->kw);
                            }
                        }
                }
}

void ref_linear_fwd(float *y, const float *x, const float *w, const float *b, int n, int in, int out)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double acc = b ? b[o] : 0.0;
            for (int k = 0; k < in; k++)
                acc += (double)x[(size_t)i * in + k] * w[(size_t)o * in + k];
            y[(size_t)i * out + o] = (float)acc;
        }
}

void ref_linear_bwd(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                    int n, int in, int out)
{
    for (int o = 0; o < out; o++) {
        if (db) {
            double acc = 0;
            for (int i = 0; i < n; i++)
                acc += dy[(size_t)i * out + o];
            db[o] = (float)acc;
        }
        for (int k = 0; dw && k < in; k++) {
            double acc = 0;
            for (int i = 0; i < n; i++)
                acc += (double)dy[(size_t)i * out + o] * x[(size_t)i * in + k];
            dw[(size_t)o * in + k] = (float)acc;
        }
    }
    for (int i = 0; dx && i < n; i++)
        for (int k = 0; k < in; k++) {
            double acc = 0;
            for (int o = 0; o < out; o++)
                acc += (double)dy[(size_t)i * out + o] * w[(size_t)o * in + k];
            dx[(size_t)i * in + k] = (float)acc;
        }
}

void ref_relu_fwd(float *y, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        y[i] = x[i] > 0 ? x[i] : 0;
}

void ref_relu_bwd(float *dx, const float *dy, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dx[i] = x[i] > 0 ? dy[i] : 0;
}

void ref_maxpool_fwd(float *y, int *argmax, const float *x, const struct conv_shape *ps)
{
    for (int n = 0; n < ps->n; n++)
        for (int c = 0; c < ps->c; c++)
            for (int oy = 0; oy < ps->oh; oy++)
                for (int ox = 0; ox < ps->ow; ox++) {
                    float best = -FLT_MAX;
                    int at = -1;
                    for (int ky = 0; ky < ps->kh; ky++)
                        for (int kx = 0; kx < ps->kw; kx++) {
                            int iy = oy * ps->s - ps->p + ky, ix = ox * ps->s - ps->p + kx;
                            if (iy < 0 || iy >= ps->h || ix < 0 || ix >= ps->w)
                                continue;
                            size_t idx = (((size_t)n * ps->c + c) * ps->h + iy) * ps->w + ix;
                            if (at < 0 || x[idx] > best) {
                                best = x[idx];
                                at = (int)idx;
                            }
                        }
                    size_t o = (((size_t)n * ps->c + c) * ps->oh + oy) * ps->ow + ox;
                    y[o] = best;
                    argmax[o] = at;
                }
}

void ref_maxpool_bwd(float *dx, const float *dy, const int *argmax, const struct conv_shape *ps)
{
    memset(dx, 0, sizeof(float) * (size_t)ps->n * ps->c * ps->h * ps->w);
    size_t outs = (size_t)ps->n * ps->c * ps->oh * ps->ow;
    for (size_t o = 0; o < outs; o++)
        dx[argmax[o]] += dy[o];
}

void ref_avgpool_fwd(float *y, const float *x, const struct conv_shape *ps)
{
    const float area = (float)(ps->kh * ps->kw);
    for (int n = 0; n < ps->n; n++)
        for (int c = 0; c < ps->c; c++)
            for (int oy = 0; oy < ps->oh; oy++)
                for (int ox = 0; ox < ps->ow; ox++) {
                    double acc = 0;
                    for (int ky = 0; ky < ps->kh; ky++)
                        for (int kx = 0; kx < ps->kw; kx++) {
                            int iy = oy * ps->s - ps->p + ky, ix = ox * ps->s - ps->p + kx;
                            if (iy >= 0 && iy < ps->h && ix >= 0 && ix < ps->w)
                                acc += X4(x, n, c, iy, ix, ps->c, ps->h, ps->w);
                        }
                    X4(y, n, c, oy, ox, ps->c, ps->oh, ps->ow) = (float)(acc / area);
                }
}

void ref_avgpool_bwd(float *dx, const float *dy, const struct conv_shape *ps)
{
    const float area = (float)(ps->kh * ps->kw);
    memset(dx, 0, sizeof(float) * (size_t)ps->n * ps->c * ps->h * ps->w);
    for (int n = 0; n < ps->n; n++)
        for (int c = 0; c < ps->c; c++)
            for (int oy = 0; oy < ps->oh; oy++)
                for (int ox = 0; ox < ps->ow; ox++) {
                    float g = X4(dy, n, c, oy, ox, ps->c, ps->oh, ps->ow) / area;
                    for (int ky = 0; ky < ps->kh; ky++)
                        for (int kx = 0; kx < ps->kw; kx++) {
                            int iy = oy * ps->s - ps->p + ky, ix = ox * ps->s - ps->p + kx;
                            if (iy >= 0 && iy < ps->h && ix >= 0 && ix < ps->w)
                                X4(dx, n, c, iy, ix, ps->c, ps->h, ps->w) += g;
                        }
                }
}

void ref_bn_fwd_train(float *y, float *mean, float *var, const float *x, const float *gamma,
                      const float *beta, int n, int c, int hw, float eps)
{
    const double m = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double s = 0, s2 = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++)
                s += x[((size_t)i * c + ch) * hw + j];
        double mu = s / m;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                double d = x[((size_t)i * c + ch) * hw + j] - mu;
                s2 += d * d;
            }
        mean[ch] = (float)mu;
        var[ch] = (float)(s2 / m);
    }
    ref_bn_fwd_infer(y, x, gamma, beta, mean, var, n, c, hw, eps);
}

void ref_bn_fwd_infer(float *y, const float *x, const float *gamma, const float *beta,
                      const float *mean, const float *var, int n, int c, int hw, float eps)
{
    for (int ch = 0; ch < c; ch++) {
        float inv = 1.0f / sqrtf(var[ch] + eps);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                y[k] = gamma[ch] * (x[k] - mean[ch]) * inv + beta[ch];
            }
    }
}

void ref_bn_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                const float *mean, const float *var, const float *gamma, int n, int c, int hw, float eps)
{
    const double m = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double inv = 1.0 / sqrt((double)var[ch] + eps), sdy = 0, sdyx = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                sdy += dy[k];
                sdyx += dy[k] * (x[k] - mean[ch]) * inv;
            }
        if (dgamma)
            dgamma[ch] = (float)sdyx;
        if (dbeta)
            dbeta[ch] = (float)sdy;
        for (int i = 0; dx && i < n; i++)
            for (int j = 0; j < hw; j++) {
                size_t k = ((size_t)i * c + ch) * hw + j;
                double xhat = (x[k] - mean[ch]) * inv;
                dx[k] = (float)(gamma[ch] * inv * (dy[k] - sdy / m - xhat * sdyx / m));
            }
    }
}
