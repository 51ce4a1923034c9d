/* ref_vit.c: the naive double-precision encoder forward and pooling of
 * ref_vit.h. Clarity over speed: whole-sequence buffers, straight loops. The
 * forward runs on a double copy of the weights (the arena's layout), so the
 * gradient tests can perturb any weight by amounts below f32 resolution. */
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

/* Source coordinate of output pixel o along one axis (torch, align_corners false). */
static double src_coord(int o, int in, int out)
{
    double s = (o + 0.5) * ((double)in / out) - 0.5;
    return s < 0 ? 0 : s;
}

static void pos_resample_d(const double *src, int sg, int dg, int dim, double *dst)
{
    for (int oy = 0; oy < dg; oy++)
        for (int ox = 0; ox < dg; ox++) {
            double sy = src_coord(oy, sg, dg), sx = src_coord(ox, sg, dg);
            int y0 = (int)floor(sy), x0 = (int)floor(sx);
            int y1 = y0 + 1 < sg ? y0 + 1 : sg - 1, x1 = x0 + 1 < sg ? x0 + 1 : sg - 1;
            double ly = sy - y0, lx = sx - x0;
            double wts[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
            int idx[4] = {y0 * sg + x0, y0 * sg + x1, y1 * sg + x0, y1 * sg + x1};
            double *o = dst + ((size_t)oy * dg + ox) * dim;
            for (int c = 0; c < dim; c++) {
                o[c] = 0;
                for (int j = 0; j < 4; j++)
                    o[c] += wts[j] * src[(size_t)idx[j] * dim + c];
            }
        }
}

void ref_vit_pos_resample(const float *src, int sg, int dg, int dim, double *dst)
{
    double *s = ref_dup_d(src, (size_t)sg * sg * dim);
    pos_resample_d(s, sg, dg, dim, dst);
    free(s);
}

/* The double copy of weight tensor `field` of m inside w (m's arena layout). */
static const double *wd(const rv_vit_model *m, const double *w, const float *field)
{
    return w + (field - m->arena);
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

void ref_vit_embed_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                     const uint8_t *hidden, const double *mask_token, double *x)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim, G = c->grid;
    const int vdim = c->tubelet * c->patch * c->patch * 3, adim = c->audio_freq * c->audio_time;
    const double *pos = wd(m, w, m->pos), *cls = wd(m, w, m->cls), *band = wd(m, w, m->band);
    double *code = ref_alloc_d(D), *tmp = ref_alloc_d(D);
    double *rpos = NULL;
    if (all->nvideo > 0 && all->grid != G) {
        rpos = ref_alloc_d((size_t)all->grid * all->grid * D);
        pos_resample_d(pos + D, G, all->grid, D, rpos);
    }
    int64_t vi = 0, ai = 0;
    for (int64_t i = 0; i < all->len; i++) {
        double *row = x + (size_t)i * D;
        const int64_t *p = all->pos + 3 * i;
        ref_vit_time_code(all->time[2 * i], D, code);
        linear(wd(m, w, m->time_w), NULL, D, D, code, row);
        int mod = all->modality[i];
        int hide = hidden && hidden[i];
        const double *mrow = wd(m, w, m->modality) + (size_t)mod * D;
        if (mod == RV_MOD_VIDEO) {
            double *patch = ref_dup_d(all->video + (size_t)vi++ * vdim, (size_t)vdim);
            linear(wd(m, w, m->video_w), wd(m, w, m->video_b), D, vdim, patch, tmp);
            free(patch);
            for (int j = 0; j < D; j++) {
                double pe = rpos ? rpos[((size_t)p[1] * all->grid + p[2]) * D + j]
                                 : pos[(1 + (size_t)p[1] * G + p[2]) * D + j];
                row[j] += (hide ? mask_token[j] : tmp[j]) + pe + mrow[j];
            }
        } else if (mod == RV_MOD_AUDIO) {
            double *patch = ref_dup_d(all->audio + (size_t)ai++ * adim, (size_t)adim);
            linear(wd(m, w, m->audio_w), wd(m, w, m->audio_b), D, adim, patch, tmp);
            free(patch);
            for (int j = 0; j < D; j++)
                row[j] += (hide ? mask_token[j] : tmp[j]) + band[(size_t)p[1] * D + j] + mrow[j];
        } else {
            for (int j = 0; j < D; j++)
                row[j] += cls[j] + pos[j] + mrow[j];
        }
    }
    free(rpos), free(code), free(tmp);
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
    double *hid = ref_alloc_d((size_t)M), *tmp = ref_alloc_d((size_t)D);
    ref_vit_embed_w(m, w, all, hidden, mask_token, x);
    for (int l = 0; l < c->layers; l++) {
        const rv_vit_layer *f = &m->layer[l];
        for (int64_t i = 0; i < S; i++) {
            layernorm(wd(m, w, f->ln1_w), wd(m, w, f->ln1_b), D, c->eps, x + i * D, h + i * D);
            linear(wd(m, w, f->qkv_w), wd(m, w, f->qkv_b), 3 * D, D, h + i * D, qkv + i * 3 * D);
        }
        attention(qkv, S, D, c->heads, causal, att);
        for (int64_t i = 0; i < S; i++) {
            linear(wd(m, w, f->proj_w), wd(m, w, f->proj_b), D, D, att + i * D, tmp);
            for (int j = 0; j < D; j++)
                x[i * D + j] += tmp[j];
            layernorm(wd(m, w, f->ln2_w), wd(m, w, f->ln2_b), D, c->eps, x + i * D, h + i * D);
            linear(wd(m, w, f->fc1_w), wd(m, w, f->fc1_b), M, D, h + i * D, hid);
            for (int j = 0; j < M; j++)
                hid[j] = 0.5 * hid[j] * (1.0 + erf(hid[j] / sqrt(2.0)));
            linear(wd(m, w, f->fc2_w), wd(m, w, f->fc2_b), D, M, hid, tmp);
            for (int j = 0; j < D; j++)
                x[i * D + j] += tmp[j];
        }
    }
    for (int64_t i = 0; i < S; i++)
        layernorm(wd(m, w, m->ln_w), wd(m, w, m->ln_b), D, c->eps, x + i * D, y + i * D);
    free(x), free(h), free(qkv), free(att), free(hid), free(tmp);
}

void ref_vit_forward(const rv_vit_model *m, const rv_vit_tokens *all, int causal, double *y)
{
    double *w = ref_dup_d(m->arena, m->arena_floats);
    ref_vit_forward_w(m, w, all, causal, NULL, NULL, y);
    free(w);
}

void ref_vit_pool(const rv_vit_tokens *all, const double *y, int dim, double segment_s,
                  double end_s, ref_vit_pooled *out)
{
    memset(out, 0, sizeof *out);
    int64_t G = (int64_t)ceil(end_s / segment_s);
    if (G < 1)
        G = 1;
    out->segments = G;
    out->global = ref_alloc_d((size_t)dim);
    out->segment = ref_alloc_d((size_t)G * dim);
    out->segment_start = ref_alloc_d((size_t)G);
    out->segment_end = ref_alloc_d((size_t)G);
    out->segment_tokens = calloc((size_t)G, sizeof(int64_t));
    out->modality_mean = ref_alloc_d(2 * (size_t)dim);
    out->cls = ref_alloc_d((size_t)dim);
    for (int64_t i = 0; i < all->len; i++) {
        const double *row = y + (size_t)i * dim;
        int mod = all->modality[i];
        if (mod == RV_MOD_CLS) {
            out->has_cls = 1;
            for (int j = 0; j < dim; j++)
                out->cls[j] = row[j];
            continue;
        }
        /* The window holding the start time; past the last window: the last. */
        int64_t g = 0;
        while (g + 1 < G && all->time[2 * i] >= (g + 1) * segment_s)
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

void ref_vit_pooled_free(ref_vit_pooled *p)
{
    free(p->global), free(p->segment), free(p->segment_start), free(p->segment_end);
    free(p->segment_tokens), free(p->modality_mean), free(p->cls);
    memset(p, 0, sizeof *p);
}
