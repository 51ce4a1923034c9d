/* vit_resample.c: the resampling of stored position tables (vit_internal.h),
 * as torch.nn.functional.interpolate does it with align_corners = false:
 *   bilinear  source coordinate s = (o + 0.5) * in / out - 0.5, clamped at 0;
 *             taps floor(s) and floor(s) + 1 (clamped to the last), weights
 *             1 - f and f (f = s - floor(s));
 *   bicubic   the same s without the clamp; taps floor(s) - 1 .. floor(s) + 2
 *             (each clamped into [0, in)), Keys' cubic convolution weights with
 *             A = -0.75 (torch's upsample_bicubic2d);
 * separably over rows and columns for the spatial grid, and along time only
 * for AST's band x time grid. Weights in double. Each resampling is a linear
 * map, and its transpose (for the gradient of the stored table) is built from
 * the same taps, so the two cannot disagree. VideoMAE's fixed sinusoid
 * positions are here too. */
#include <math.h>

#include "vit_internal.h"

#define CUBIC_A (-0.75)

int vit_taps(int o, int in, int out, int cubic, int idx[4], double w[4])
{
    double s = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    if (!cubic) {
        if (s < 0)
            s = 0;
        int a = (int)s;
        if (a > in - 1)
            a = in - 1;
        idx[0] = a;
        idx[1] = a < in - 1 ? a + 1 : a;
        w[1] = s - a;
        w[0] = 1.0 - w[1];
        return 2;
    }
    double fl = floor(s), t = s - fl;
    const double A = CUBIC_A;
    /* cubic_convolution2 for |x| in [1, 2), cubic_convolution1 for |x| < 1 */
    double x0 = t + 1.0, x1 = t, x2 = 1.0 - t, x3 = 2.0 - t;
    w[0] = ((A * x0 - 5.0 * A) * x0 + 8.0 * A) * x0 - 4.0 * A;
    w[1] = ((A + 2.0) * x1 - (A + 3.0)) * x1 * x1 + 1.0;
    w[2] = ((A + 2.0) * x2 - (A + 3.0)) * x2 * x2 + 1.0;
    w[3] = ((A * x3 - 5.0 * A) * x3 + 8.0 * A) * x3 - 4.0 * A;
    for (int k = 0; k < 4; k++) {
        int i = (int)fl - 1 + k;
        idx[k] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
    }
    return 4;
}

void vit_grid_resample(const float *src, int sg, int dg, int dim, int cubic, float *dst)
{
    for (int y = 0; y < dg; y++) {
        int iy[4], ix[4];
        double wy[4], wx[4];
        int ny = vit_taps(y, sg, dg, cubic, iy, wy);
        for (int x = 0; x < dg; x++) {
            int nx = vit_taps(x, sg, dg, cubic, ix, wx);
            float *o = dst + ((size_t)y * dg + x) * dim;
            for (int j = 0; j < dim; j++) {
                double acc = 0;
                for (int a = 0; a < ny; a++) {
                    double row = 0;
                    for (int b = 0; b < nx; b++)
                        row += wx[b] * src[((size_t)iy[a] * sg + ix[b]) * dim + j];
                    acc += wy[a] * row;
                }
                o[j] = (float)acc;
            }
        }
    }
}

void vit_grid_resample_bwd(const double *ddst, int sg, int dg, int dim, int cubic, double *dsrc)
{
    for (int y = 0; y < dg; y++) {
        int iy[4], ix[4];
        double wy[4], wx[4];
        int ny = vit_taps(y, sg, dg, cubic, iy, wy);
        for (int x = 0; x < dg; x++) {
            int nx = vit_taps(x, sg, dg, cubic, ix, wx);
            const double *g = ddst + ((size_t)y * dg + x) * dim;
            for (int a = 0; a < ny; a++)
                for (int b = 0; b < nx; b++) {
                    double w = wy[a] * wx[b];
                    double *o = dsrc + ((size_t)iy[a] * sg + ix[b]) * dim;
                    for (int j = 0; j < dim; j++)
                        o[j] += w * g[j];
                }
        }
    }
}

int vit_time_taps(int64_t p, int64_t steps, int grid_t, int64_t idx[2], double w[2])
{
    if (steps <= grid_t) { /* the stored columns as they are (AST cuts them) */
        idx[0] = p;
        w[0] = 1.0;
        return 1;
    }
    /* linear along time, align_corners false, as interpolate(size=(bands, steps),
     * mode="bilinear") does with the band axis unchanged */
    double s = ((double)p + 0.5) * (double)grid_t / (double)steps - 0.5;
    if (s < 0)
        s = 0;
    int64_t a = (int64_t)s;
    if (a > grid_t - 1)
        a = grid_t - 1;
    idx[0] = a;
    idx[1] = a < grid_t - 1 ? a + 1 : a;
    w[1] = s - (double)a;
    w[0] = 1.0 - w[1];
    return 2;
}

void vit_sinusoid_denoms(int dim, double *den)
{
    /* VideoMAE's get_sinusoid_encoding_table divides position n by
     * 10000^(2 floor(j/2) / D) for channel j. */
    for (int j = 0; j < dim; j++)
        den[j] = pow(10000.0, 2.0 * (double)(j / 2) / (double)dim);
}

void vit_sinusoid_add(int64_t n, int dim, const double *den, float *x)
{
    /* sin on even channels, cos on odd ones, in double, rounded to float as the
     * table is stored before it is added */
    for (int j = 0; j < dim; j++) {
        double angle = (double)n / den[j];
        x[j] += (float)(j % 2 ? cos(angle) : sin(angle));
    }
}

void vit_pos_resample(const rv_vit_model *m, int dg, float *dst)
{
    const rv_vit_config *c = &m->cfg;
    vit_grid_resample(m->pos + (size_t)rv_vit_pos_special(c) * c->dim, c->grid, dg, c->dim,
                      c->pos == RV_POS_GRID_BICUBIC, dst);
}
