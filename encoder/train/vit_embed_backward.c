/* vit_embed_backward.c: the backward of the token embedding (vit_embed.c) of
 * one rank's slice. With dx (len, D) the gradient of the embeddings:
 *   time_w   += dx^T codes                    (one GEMM over every token)
 *   video_w  += dxv^T patches, video_b += sum dxv over the video tokens that are
 *               not hidden (dxv: their rows of dx, a hidden token's row zeroed)
 *   audio_w, audio_b the same over the audio tokens
 *   mask     += the rows of hidden tokens
 *   pos, band, audio_pos, cls, modality: scatter-adds of the rows into the
 *               table rows the tokens read (those the family has); a resampled
 *               position grid (bilinear or bicubic) and AST's time-resampled grid
 *               (to each block's own steps under block spans, as the forward)
 *               pass their gradient to the stored table through the resampling's
 *               transpose; fixed sinusoid positions have no gradient.
 * The scatter-adds (many tokens into one table row) are summed in double, so a
 * long slice adds no more rounding than one float addition per row. */
#include <stdlib.h>
#include <string.h>

#include "rv_tokens.h"
#include "vit_internal.h"

static void acc_row(double *acc, const float *x, int n)
{
    for (int j = 0; j < n; j++)
        acc[j] += x[j];
}

static void flush(float *dst, const double *acc, size_t n)
{
    for (size_t j = 0; j < n; j++)
        dst[j] += (float)acc[j];
}

rv_status vit_embed_backward(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                             const uint8_t *hidden, const float *dx, float *codes, float *proj,
                             rv_vit_model *grad, float *dmask, double *flops)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim, len = (int)in->len, G = c->grid;
    const int vdim = c->tubelet * c->patch * c->patch * RV_VIT_CHANNELS;
    const int adim = c->audio_freq * c->audio_time;
    const int bands = rv_vit_bands(c), special = rv_vit_pos_special(c);
    const int grid_pos = c->pos == RV_POS_GRID_BILINEAR || c->pos == RV_POS_GRID_BICUBIC;
    const int resample = grid_pos && in->nvideo > 0 && in->grid != G;
    const int dg = resample ? in->grid : 0;
    const int nspecial = c->cls > 1 ? c->cls : 1;
    const int64_t prow = rv_vit_pos_rows(c);
    const int64_t arow = c->audio_pos == RV_APOS_GRID ? (int64_t)bands * c->audio_grid_t : 0;
    rv_status st = RV_OK;
    if (len == 0)
        return RV_OK;

    /* Double accumulators, D each: video_b, audio_b, mask, modality (3), the special
     * tokens, band (bands), the stored pos table, AST's grid, the resampled grid
     * (dg*dg). */
    const size_t rows = 3 + 3 + (size_t)nspecial + (size_t)bands + (size_t)prow + (size_t)arow +
                        (size_t)dg * dg;
    double *acc = calloc(rows * D, sizeof(double));
    if (!acc)
        return rv_fail(RV_ERR_NOMEM, "vit backward: embedding: cannot allocate %zu doubles",
                       rows * D);
    double *a_vb = acc, *a_ab = acc + D, *a_mask = acc + 2 * D, *a_mod = acc + 3 * D;
    double *a_cls = a_mod + 3 * D, *a_band = a_cls + (size_t)nspecial * D;
    double *a_pos = a_band + (size_t)bands * D, *a_apos = a_pos + (size_t)prow * D;
    double *a_rpos = a_apos + (size_t)arow * D;

    vit_steps_cache sc = {-1, 0}; /* AST's grid: each block's own steps */
    for (int i = 0; i < len; i++) {
        const float *row = dx + (size_t)i * D;
        const int64_t *p = in->pos + 3 * (size_t)i;
        const int hide = hidden && hidden[i];
        switch (in->modality[i]) {
        case RV_MOD_VIDEO:
            acc_row(hide ? a_mask : a_vb, row, D);
            if (grid_pos)
                acc_row(resample ? a_rpos + ((size_t)p[1] * dg + p[2]) * D
                                 : a_pos + (special + (size_t)p[1] * G + p[2]) * D, row, D);
            acc_row(a_mod, row, D);
            break;
        case RV_MOD_AUDIO:
            acc_row(hide ? a_mask : a_ab, row, D);
            if (c->audio_pos == RV_APOS_BAND) {
                acc_row(a_band + (size_t)p[1] * D, row, D);
            } else if (c->audio_pos == RV_APOS_GRID) {
                int64_t idx[2];
                double w[2];
                int n = vit_time_taps(p[0], vit_token_audio_steps(in, i, &sc), c->audio_grid_t,
                                      idx, w);
                double *base = a_apos + (size_t)p[1] * c->audio_grid_t * D;
                for (int k = 0; k < n; k++)
                    for (int j = 0; j < D; j++)
                        base[(size_t)idx[k] * D + j] += w[k] * row[j];
            }
            acc_row(a_mod + D, row, D);
            break;
        default: /* a special token */
            acc_row(a_cls + (size_t)p[0] * D, row, D);
            if (p[0] < special && prow > 0)
                acc_row(a_pos + (size_t)p[0] * D, row, D);
            acc_row(a_mod + 2 * (size_t)D, row, D);
            break;
        }
    }
    if (resample)
        vit_grid_resample_bwd(a_rpos, G, dg, D, c->pos == RV_POS_GRID_BICUBIC,
                              a_pos + (size_t)special * D);

    /* The projections' weights: each modality's rows of dx (hidden ones zero)
     * against its patches. */
    for (int mod = RV_MOD_VIDEO; mod <= RV_MOD_AUDIO; mod++) {
        const int n = (int)(mod == RV_MOD_VIDEO ? in->nvideo : in->naudio);
        const int k = mod == RV_MOD_VIDEO ? vdim : adim;
        if (n == 0)
            continue;
        int64_t r = 0;
        for (int i = 0; i < len; i++) {
            if (in->modality[i] != mod)
                continue;
            float *dst = proj + (size_t)r++ * D;
            if (hidden && hidden[i])
                memset(dst, 0, sizeof(float) * D);
            else
                memcpy(dst, dx + (size_t)i * D, sizeof(float) * D);
        }
        const float *patches = mod == RV_MOD_VIDEO ? in->video : in->audio;
        float *gw = mod == RV_MOD_VIDEO ? grad->video_w : grad->audio_w;
        if ((st = be->gemm(be, 1, 0, D, k, n, 1.0f, proj, D, patches, k, 1.0f, gw, k)) != RV_OK)
            goto end;
        *flops += 2.0 * n * (double)k * D;
    }
    /* The time projection. */
    if (c->time_code) {
        vit_time_codes(in, D, codes);
        if ((st = be->gemm(be, 1, 0, D, D, len, 1.0f, dx, D, codes, D, 1.0f, grad->time_w, D)) !=
            RV_OK)
            goto end;
        *flops += 2.0 * len * (double)D * D;
        flush(grad->modality, a_mod, 3 * (size_t)D);
    }
    /* Each accumulator into the gradient the family has (the others are NULL). */
    if (grad->video_b)
        flush(grad->video_b, a_vb, (size_t)D);
    if (grad->audio_b)
        flush(grad->audio_b, a_ab, (size_t)D);
    if (grad->cls)
        flush(grad->cls, a_cls, (size_t)(c->cls > 0 ? c->cls : 1) * D);
    if (grad->band)
        flush(grad->band, a_band, (size_t)bands * D);
    if (grad->pos)
        flush(grad->pos, a_pos, (size_t)prow * D);
    if (grad->audio_pos)
        flush(grad->audio_pos, a_apos, (size_t)arow * D);
    if (dmask)
        flush(dmask, a_mask, (size_t)D);
end:
    free(acc);
    return st;
}
