/* ref_vit.c: the naive double-precision encoder forward and pooling of
 * ref_vit.h. Clarity over speed: whole-sequence buffers, straight loops. The
 * forward runs on a double copy of the weights (the arena's layout), so the
 * gradient tests can perturb any weight by amounts below f32 resolution. Every
 * family feature is written from rv_vit.h's description (the header comment),
 * never from encoder/: positions (bilinear and bicubic grids, VideoMAE's
 * sinusoid, AST's band x time grid), the activations, absent q/k/v biases,
 * layer scale, pre-norm, the optional final norm, special tokens and the
 * family's pooled output. */
#include "ref_vit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_tokens.h"

void ref_vit_time_code(double t, int dim, double *code)
{
    int half = dim / 2;
    for (int i = 0; i < dim; i++)
        code[i] = 0;
    for (int i = 0; i < half; i++) {
        /* log-spaced periods: log p_i = log pmin + i/(half-1) (log pmax - log pmin) */
        double lp = log(RV_VIT_TIME_PERIOD_MIN);
        if (half > 1)
            lp += (double)i / (half - 1) *
                  (log(RV_VIT_TIME_PERIOD_MAX) - log(RV_VIT_TIME_PERIOD_MIN));
        double w = 2.0 * M_PI / exp(lp);
        code[2 * i] = sin(w * t);
        code[2 * i + 1] = cos(w * t);
    }
}

/* ---- positions ------------------------------------------------------------------------- */

/* Source coordinate of output pixel o along one axis (torch, align_corners false);
 * linear modes clamp it at 0, the cubic one does not. */
static double src_coord(int o, int in, int out, int clamp)
{
    double s = (o + 0.5) * ((double)in / out) - 0.5;
    return clamp && s < 0 ? 0 : s;
}

/* torch's cubic convolution kernel, A = -0.75: the weights of taps floor(s) - 1 ..
 * floor(s) + 2 for the fraction t = s - floor(s). */
static void cubic_weights(double t, double wt[4])
{
    const double A = -0.75;
#define CC1(x) (((A + 2) * (x) - (A + 3)) * (x) * (x) + 1)
#define CC2(x) ((((x) - 5) * A * (x) + 8 * A) * (x) - 4 * A)
    wt[0] = CC2(t + 1);
    wt[1] = CC1(t);
    wt[2] = CC1(1 - t);
    wt[3] = CC2(2 - t);
#undef CC1
#undef CC2
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Taps and weights of output index o along one axis (in -> out samples). */
static int axis_taps(int kind, int o, int in, int out, int idx[4], double wt[4])
{
    if (kind == RV_POS_GRID_BICUBIC) {
        double s = src_coord(o, in, out, 0);
        int f = (int)floor(s);
        cubic_weights(s - f, wt);
        for (int k = 0; k < 4; k++)
            idx[k] = clampi(f - 1 + k, 0, in - 1);
        return 4;
    }
    double s = src_coord(o, in, out, 1);
    int f = (int)floor(s);
    idx[0] = f, idx[1] = f + 1 < in ? f + 1 : in - 1;
    wt[0] = 1 - (s - f), wt[1] = s - f;
    return 2;
}

/* The (sg x sg, dim) grid resampled to (dg x dg, dim), as interpolate(mode). */
static void pos_resample_d(int kind, const double *src, int sg, int dg, int dim, double *dst)
{
    for (int oy = 0; oy < dg; oy++)
        for (int ox = 0; ox < dg; ox++) {
            int iy[4], ix[4];
            double wy[4], wx[4];
            int ny = axis_taps(kind, oy, sg, dg, iy, wy), nx = axis_taps(kind, ox, sg, dg, ix, wx);
            double *o = dst + ((size_t)oy * dg + ox) * dim;
            for (int c = 0; c < dim; c++) {
                o[c] = 0;
                for (int a = 0; a < ny; a++)
                    for (int b = 0; b < nx; b++)
                        o[c] += wy[a] * wx[b] * src[((size_t)iy[a] * sg + ix[b]) * dim + c];
            }
        }
}

void ref_vit_pos_resample(const float *src, int sg, int dg, int dim, double *dst)
{
    ref_vit_pos_resample_kind(RV_POS_GRID_BILINEAR, src, sg, dg, dim, dst);
}

void ref_vit_pos_resample_kind(int kind, const float *src, int sg, int dg, int dim, double *dst)
{
    double *s = ref_dup_d(src, (size_t)sg * sg * dim);
    pos_resample_d(kind, s, sg, dg, dim, dst);
    free(s);
}

double ref_vit_sinusoid(int64_t n, int j, int dim)
{
    double a = (double)n / pow(10000.0, 2.0 * (j / 2) / dim);
    return (double)(float)(j % 2 == 0 ? sin(a) : cos(a)); /* a float table, as VideoMAE's */
}

/* AST's (bands x gt) table resampled along time to steps columns (linear,
 * align_corners false, source clamped at 0): dst (bands * steps, dim), band-major. */
static void audio_pos_resample_d(const double *src, int bands, int gt, int64_t steps, int dim,
                                 double *dst)
{
    for (int b = 0; b < bands; b++)
        for (int64_t p = 0; p < steps; p++) {
            int idx[4];
            double wt[4];
            axis_taps(RV_POS_GRID_BILINEAR, (int)p, gt, (int)steps, idx, wt);
            double *o = dst + ((size_t)b * steps + p) * dim;
            for (int c = 0; c < dim; c++)
                o[c] = wt[0] * src[((size_t)b * gt + idx[0]) * dim + c] +
                       wt[1] * src[((size_t)b * gt + idx[1]) * dim + c];
        }
}

/* ---- the forward ------------------------------------------------------------------------ */

/* The double copy of weight tensor `field` of m inside w (m's arena layout); NULL
 * for a tensor the family does not have. */
static const double *wd(const rv_vit_model *m, const double *w, const float *field)
{
    return field ? w + (field - m->arena) : NULL;
}

/* y (n) = W (n, k) x (k) + b (n). */
static void linear(const double *w, const double *b, int n, int k, const double *x, double *y)
{
    for (int i = 0; i < n; i++) {
        double s = b ? b[i] : 0;
        for (int j = 0; j < k; j++)
            s += w[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

static void layernorm(const double *w, const double *b, int n, double eps, const double *x,
                      double *y)
{
    double mean = 0, var = 0;
    for (int j = 0; j < n; j++)
        mean += x[j];
    mean /= n;
    for (int j = 0; j < n; j++)
        var += (x[j] - mean) * (x[j] - mean);
    var /= n;
    double r = 1.0 / sqrt(var + eps);
    for (int j = 0; j < n; j++)
        y[j] = (x[j] - mean) * r * w[j] + b[j];
}

int ref_vit_pos_special(const rv_vit_config *c)
{
    /* rv_vit.h: pos rows are 1 + grid*grid for ringvit (torchvision's CLS slot,
     * always), special + grid*grid for the other grids, special else. */
    return c->family == RV_FAMILY_RINGVIT ? 1 : c->cls;
}

void ref_vit_embed_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                     const uint8_t *hidden, const double *mask_token, double *x)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim, G = c->grid, Gt = all->grid, special = ref_vit_pos_special(c);
    const int grid_pos = c->pos == RV_POS_GRID_BILINEAR || c->pos == RV_POS_GRID_BICUBIC;
    const int vdim = c->tubelet * c->patch * c->patch * 3, adim = c->audio_freq * c->audio_time;
    const int bands = (RV_VIT_MEL_BINS - c->audio_freq) / c->audio_fstride + 1;
    const double *pos = wd(m, w, m->pos), *cls = wd(m, w, m->cls);
    double *code = ref_alloc_d(D), *tmp = ref_alloc_d(D);
    /* The video grid's positions at the tokens' grid (resampled when it differs). */
    double *vpos = NULL;
    if (grid_pos && all->nvideo > 0 && Gt != G) {
        vpos = ref_alloc_d((size_t)Gt * Gt * D);
        pos_resample_d(c->pos, pos + (size_t)special * D, G, Gt, D, vpos);
    }
    /* AST's grid at the sequence's time steps when it has more than the table. */
    const int gt = c->audio_grid_t;
    double *apos = NULL;
    if (c->audio_pos == RV_APOS_GRID && all->naudio > 0 && all->audio_steps > gt) {
        apos = ref_alloc_d((size_t)bands * all->audio_steps * D);
        audio_pos_resample_d(wd(m, w, m->audio_pos), bands, gt, all->audio_steps, D, apos);
    }
    int64_t vi = 0, ai = 0;
    for (int64_t i = 0; i < all->len; i++) {
        double *row = x + (size_t)i * D;
        const int64_t *p = all->pos + 3 * i;
        const int mod = all->modality[i], hide = hidden && hidden[i];
        for (int j = 0; j < D; j++)
            row[j] = 0;
        if (c->time_code) {
            ref_vit_time_code(all->seq_time[2 * i], D, code);
            linear(wd(m, w, m->time_w), NULL, D, D, code, row);
            const double *mrow = wd(m, w, m->modality) + (size_t)mod * D;
            for (int j = 0; j < D; j++)
                row[j] += mrow[j];
        }
        if (mod == RV_MOD_VIDEO) {
            double *patch = ref_dup_d(all->video + (size_t)vi++ * vdim, (size_t)vdim);
            linear(wd(m, w, m->video_w), c->patch_bias ? wd(m, w, m->video_b) : NULL, D, vdim,
                   patch, tmp);
            free(patch);
            for (int j = 0; j < D; j++) {
                double pe = 0;
                if (grid_pos)
                    pe = vpos ? vpos[((size_t)p[1] * Gt + p[2]) * D + j]
                              : pos[((size_t)special + p[1] * G + p[2]) * D + j];
                else if (c->pos == RV_POS_SINUSOID)
                    pe = ref_vit_sinusoid(p[0] * Gt * Gt + p[1] * Gt + p[2], j, D);
                row[j] += (hide ? mask_token[j] : tmp[j]) + pe;
            }
        } else if (mod == RV_MOD_AUDIO) {
            double *patch = ref_dup_d(all->audio + (size_t)ai++ * adim, (size_t)adim);
            linear(wd(m, w, m->audio_w), wd(m, w, m->audio_b), D, adim, patch, tmp);
            free(patch);
            const double *pe = NULL;
            if (c->audio_pos == RV_APOS_BAND)
                pe = wd(m, w, m->band) + (size_t)p[1] * D;
            else if (c->audio_pos == RV_APOS_GRID)
                pe = apos ? apos + ((size_t)p[1] * all->audio_steps + p[0]) * D
                          : wd(m, w, m->audio_pos) + ((size_t)p[1] * gt + p[0]) * D;
            for (int j = 0; j < D; j++)
                row[j] += (hide ? mask_token[j] : tmp[j]) + (pe ? pe[j] : 0);
        } else {
            const int64_t k = p[0]; /* 0: CLS, 1: distillation */
            for (int j = 0; j < D; j++)
                row[j] += cls[k * D + j] + (pos && k < special ? pos[k * D + j] : 0);
        }
    }
    free(vpos), free(apos), free(code), free(tmp);
}

void ref_vit_embed(const rv_vit_model *m, const rv_vit_tokens *all, double *x)
{
    double *w = ref_dup_d(m->arena, m->arena_floats);
    ref_vit_embed_w(m, w, all, NULL, NULL, x);
    free(w);
}

/* out (S, D): multi-head attention of the whole sequence, qkv (S, 3D). */
static void attention(const double *qkv, int64_t S, int D, int H, int causal, double *out)
{
    const int dh = D / H;
    const double scale = 1.0 / sqrt((double)dh);
    double *p = ref_alloc_d((size_t)S);
    for (int h = 0; h < H; h++)
        for (int64_t i = 0; i < S; i++) {
            const double *q = qkv + (size_t)i * 3 * D + (size_t)h * dh;
            int64_t nk = causal ? i + 1 : S;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < nk; j++) {
                const double *k = qkv + (size_t)j * 3 * D + D + (size_t)h * dh;
                double s = 0;
                for (int c = 0; c < dh; c++)
                    s += q[c] * k[c];
                p[j] = s * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t j = 0; j < nk; j++)
                sum += (p[j] = exp(p[j] - mx));
            double *o = out + (size_t)i * D + (size_t)h * dh;
            for (int c = 0; c < dh; c++)
                o[c] = 0;
            for (int64_t j = 0; j < nk; j++) {
                const double *v = qkv + (size_t)j * 3 * D + 2 * D + (size_t)h * dh;
                for (int c = 0; c < dh; c++)
                    o[c] += p[j] / sum * v[c];
            }
        }
    free(p);
}

void ref_vit_forward_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                       int causal, const uint8_t *hidden, const double *mask_token, double *y)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim, M = c->mlp;
    const int64_t S = all->len;
    double *x = ref_alloc_d((size_t)S * D), *h = ref_alloc_d((size_t)S * D);
    double *qkv = ref_alloc_d((size_t)S * 3 * D), *att = ref_alloc_d((size_t)S * D);
    double *hid = ref_alloc_d((size_t)M), *act = ref_alloc_d((size_t)M);
    double *tmp = ref_alloc_d((size_t)D), *qkv_b = ref_alloc_d(3 * (size_t)D);
    ref_vit_embed_w(m, w, all, hidden, mask_token, x);
    if (c->pre_norm)
        for (int64_t i = 0; i < S; i++) {
            layernorm(wd(m, w, m->pre_ln_w), wd(m, w, m->pre_ln_b), D, c->eps, x + i * D, tmp);
            memcpy(x + i * D, tmp, sizeof(double) * D);
        }
    for (int l = 0; l < c->layers; l++) {
        const rv_vit_layer *f = &m->layer[l];
        /* The biases qkv_bias names; the absent parts are zero whatever w holds. */
        const double *b = wd(m, w, f->qkv_b);
        for (int part = 0; part < 3; part++)
            for (int j = 0; j < D; j++)
                qkv_b[part * D + j] = b && (c->qkv_bias & (1 << part)) ? b[part * D + j] : 0;
        const double *ls1 = wd(m, w, f->ls1), *ls2 = wd(m, w, f->ls2);
        for (int64_t i = 0; i < S; i++) {
            layernorm(wd(m, w, f->ln1_w), wd(m, w, f->ln1_b), D, c->eps, x + i * D, h + i * D);
            linear(wd(m, w, f->qkv_w), qkv_b, 3 * D, D, h + i * D, qkv + i * 3 * D);
        }
        attention(qkv, S, D, c->heads, causal, att);
        for (int64_t i = 0; i < S; i++) {
            linear(wd(m, w, f->proj_w), wd(m, w, f->proj_b), D, D, att + i * D, tmp);
            for (int j = 0; j < D; j++)
                x[i * D + j] += (ls1 ? ls1[j] : 1.0) * tmp[j];
            layernorm(wd(m, w, f->ln2_w), wd(m, w, f->ln2_b), D, c->eps, x + i * D, h + i * D);
            linear(wd(m, w, f->fc1_w), wd(m, w, f->fc1_b), M, D, h + i * D, hid);
            ref_act_fwd((rv_act)c->act, hid, act, (size_t)M);
            linear(wd(m, w, f->fc2_w), wd(m, w, f->fc2_b), D, M, act, tmp);
            for (int j = 0; j < D; j++)
                x[i * D + j] += (ls2 ? ls2[j] : 1.0) * tmp[j];
        }
    }
    for (int64_t i = 0; i < S; i++)
        if (c->final_norm)
            layernorm(wd(m, w, m->ln_w), wd(m, w, m->ln_b), D, c->eps, x + i * D, y + i * D);
        else
            memcpy(y + i * D, x + i * D, sizeof(double) * D);
    free(x), free(h), free(qkv), free(att), free(hid), free(act), free(tmp), free(qkv_b);
}

void ref_vit_forward(const rv_vit_model *m, const rv_vit_tokens *all, int causal, double *y)
{
    double *w = ref_dup_d(m->arena, m->arena_floats);
    ref_vit_forward_w(m, w, all, causal, NULL, NULL, y);
    free(w);
}

/* ---- pooling ----------------------------------------------------------------------------- */

void ref_vit_pool(const rv_vit_tokens *all, const double *y, int dim, double segment_s,
                  double end_s, ref_vit_pooled *out)
{
    memset(out, 0, sizeof *out);
    int64_t G = (int64_t)ceil(end_s / segment_s);
    if (G < 1)
        G = 1;
    out->dim = dim;
    out->segments = G;
    out->global = ref_alloc_d((size_t)dim);
    out->segment = ref_alloc_d((size_t)G * dim);
    out->segment_start = ref_alloc_d((size_t)G);
    out->segment_end = ref_alloc_d((size_t)G);
    out->segment_tokens = calloc((size_t)G, sizeof(int64_t));
    out->modality_mean = ref_alloc_d(2 * (size_t)dim);
    out->cls = ref_alloc_d((size_t)dim);
    out->dist = ref_alloc_d((size_t)dim);
    for (int64_t i = 0; i < all->len; i++) {
        const double *row = y + (size_t)i * dim;
        int mod = all->modality[i];
        if (mod == RV_MOD_CLS) { /* special token pos[0]: 0 CLS, 1 distillation */
            int dist = all->pos[3 * i] == 1;
            *(dist ? &out->has_dist : &out->has_cls) = 1;
            for (int j = 0; j < dim; j++)
                (dist ? out->dist : out->cls)[j] = row[j];
            continue;
        }
        /* The window holding the start time; past the last window: the last. */
        int64_t g = 0;
        while (g + 1 < G && all->seq_time[2 * i] >= (g + 1) * segment_s)
            g++;
        out->tokens++;
        out->segment_tokens[g]++;
        out->modality_tokens[mod]++;
        for (int j = 0; j < dim; j++) {
            out->global[j] += row[j];
            out->segment[g * dim + j] += row[j];
            out->modality_mean[mod * dim + j] += row[j];
        }
    }
    for (int j = 0; j < dim; j++) {
        if (out->tokens)
            out->global[j] /= out->tokens;
        for (int mod = 0; mod < 2; mod++)
            if (out->modality_tokens[mod])
                out->modality_mean[mod * dim + j] /= out->modality_tokens[mod];
        for (int64_t g = 0; g < G; g++)
            if (out->segment_tokens[g])
                out->segment[g * dim + j] /= out->segment_tokens[g];
    }
    for (int64_t g = 0; g < G; g++) {
        out->segment_start[g] = g * segment_s;
        out->segment_end[g] = g == G - 1 ? end_s : fmin((g + 1) * segment_s, end_s);
    }
}

int ref_vit_pool_head(const rv_vit_model *m, ref_vit_pooled *p)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim;
    free(p->pooled), free(p->projected);
    p->pooled = ref_alloc_d((size_t)D);
    p->projected = NULL;
    p->proj_dim = 0;
    double *in = ref_alloc_d((size_t)D), *w = NULL, *b = NULL;
    int ok = 1;
    switch (c->pool) {
    case RV_POOL_CLS:
    case RV_POOL_CLS_NORM:
    case RV_POOL_CLS_TANH:
        ok = p->has_cls;
        memcpy(in, p->cls, sizeof(double) * D);
        break;
    case RV_POOL_CLS_DIST:
        ok = p->has_cls && p->has_dist;
        for (int j = 0; j < D; j++)
            in[j] = 0.5 * (p->cls[j] + p->dist[j]);
        break;
    case RV_POOL_MEAN_NORM:
    case RV_POOL_MEAN:
        memcpy(in, p->global, sizeof(double) * D);
        break;
    default:
        ok = 0;
    }
    if (c->pool == RV_POOL_CLS_NORM || c->pool == RV_POOL_MEAN_NORM) {
        w = ref_dup_d(m->pool_ln_w, (size_t)D), b = ref_dup_d(m->pool_ln_b, (size_t)D);
        layernorm(w, b, D, c->pool_eps, in, p->pooled);
    } else if (c->pool == RV_POOL_CLS_TANH) {
        w = ref_dup_d(m->pooler_w, (size_t)D * D), b = ref_dup_d(m->pooler_b, (size_t)D);
        linear(w, b, D, D, in, p->pooled);
        for (int j = 0; j < D; j++)
            p->pooled[j] = tanh(p->pooled[j]);
    } else {
        memcpy(p->pooled, in, sizeof(double) * D);
    }
    if (c->proj_dim > 0) {
        double *pw = ref_dup_d(m->proj_w, (size_t)c->proj_dim * D);
        p->proj_dim = c->proj_dim;
        p->projected = ref_alloc_d((size_t)c->proj_dim);
        linear(pw, NULL, c->proj_dim, D, p->pooled, p->projected);
        free(pw);
    }
    free(in), free(w), free(b);
    return ok;
}

void ref_vit_pooled_free(ref_vit_pooled *p)
{
    free(p->global), free(p->segment), free(p->segment_start), free(p->segment_end);
    free(p->segment_tokens), free(p->modality_mean), free(p->cls), free(p->dist);
    free(p->pooled), free(p->projected);
    memset(p, 0, sizeof *p);
}
