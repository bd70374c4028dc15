/* Plain-C reference kernels of the sequence layers (layer norm, GELU,
 * embeddings, causal attention): the definition the fast paths are tested
 * against.  Sums run in double, loops in the plain order of the math. */
#include <math.h>
#include <string.h>

#include "ref.h"

void ref_ln_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma, const float *beta,
                int rows, int c, float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * c;
        double m = 0, v = 0;
        for (int i = 0; i < c; i++)
            m += xr[i];
        m /= c;
        for (int i = 0; i < c; i++)
            v += (xr[i] - m) * (xr[i] - m);
        v /= c;
        const double s = 1.0 / sqrt(v + eps);
        for (int i = 0; i < c; i++)
            y[(size_t)r * c + i] = (float)((xr[i] - m) * s * gamma[i] + beta[i]);
        mean[r] = (float)m;
        rstd[r] = (float)s;
    }
}

void ref_ln_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x, const float *mean,
                const float *rstd, const float *gamma, int rows, int c)
{
    for (int i = 0; i < c; i++) {
        double g = 0, b = 0;
        for (int r = 0; r < rows; r++) {
            const double xhat = (x[(size_t)r * c + i] - mean[r]) * (double)rstd[r];
            g += dy[(size_t)r * c + i] * xhat;
            b += dy[(size_t)r * c + i];
        }
        dgamma[i] = (float)g;
        dbeta[i] = (float)b;
    }
    for (int r = 0; dx && r < rows; r++) {
        const float *xr = x + (size_t)r * c, *dr = dy + (size_t)r * c;
        double mean_d = 0, mean_dx = 0;  /* of dxhat, and of dxhat * xhat */
        for (int i = 0; i < c; i++) {
            const double xhat = (xr[i] - mean[r]) * (double)rstd[r], d = (double)dr[i] * gamma[i];
            mean_d += d;
            mean_dx += d * xhat;
        }
        mean_d /= c;
        mean_dx /= c;
        for (int i = 0; i < c; i++) {
            const double xhat = (xr[i] - mean[r]) * (double)rstd[r], d = (double)dr[i] * gamma[i];
            dx[(size_t)r * c + i] = (float)(rstd[r] * (d - mean_d - xhat * mean_dx));
        }
    }
}

#define GELU_K 0.7978845608028654 /* sqrt(2 / pi) */

void ref_gelu_fwd(float *y, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const double v = x[i];
        y[i] = (float)(0.5 * v * (1.0 + tanh(GELU_K * (v + 0.044715 * v * v * v))));
    }
}

void ref_gelu_bwd(float *dx, const float *dy, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const double v = x[i], th = tanh(GELU_K * (v + 0.044715 * v * v * v));
        const double d = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * GELU_K * (1.0 + 3 * 0.044715 * v * v);
        dx[i] = (float)(dy[i] * d);
    }
}

void ref_embed_fwd(float *y, const int *ids, const float *wte, const float *wpe, int n, int t, int c)
{
    for (int b = 0; b < n; b++)
        for (int p = 0; p < t; p++) {
            const float *e = wte + (size_t)ids[b * t + p] * c, *q = wpe + (size_t)p * c;
            float *out = y + ((size_t)b * t + p) * c;
            for (int i = 0; i < c; i++)
                out[i] = e[i] + q[i];
        }
}

void ref_embed_bwd(float *dwte, float *dwpe, const float *dy, const int *ids, int n, int t, int c)
{
    for (int p = 0; p < t; p++)
        for (int i = 0; i < c; i++) {
            double acc = 0;
            for (int b = 0; b < n; b++)
                acc += dy[((size_t)b * t + p) * c + i];
            dwpe[(size_t)p * c + i] = (float)acc;
        }
    for (int b = 0; b < n; b++)
        for (int p = 0; p < t; p++) {
            const float *d = dy + ((size_t)b * t + p) * c;
            float *e = dwte + (size_t)ids[b * t + p] * c;
            for (int i = 0; i < c; i++)
                e[i] += d[i];
        }
}

/* v as a rounding type `low` carries it (fp32: itself). */
static inline double as_low(double v, st_dtype low)
{
    if (low == ST_DTYPE_F32)
        return v;
    float f = (float)v;
    st_dtype_round_n(&f, low, 1);
    return f;
}

/* The dot product of len values of a and b, each as `low` carries it. */
static double dot(const float *a, const float *b, int len, st_dtype low)
{
    double s = 0;
    if (low == ST_DTYPE_F32)
        for (int i = 0; i < len; i++)
            s += (double)a[i] * b[i];
    else
        for (int i = 0; i < len; i++)
            s += as_low(a[i], low) * as_low(b[i], low);
    return s;
}

void ref_attention_fwd(float *y, float *att, const float *qkv, int n, int t, int c, int heads, st_dtype low)
{
    const int hs = c / heads;
    const double scale = 1.0 / sqrt((double)hs);
    const size_t row = 3 * (size_t)c;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < t; i++) {
                const float *q = qkv + ((size_t)b * t + i) * row + (size_t)h * hs;
                float *a = att + (((size_t)b * heads + h) * t + i) * t;
                double mx = -INFINITY, sum = 0;
                double s[t];
                for (int j = 0; j <= i; j++) {
                    s[j] = dot(q, qkv + ((size_t)b * t + j) * row + c + (size_t)h * hs, hs, low) * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    sum += (s[j] = exp(s[j] - mx));
                for (int j = 0; j < t; j++)
                    a[j] = j <= i ? (float)(s[j] / sum) : 0.0f;
                float *out = y + ((size_t)b * t + i) * c + (size_t)h * hs;
                for (int d = 0; d < hs; d++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++)
                        acc += as_low(a[j], low) *
                               as_low(qkv[((size_t)b * t + j) * row + 2 * (size_t)c + (size_t)h * hs + d], low);
                    out[d] = (float)acc;
                }
            }
}

/* Per query row: dV += P^T dY, through the softmax to the scores' gradient
 * dS (scaled, then taken as `low` carries it), dQ += dS K, dK += dS^T Q. */
void ref_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, int n, int t, int c,
                       int heads, st_dtype low)
{
    const int hs = c / heads;
    const double scale = 1.0 / sqrt((double)hs);
    const size_t row = 3 * (size_t)c;
    memset(dqkv, 0, (size_t)n * t * row * sizeof(float));
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < t; i++) {
                const float *a = att + (((size_t)b * heads + h) * t + i) * t;
                const float *g = dy + ((size_t)b * t + i) * c + (size_t)h * hs;
                const float *q = qkv + ((size_t)b * t + i) * row + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * t + i) * row + (size_t)h * hs;
                double da[t], inner = 0;
                for (int j = 0; j <= i; j++) {  /* d(loss)/d(weight j), and through v */
                    const size_t vj = ((size_t)b * t + j) * row + 2 * (size_t)c + (size_t)h * hs;
                    da[j] = dot(g, qkv + vj, hs, low);
                    inner += da[j] * a[j];
                    for (int d = 0; d < hs; d++)
                        dqkv[vj + d] += (float)(as_low(a[j], low) * as_low(g[d], low));
                }
                for (int j = 0; j <= i; j++) {  /* through the softmax to the scores, then q and k */
                    const double ds = as_low(a[j] * (da[j] - inner) * scale, low);
                    const size_t kj = ((size_t)b * t + j) * row + c + (size_t)h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += (float)(ds * as_low(qkv[kj + d], low));
                        dqkv[kj + d] += (float)(ds * as_low(q[d], low));
                    }
                }
            }
}
