/* vit_embed.c: the token embedding of one rank's slice (rv_vit.h):
 *   video:  video_w @ patch + video_b + pos[1 + spatial(y, x)] + time(t) + modality[0]
 *   audio:  audio_w @ patch + audio_b + band[b] + time(t) + modality[1]
 *   CLS:    cls + pos[0] + time(t) + modality[2]
 * The projections are two GEMMs (all video rows, all audio rows) whose results
 * are scattered into token order; the temporal term is one GEMM over the
 * (len, D) time codes, so audio and video at the same start time get the same
 * contribution. Hidden tokens (the masked-reconstruction task) get the mask
 * token in place of their projection. The fixed sinusoid code, the bilinear
 * resampling of the stored position grid and its transpose (for the backward)
 * live here too. */
#include <math.h>
#include <string.h>

#include "rv_tokens.h"
#include "vit_internal.h"

void rv_vit_time_code(double t, int dim, float *code)
{
    if (dim <= 0 || !code)
        return;
    const int half = dim / 2;
    const double ratio = RV_VIT_TIME_PERIOD_MAX / RV_VIT_TIME_PERIOD_MIN;
    for (int i = 0; i < half; i++) {
        double e = half > 1 ? (double)i / (double)(half - 1) : 0.0;
        double period = RV_VIT_TIME_PERIOD_MIN * pow(ratio, e);
        double w = 2.0 * M_PI / period;
        code[2 * i] = (float)sin(w * t);
        code[2 * i + 1] = (float)cos(w * t);
    }
    if (dim % 2)
        code[dim - 1] = 0.0f;
}

/* torch's area_pixel_compute_source_index for linear modes, align_corners false:
 * the source coordinate of output index o, clamped at 0 below; i0, i1 and the
 * weight of i1. */
static void src_index(int o, int in, int out, int *i0, int *i1, double *w1)
{
    double s = ((double)o + 0.5) * (double)in / (double)out - 0.5;
    if (s < 0)
        s = 0;
    int a = (int)s;
    if (a > in - 1)
        a = in - 1;
    *i0 = a;
    *i1 = a < in - 1 ? a + 1 : a;
    *w1 = s - a;
}

void vit_pos_resample(const float *src, int sg, int dg, int dim, float *dst)
{
    for (int y = 0; y < dg; y++) {
        int y0, y1;
        double wy;
        src_index(y, sg, dg, &y0, &y1, &wy);
        for (int x = 0; x < dg; x++) {
            int x0, x1;
            double wx;
            src_index(x, sg, dg, &x0, &x1, &wx);
            const float *a = src + ((size_t)y0 * sg + x0) * dim;
            const float *b = src + ((size_t)y0 * sg + x1) * dim;
            const float *c = src + ((size_t)y1 * sg + x0) * dim;
            const float *d = src + ((size_t)y1 * sg + x1) * dim;
            float *o = dst + ((size_t)y * dg + x) * dim;
            for (int j = 0; j < dim; j++)
                o[j] = (float)((1 - wy) * ((1 - wx) * a[j] + wx * b[j]) +
                               wy * ((1 - wx) * c[j] + wx * d[j]));
        }
    }
}

void vit_pos_resample_bwd(const double *ddst, int sg, int dg, int dim, double *dsrc)
{
    for (int y = 0; y < dg; y++) {
        int y0, y1;
        double wy;
        src_index(y, sg, dg, &y0, &y1, &wy);
        for (int x = 0; x < dg; x++) {
            int x0, x1;
            double wx;
            src_index(x, sg, dg, &x0, &x1, &wx);
            const double w[4] = {(1 - wy) * (1 - wx), (1 - wy) * wx, wy * (1 - wx), wy * wx};
            const size_t at[4] = {(size_t)y0 * sg + x0, (size_t)y0 * sg + x1,
                                  (size_t)y1 * sg + x0, (size_t)y1 * sg + x1};
            const double *g = ddst + ((size_t)y * dg + x) * dim;
            for (int c = 0; c < 4; c++) {
                double *o = dsrc + at[c] * dim;
                for (int j = 0; j < dim; j++)
                    o[j] += w[c] * g[j];
            }
        }
    }
}

void vit_time_codes(const rv_vit_tokens *in, int dim, float *codes)
{
    for (int64_t i = 0; i < in->len; i++) {
        float *row = codes + (size_t)i * dim;
        if (i > 0 && in->time[2 * i] == in->time[2 * (i - 1)])
            memcpy(row, row - dim, sizeof(float) * dim);
        else
            rv_vit_time_code(in->time[2 * i], dim, row);
    }
}

rv_status vit_tokens_check(const rv_vit_model *m, const rv_vit_tokens *in)
{
    const rv_vit_config *c = &m->cfg;
    const int bands = RV_VIT_MEL_BINS / c->audio_freq;
    if (in->len < 0 || in->nvideo < 0 || in->naudio < 0)
        return rv_fail(RV_ERR_INVALID, "vit forward: negative token counts (len %lld, video "
                       "%lld, audio %lld)", (long long)in->len, (long long)in->nvideo,
                       (long long)in->naudio);
    if (in->len > 0 && (!in->modality || !in->pos || !in->time))
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld tokens without modality, pos or time",
                       (long long)in->len);
    if ((in->nvideo > 0 && !in->video) || (in->naudio > 0 && !in->audio))
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld video / %lld audio tokens but no "
                       "patches", (long long)in->nvideo, (long long)in->naudio);
    if (in->nvideo > 0 && in->grid < 1)
        return rv_fail(RV_ERR_INVALID, "vit forward: video tokens with patch grid %d", in->grid);
    int64_t nv = 0, na = 0;
    for (int64_t i = 0; i < in->len; i++) {
        const int64_t *p = in->pos + 3 * i;
        int mod = in->modality[i];
        if (mod == RV_MOD_VIDEO) {
            if (p[1] < 0 || p[1] >= in->grid || p[2] < 0 || p[2] >= in->grid)
                return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: video patch (%lld, %lld) "
                               "outside the %d x %d grid", (long long)i, (long long)p[1],
                               (long long)p[2], in->grid, in->grid);
            nv++;
        } else if (mod == RV_MOD_AUDIO) {
            if (p[1] < 0 || p[1] >= bands)
                return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: audio band %lld outside "
                               "[0, %d)", (long long)i, (long long)p[1], bands);
            na++;
        } else if (mod != RV_MOD_CLS) {
            return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: modality %d", (long long)i,
                           mod);
        }
        if (!isfinite(in->time[2 * i]))
            return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: start time %g",
                           (long long)i, in->time[2 * i]);
    }
    if (nv != in->nvideo || na != in->naudio)
        return rv_fail(RV_ERR_INVALID, "vit forward: the slice holds %lld video and %lld audio "
                       "tokens but says nvideo %lld, naudio %lld", (long long)nv, (long long)na,
                       (long long)in->nvideo, (long long)in->naudio);
    return RV_OK;
}

static void add_row(float *x, const float *a, int n)
{
    for (int j = 0; j < n; j++)
        x[j] += a[j];
}

rv_status vit_embed(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                    const uint8_t *hidden, const float *mask_token,
                    const vit_embed_scratch *s, float *x, double *flops)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim, len = (int)in->len;
    const int vdim = c->tubelet * c->patch * c->patch * RV_VIT_CHANNELS;
    const int adim = c->audio_freq * c->audio_time;
    rv_status st = RV_OK;
    if (len == 0)
        return RV_OK;

    /* Time codes: tokens of one tubelet or audio step share a start, so a repeated
     * time copies the previous row. */
    vit_time_codes(in, D, s->codes);
    if ((st = be->gemm(be, 0, 1, len, D, D, 1.0f, s->codes, D, m->time_w, D, 0.0f, x, D)) != RV_OK)
        goto end;
    *flops += 2.0 * len * D * D;
    if (in->nvideo > 0) {
        int nv = (int)in->nvideo;
        if ((st = be->gemm(be, 0, 1, nv, D, vdim, 1.0f, in->video, vdim, m->video_w, vdim, 0.0f,
                           s->video, D)) != RV_OK ||
            (st = be->bias_add(be, s->video, m->video_b, nv, D)) != RV_OK)
            goto end;
        *flops += 2.0 * nv * (double)vdim * D;
    }
    if (in->naudio > 0) {
        int na = (int)in->naudio;
        if ((st = be->gemm(be, 0, 1, na, D, adim, 1.0f, in->audio, adim, m->audio_w, adim, 0.0f,
                           s->audio, D)) != RV_OK ||
            (st = be->bias_add(be, s->audio, m->audio_b, na, D)) != RV_OK)
            goto end;
        *flops += 2.0 * na * (double)adim * D;
    }

    /* Scatter the projections and add the tables. */
    const int G = c->grid;
    int64_t vi = 0, ai = 0;
    for (int i = 0; i < len; i++) {
        float *row = x + (size_t)i * D;
        const int64_t *p = in->pos + 3 * (size_t)i;
        const int hide = hidden && hidden[i];
        switch (in->modality[i]) {
        case RV_MOD_VIDEO: {
            const float *pos = s->pos ? s->pos + ((size_t)p[1] * in->grid + p[2]) * D
                                      : m->pos + (1 + (size_t)p[1] * G + p[2]) * D;
            const float *proj = s->video + (size_t)vi++ * D;
            add_row(row, hide ? mask_token : proj, D);
            add_row(row, pos, D);
            add_row(row, m->modality, D);
            break;
        }
        case RV_MOD_AUDIO: {
            const float *proj = s->audio + (size_t)ai++ * D;
            add_row(row, hide ? mask_token : proj, D);
            add_row(row, m->band + (size_t)p[1] * D, D);
            add_row(row, m->modality + D, D);
            break;
        }
        default: /* CLS */
            add_row(row, m->cls, D);
            add_row(row, m->pos, D);
            add_row(row, m->modality + 2 * (size_t)D, D);
            break;
        }
    }
end:
    return st;
}
