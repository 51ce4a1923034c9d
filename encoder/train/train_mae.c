/* train_mae.c: the masked-reconstruction task (rv_vit_train.h): which tokens
 * are hidden (rv_mae_hidden) and the reconstruction loss over the cp group
 * (rv_mae_loss).
 *
 * Hiding: token g (global index) is hidden when u(seed, g) < fraction, u a
 * uniform double in [0, 1) from a counter-based hash (splitmix64's finaliser of
 * the mixed seed plus g times the golden-ratio constant). No state, no
 * communication: any rank holding g decides the same, whatever the plan.
 *
 * Loss: for each hidden token i of modality m (video or audio), target t = its
 * patch x normalised per patch, (x - mean) / sqrt(var + 1e-6) with the
 * population variance, and prediction q = W_m y_i + b_m. With n the hidden
 * tokens' elements over every rank,
 *   loss = sum (q - t)^2 / n,  dq = scale * 2 (q - t) / n,
 *   dy_i += W_m^T dq,  dW_m += dq y_i^T,  db_m += dq.
 * n is all-reduced first (F64: elements, hidden tokens), so a single pass over
 * the tokens computes the prediction, its error and every gradient; the squared
 * errors are all-reduced after it. Dot products and per-patch statistics are in
 * double. Nothing hidden anywhere gives loss 0 and no gradient. dy or dhead
 * NULL skips that gradient (evaluation); every rank must still call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_tokens.h"
#include "rv_vit_train.h"

#define NORM_EPS 1e-6

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) for global token g: 53 bits of a hash of (seed, g). */
static double hide_draw(uint64_t key, int64_t g)
{
    uint64_t h = mix64(key + ((uint64_t)g + 1) * 0x9e3779b97f4a7c15ull);
    return (double)(h >> 11) * 0x1p-53;
}

void rv_mae_hidden(uint64_t seed, double fraction, const rv_shard_plan *plan, int rank,
                   const rv_vit_tokens *in, uint8_t *hidden)
{
    if (!in || !hidden || in->len <= 0)
        return;
    memset(hidden, 0, (size_t)in->len);
    if (!plan || !in->modality || rank < 0 || rank >= plan->ranks)
        return;
    const uint64_t key = mix64(seed ^ 0x6d61736b6d61736bull); /* "maskmask" */
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int nseg = rv_shard_segments(plan, rank, seg);
    int64_t k = 0;
    for (int s = 0; s < nseg; s++)
        for (int64_t g = seg[s].start; g < seg[s].start + seg[s].len && k < in->len; g++, k++) {
            int m = in->modality[k];
            if ((m == RV_MOD_VIDEO || m == RV_MOD_AUDIO) && hide_draw(key, g) < fraction)
                hidden[k] = 1;
        }
}

/* The hidden token's target: its patch x (n) normalised per patch. */
static void normalise_patch(const float *x, int64_t n, double *t)
{
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; j++)
        mean += x[j];
    mean /= (double)n;
    for (int64_t j = 0; j < n; j++) {
        double d = x[j] - mean;
        var += d * d;
    }
    var /= (double)n;
    const double inv = 1.0 / sqrt(var + NORM_EPS);
    for (int64_t j = 0; j < n; j++)
        t[j] = (x[j] - mean) * inv;
}

rv_status rv_mae_loss(rv_comm *comm, const rv_train_head *h, const rv_vit_tokens *in,
                      const uint8_t *hidden, const float *y, float scale, double *loss,
                      int64_t *hidden_total, float *dy, rv_train_head *dhead)
{
    rv_status st = RV_OK;
    double *t = NULL;  /* (maxdim) the target, then dq */
    double *dyi = NULL; /* (D) W^T dq of one token */
    if (!comm || !h || !in || !loss)
        return rv_fail(RV_ERR_INVALID, "mae loss: communicator, head, tokens and loss are required");
    if (h->task != RV_TASK_MAE || !h->mae_video_w)
        return rv_fail(RV_ERR_INVALID, "mae loss: the head is a %s head", rv_task_name(h->task));
    const int64_t D = h->dim, len = in->len;
    if (dhead && (dhead->task != RV_TASK_MAE || dhead->dim != h->dim ||
                  dhead->video_dim != h->video_dim || dhead->audio_dim != h->audio_dim))
        return rv_fail(RV_ERR_INVALID, "mae loss: gradient head (%s, dim %d) does not match "
                       "the head (dim %d, video %lld, audio %lld)", rv_task_name(dhead->task),
                       dhead->dim, h->dim, (long long)h->video_dim, (long long)h->audio_dim);
    if (len > 0 && hidden && (!in->modality || !y))
        return rv_fail(RV_ERR_INVALID, "mae loss: tokens need modalities and outputs");

    /* Pass 1: this rank's hidden tokens and elements; rows must match the counts. */
    int64_t nv = 0, na = 0;
    double cnt[3] = {0, 0, 0}; /* elements, hidden tokens, squared errors */
    for (int64_t i = 0; i < len && hidden; i++) {
        int m = in->modality[i];
        if (m != RV_MOD_VIDEO && m != RV_MOD_AUDIO)
            continue;
        if (hidden[i]) {
            cnt[0] += (double)(m == RV_MOD_VIDEO ? h->video_dim : h->audio_dim);
            cnt[1] += 1;
        }
        m == RV_MOD_VIDEO ? nv++ : na++;
    }
    if (hidden && (nv != in->nvideo || na != in->naudio))
        return rv_fail(RV_ERR_INVALID, "mae loss: the tokens hold %lld video and %lld audio "
                       "tokens but nvideo %lld, naudio %lld", (long long)nv, (long long)na,
                       (long long)in->nvideo, (long long)in->naudio);
    if ((cnt[1] > 0) && ((nv > 0 && !in->video) || (na > 0 && !in->audio)))
        return rv_fail(RV_ERR_INVALID, "mae loss: patches are missing");
    const double mine = cnt[1]; /* this rank's hidden tokens */
    if ((st = rv_comm_allreduce(comm, cnt, cnt, 2, RV_COMM_F64)) != RV_OK)
        return st;
    const double n = cnt[0];
    if (hidden_total)
        *hidden_total = (int64_t)cnt[1];
    *loss = 0;
    if (n <= 0)
        return RV_OK; /* nothing hidden on any rank */

    const int64_t maxdim = h->video_dim > h->audio_dim ? h->video_dim : h->audio_dim;
    t = malloc(sizeof(double) * (size_t)maxdim);
    dyi = malloc(sizeof(double) * (size_t)D);
    if (!t || !dyi) {
        st = rv_fail(RV_ERR_NOMEM, "mae loss: out of memory for patches of %lld",
                     (long long)maxdim);
        goto end;
    }
    /* Pass 2: predictions, errors and gradients of this rank's hidden tokens. */
    double sse = 0;
    const double gscale = 2.0 * scale / n;
    nv = na = 0;
    for (int64_t i = 0; i < len && mine > 0; i++) {
        const int m = in->modality[i];
        if (m != RV_MOD_VIDEO && m != RV_MOD_AUDIO)
            continue;
        const int64_t row = m == RV_MOD_VIDEO ? nv++ : na++;
        if (!hidden[i])
            continue;
        const int video = m == RV_MOD_VIDEO;
        const int64_t pd = video ? h->video_dim : h->audio_dim;
        const float *x = (video ? in->video : in->audio) + (size_t)(row * pd);
        const float *W = video ? h->mae_video_w : h->mae_audio_w;
        const float *b = video ? h->mae_video_b : h->mae_audio_b;
        const float *yi = y + (size_t)(i * D);
        normalise_patch(x, pd, t);
        for (int64_t j = 0; j < pd; j++) {
            const float *w = W + (size_t)(j * D);
            double q = b[j];
            for (int64_t d = 0; d < D; d++)
                q += (double)w[d] * yi[d];
            const double e = q - t[j];
            sse += e * e;
            t[j] = gscale * e; /* dq */
        }
        if (dy) {
            memset(dyi, 0, sizeof(double) * (size_t)D);
            for (int64_t j = 0; j < pd; j++) {
                const float *w = W + (size_t)(j * D);
                for (int64_t d = 0; d < D; d++)
                    dyi[d] += t[j] * w[d];
            }
            float *o = dy + (size_t)(i * D);
            for (int64_t d = 0; d < D; d++)
                o[d] += (float)dyi[d];
        }
        if (dhead) {
            float *dW = video ? dhead->mae_video_w : dhead->mae_audio_w;
            float *db = video ? dhead->mae_video_b : dhead->mae_audio_b;
            for (int64_t j = 0; j < pd; j++) {
                float *dw = dW + (size_t)(j * D);
                const float g = (float)t[j];
                for (int64_t d = 0; d < D; d++)
                    dw[d] += g * yi[d];
                db[j] += g;
            }
        }
    }
    if ((st = rv_comm_allreduce(comm, &sse, &sse, 1, RV_COMM_F64)) != RV_OK)
        goto end;
    *loss = sse / n;
end:
    free(t);
    free(dyi);
    return st;
}
