/* vit_embed.c: the token embedding of one rank's slice (rv_vit.h), for every
 * family:
 *   video:    video_w @ patch [+ video_b] + vpos(g, y, x) [+ time(t) + modality[0]]
 *   audio:    audio_w @ patch + audio_b + apos(p, b) [+ time(t) + modality[1]]
 *   special:  cls[j] [+ pos[j]] [+ time(t) + modality[2]]
 * The projections are two GEMMs (all video rows, all audio rows) whose results
 * are scattered into token order; the temporal term (families with a time
 * code) is one GEMM over the (len, D) time codes, so audio and video at the same
 * start time get the same contribution. Hidden tokens (the masked-reconstruction
 * task) get the mask token in place of their projection. The fixed sinusoid
 * codes live here too; the resampling of stored tables is vit_resample.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

void vit_time_codes(const rv_vit_tokens *in, int dim, float *codes)
{
    for (int64_t i = 0; i < in->len; i++) {
        float *row = codes + (size_t)i * dim;
        if (i > 0 && in->seq_time[2 * i] == in->seq_time[2 * (i - 1)])
            memcpy(row, row - dim, sizeof(float) * dim);
        else
            rv_vit_time_code(in->seq_time[2 * i], dim, row);
    }
}

rv_status vit_tokens_check(const rv_vit_model *m, const rv_vit_tokens *in, int patches)
{
    const rv_vit_config *c = &m->cfg;
    const int bands = rv_vit_bands(c);
    if (in->len < 0 || in->nvideo < 0 || in->naudio < 0)
        return rv_fail(RV_ERR_INVALID, "vit forward: negative token counts (len %lld, video "
                       "%lld, audio %lld)", (long long)in->len, (long long)in->nvideo,
                       (long long)in->naudio);
    if (in->len > 0 && (!in->modality || !in->pos || !in->seq_time))
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld tokens without modality, pos or time",
                       (long long)in->len);
    if (patches && ((in->nvideo > 0 && !in->video) || (in->naudio > 0 && !in->audio)))
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld video / %lld audio tokens but no "
                       "patches", (long long)in->nvideo, (long long)in->naudio);
    if (in->nvideo > 0 && !c->video)
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld video tokens, but the %s model has no "
                       "video weights", (long long)in->nvideo, rv_vit_family_name(c->family));
    if (in->naudio > 0 && !c->audio && c->family != RV_FAMILY_RINGVIT)
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld audio tokens, but the %s model has no "
                       "audio weights", (long long)in->naudio, rv_vit_family_name(c->family));
    if (in->nvideo > 0 && in->grid < 1)
        return rv_fail(RV_ERR_INVALID, "vit forward: video tokens with patch grid %d", in->grid);
    const int agrid = c->audio_pos == RV_APOS_GRID;
    if (agrid && in->naudio > 0 && in->audio_steps < 0)
        return rv_fail(RV_ERR_INVALID, "vit forward: audio_steps %lld", (long long)in->audio_steps);
    /* AST's grid: positions of steps up to the stored grid, or up to the token's
     * steps (audio_steps, or its block's) when the grid is resampled to them. */
    vit_steps_cache sc = {-1, 0};
    int64_t nv = 0, na = 0;
    for (int64_t i = 0; i < in->len; i++) {
        const int64_t *p = in->pos + 3 * i;
        int mod = in->modality[i];
        if (mod == RV_MOD_VIDEO) {
            if (p[1] < 0 || p[1] >= in->grid || p[2] < 0 || p[2] >= in->grid || p[0] < 0)
                return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: video patch (%lld, %lld, "
                               "%lld) outside the %d x %d grid", (long long)i, (long long)p[0],
                               (long long)p[1], (long long)p[2], in->grid, in->grid);
            nv++;
        } else if (mod == RV_MOD_AUDIO) {
            if (p[1] < 0 || p[1] >= bands)
                return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: audio band %lld outside "
                               "[0, %d)", (long long)i, (long long)p[1], bands);
            const int64_t steps = agrid ? vit_token_audio_steps(in, i, &sc) : 0;
            const int64_t max_step = !agrid ? INT64_MAX
                                     : steps > c->audio_grid_t ? steps : c->audio_grid_t;
            if (p[0] < 0 || p[0] >= max_step)
                return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: audio step %lld outside "
                               "[0, %lld) (audio_steps %lld, the stored grid %d)", (long long)i,
                               (long long)p[0], (long long)max_step, (long long)steps,
                               c->audio_grid_t);
            na++;
        } else if (mod == RV_MOD_CLS) {
            if (p[0] < 0 || p[0] >= (c->cls > 0 ? c->cls : 1) ||
                (c->cls == 0 && c->family != RV_FAMILY_RINGVIT))
                return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: special token %lld, but "
                               "the model has %d", (long long)i, (long long)p[0], c->cls);
        } else {
            return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: modality %d", (long long)i,
                           mod);
        }
        if (!isfinite(in->seq_time[2 * i]))
            return rv_fail(RV_ERR_INVALID, "vit forward: token %lld: start time %g",
                           (long long)i, in->seq_time[2 * i]);
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

/* x += w0 * a + w1 * b (the AST time interpolation of two stored columns). */
static void add_mix(float *x, const float *a, double w0, const float *b, double w1, int n)
{
    for (int j = 0; j < n; j++)
        x[j] += (float)(w0 * a[j] + w1 * b[j]);
}

void vit_apos_row(const rv_vit_model *m, int64_t step, int band, int64_t steps, float *x)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim;
    int64_t idx[2];
    double w[2];
    int n = vit_time_taps(step, steps, c->audio_grid_t, idx, w);
    const float *base = m->audio_pos + (size_t)band * c->audio_grid_t * D;
    if (n == 1)
        add_row(x, base + (size_t)idx[0] * D, D);
    else
        add_mix(x, base + (size_t)idx[0] * D, w[0], base + (size_t)idx[1] * D, w[1], D);
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
    double *den = NULL;
    if (len == 0)
        return RV_OK;

    /* Time codes: tokens of one tubelet or audio step share a start, so a repeated
     * time copies the previous row. */
    if (c->time_code) {
        vit_time_codes(in, D, s->codes);
        if ((st = be->gemm(be, 0, 1, len, D, D, 1.0f, s->codes, D, m->time_w, D, 0.0f, x, D)) != RV_OK)
            goto end;
        *flops += 2.0 * len * D * D;
    } else {
        memset(x, 0, sizeof(float) * (size_t)len * D);
    }
    if (in->nvideo > 0) {
        int nv = (int)in->nvideo;
        if ((st = be->gemm(be, 0, 1, nv, D, vdim, 1.0f, in->video, vdim, m->video_w, vdim, 0.0f,
                           s->video, D)) != RV_OK ||
            (m->video_b && (st = be->bias_add(be, s->video, m->video_b, nv, D)) != RV_OK))
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
    const int G = c->grid, special = rv_vit_pos_special(c);
    const int grid_pos = c->pos == RV_POS_GRID_BILINEAR || c->pos == RV_POS_GRID_BICUBIC;
    const int64_t ig2 = (int64_t)in->grid * in->grid;
    if (c->pos == RV_POS_SINUSOID && in->nvideo > 0) {
        if (!(den = malloc(sizeof(double) * (size_t)D))) {
            st = rv_fail(RV_ERR_NOMEM, "vit embed: out of memory");
            goto end;
        }
        vit_sinusoid_denoms(D, den);
    }
    int64_t vi = 0, ai = 0;
    vit_steps_cache sc = {-1, 0};
    for (int i = 0; i < len; i++) {
        float *row = x + (size_t)i * D;
        const int64_t *p = in->pos + 3 * (size_t)i;
        const int hide = hidden && hidden[i];
        switch (in->modality[i]) {
        case RV_MOD_VIDEO: {
            const float *proj = s->video + (size_t)vi++ * D;
            add_row(row, hide ? mask_token : proj, D);
            if (grid_pos)
                add_row(row, s->pos ? s->pos + ((size_t)p[1] * in->grid + p[2]) * D
                                    : m->pos + (special + (size_t)p[1] * G + p[2]) * D, D);
            else if (c->pos == RV_POS_SINUSOID)
                vit_sinusoid_add(p[0] * ig2 + p[1] * in->grid + p[2], D, den, row);
            if (c->time_code)
                add_row(row, m->modality, D);
            break;
        }
        case RV_MOD_AUDIO: {
            const float *proj = s->audio + (size_t)ai++ * D;
            add_row(row, hide ? mask_token : proj, D);
            if (c->audio_pos == RV_APOS_BAND)
                add_row(row, m->band + (size_t)p[1] * D, D);
            else if (c->audio_pos == RV_APOS_GRID)
                vit_apos_row(m, p[0], (int)p[1], vit_token_audio_steps(in, i, &sc), row);
            if (c->time_code)
                add_row(row, m->modality + D, D);
            break;
        }
        default: /* a special token: CLS (0) or AST's distillation token (1) */
            add_row(row, m->cls + (size_t)p[0] * D, D);
            if (m->pos && p[0] < special)
                add_row(row, m->pos + (size_t)p[0] * D, D);
            if (c->time_code)
                add_row(row, m->modality + 2 * (size_t)D, D);
            break;
        }
    }
end:
    free(den);
    return st;
}
