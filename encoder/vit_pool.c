/* vit_pool.c: pooling of the per-token outputs without gathering the tokens
 * (rv_vit.h). Every rank sums its own rows in double into one buffer (global,
 * per time segment, per modality, CLS, and the counts beside them), one F64
 * all-reduce adds the ranks' buffers, and every rank divides. The CLS token lives
 * on the rank holding global position 0; its row reaches the others through the
 * same all-reduce. Options: segment_s <= 0 (or opts NULL) selects 10 s; end_s <= 0
 * selects the latest token end of any rank (one more all-gather). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_tokens.h"
#include "rv_vit.h"

#define DEFAULT_SEGMENT_S 10.0

void rv_vit_pooled_free(rv_vit_pooled *p)
{
    if (!p)
        return;
    free(p->global);
    free(p->segment);
    free(p->segment_start);
    free(p->segment_end);
    free(p->segment_tokens);
    free(p->modality_mean);
    free(p->cls);
    memset(p, 0, sizeof *p);
}

/* The latest token end over every rank (when the caller gives no end_s). */
static rv_status latest_end(rv_comm *comm, const rv_vit_tokens *in, double *end_s)
{
    double mine = 0, *all = malloc(sizeof(double) * (size_t)comm->size);
    if (!all)
        return rv_fail(RV_ERR_NOMEM, "vit pool: out of memory for %d ranks", comm->size);
    for (int64_t i = 0; i < in->len; i++)
        if (in->time[2 * i + 1] > mine)
            mine = in->time[2 * i + 1];
    rv_status st = rv_comm_allgather(comm, &mine, all, sizeof(double));
    *end_s = 0;
    for (int r = 0; st == RV_OK && r < comm->size; r++)
        *end_s = all[r] > *end_s ? all[r] : *end_s;
    free(all);
    return st;
}

rv_status rv_vit_pool(rv_comm *comm, const rv_vit_tokens *in, const float *y, int dim,
                      const rv_vit_pool_opts *opts, rv_vit_pooled *out)
{
    rv_status st = RV_OK;
    double *acc = NULL;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "vit pool: out is NULL");
    memset(out, 0, sizeof *out);
    if (!comm || !in || dim <= 0 || (in->len > 0 && (!y || !in->modality || !in->time)))
        return rv_fail(RV_ERR_INVALID, "vit pool: communicator, tokens, outputs and dim > 0 "
                       "(got %d) are required", dim);
    double seg_s = opts && opts->segment_s > 0 ? opts->segment_s : DEFAULT_SEGMENT_S;
    double end_s = opts ? opts->end_s : 0;
    if (!isfinite(seg_s) || !isfinite(end_s))
        return rv_fail(RV_ERR_INVALID, "vit pool: segment_s %g and end_s %g must be finite",
                       seg_s, end_s);
    if (end_s <= 0 && (st = latest_end(comm, in, &end_s)) != RV_OK)
        return st;
    double gd = ceil(end_s / seg_s);
    if (gd > 1e7)
        return rv_fail(RV_ERR_INVALID, "vit pool: %g s in segments of %g s is too many segments",
                       end_s, seg_s);
    const int64_t G = gd < 1 ? 1 : (int64_t)gd;
    const size_t D = (size_t)dim;

    /* acc: rows global, segments (G), video, audio, cls; then their counts. */
    const size_t rows = 1 + (size_t)G + 3, nacc = rows * D + rows;
    acc = calloc(nacc, sizeof(double));
    out->global = calloc(D, sizeof(float));
    out->segment = calloc((size_t)G * D, sizeof(float));
    out->segment_start = calloc((size_t)G, sizeof(double));
    out->segment_end = calloc((size_t)G, sizeof(double));
    out->segment_tokens = calloc((size_t)G, sizeof(int64_t));
    out->modality_mean = calloc(2 * D, sizeof(float));
    out->cls = calloc(D, sizeof(float));
    if (!acc || !out->global || !out->segment || !out->segment_start || !out->segment_end ||
        !out->segment_tokens || !out->modality_mean || !out->cls) {
        st = rv_fail(RV_ERR_NOMEM, "vit pool: out of memory for %lld segments of dim %d",
                     (long long)G, dim);
        goto end;
    }
    double *cnt = acc + rows * D;
    for (int64_t i = 0; i < in->len; i++) {
        const float *row = y + (size_t)i * D;
        int mod = in->modality[i];
        size_t targets[3], nt = 0;
        if (mod == RV_MOD_CLS) {
            targets[nt++] = rows - 1;
        } else {
            double t = in->time[2 * i];
            int64_t g = t > 0 ? (int64_t)floor(t / seg_s) : 0;
            g = g < G ? g : G - 1;
            targets[nt++] = 0;
            targets[nt++] = 1 + (size_t)g;
            targets[nt++] = 1 + (size_t)G + (mod == RV_MOD_AUDIO);
        }
        for (size_t j = 0; j < nt; j++) {
            double *a = acc + targets[j] * D;
            for (size_t c = 0; c < D; c++)
                a[c] += row[c];
            cnt[targets[j]] += 1;
        }
    }
    if ((st = rv_comm_allreduce(comm, acc, acc, nacc, RV_COMM_F64)) != RV_OK)
        goto end;

    out->dim = dim;
    out->segments = G;
    for (size_t r = 0; r < rows; r++) {
        float *dst = r == 0                 ? out->global
                     : r <= (size_t)G       ? out->segment + (r - 1) * D
                     : r < rows - 1         ? out->modality_mean + (r - 1 - G) * D
                                            : out->cls;
        if (cnt[r] > 0)
            for (size_t c = 0; c < D; c++)
                dst[c] = (float)(acc[r * D + c] / cnt[r]);
    }
    out->tokens = (int64_t)cnt[0];
    for (int64_t g = 0; g < G; g++) {
        out->segment_tokens[g] = (int64_t)cnt[1 + g];
        out->segment_start[g] = g * seg_s;
        double e = (g + 1) * seg_s;
        out->segment_end[g] = g == G - 1 || e > end_s ? end_s : e;
    }
    out->modality_tokens[0] = (int64_t)cnt[1 + G];
    out->modality_tokens[1] = (int64_t)cnt[2 + G];
    out->has_cls = cnt[rows - 1] > 0;
end:
    free(acc);
    if (st != RV_OK)
        rv_vit_pooled_free(out);
    return st;
}
