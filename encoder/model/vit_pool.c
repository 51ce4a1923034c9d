/* vit_pool.c: pooling of the per-token outputs without gathering the tokens
 * (rv_vit.h). Every rank sums its own rows in double into one buffer (global,
 * per time segment, per modality, CLS, and the counts beside them), one F64
 * all-reduce adds the ranks' buffers, and every rank divides. The CLS token lives
 * on the rank holding global position 0; its row reaches the others through the
 * same all-reduce (AST's distillation token likewise). Options: segment_s <= 0 (or
 * opts NULL) selects 10 s; end_s <= 0 selects the latest token end of any rank
 * (one more all-gather). Segments are cut on the tokens' sequence times; their
 * bounds come out on the container's clock (opts->t0 added last).
 * rv_vit_pool_head then makes the family's pooled output from those sums on
 * every rank, in double (a LayerNorm, a tanh pooler, a projection of one
 * D-vector, the classifier's logits by rv_vit_classify: no device, no
 * communication). */
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
    free(p->dist);
    free(p->pooled);
    free(p->projected);
    free(p->logits);
    memset(p, 0, sizeof *p);
}

/* The latest token end over every rank (when the caller gives no end_s). */
static rv_status latest_end(rv_comm *comm, const rv_vit_tokens *in, double *end_s)
{
    double mine = 0, *all = malloc(sizeof(double) * (size_t)comm->size);
    if (!all)
        return rv_fail(RV_ERR_NOMEM, "vit pool: out of memory for %d ranks", comm->size);
    for (int64_t i = 0; i < in->len; i++)
        if (in->seq_time[2 * i + 1] > mine)
            mine = in->seq_time[2 * i + 1];
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
    if (!comm || !in || dim <= 0 || (in->len > 0 && (!y || !in->modality || !in->seq_time)))
        return rv_fail(RV_ERR_INVALID, "vit pool: communicator, tokens, outputs and dim > 0 "
                       "(got %d) are required", dim);
    double seg_s = opts && opts->segment_s > 0 ? opts->segment_s : DEFAULT_SEGMENT_S;
    double hop_s = opts && opts->hop_s > 0 ? opts->hop_s : seg_s;
    double end_s = opts ? opts->end_s : 0;
    const double start = opts ? opts->start_s : 0; /* segments from here (sequence time) */
    const double t0 = opts ? opts->t0 : 0;         /* t0 on the container's clock */
    if (!isfinite(seg_s) || !isfinite(end_s) || !isfinite(hop_s) || !isfinite(start) ||
        !isfinite(t0))
        return rv_fail(RV_ERR_INVALID, "vit pool: segment_s %g, hop_s %g, start_s %g, end_s %g "
                       "and t0 %g must be finite", seg_s, hop_s, start, end_s, t0);
    if (end_s <= 0 && (st = latest_end(comm, in, &end_s)) != RV_OK)
        return st;
    const double span = end_s - start; /* times below are from start */
    double gd = ceil(span / hop_s);
    if (gd > 1e7)
        return rv_fail(RV_ERR_INVALID, "vit pool: %g s in segments every %g s is too many "
                       "segments", end_s, hop_s);
    const int64_t G = gd < 1 ? 1 : (int64_t)gd;
    const size_t D = (size_t)dim;

    /* acc: rows global, segments (G), video, audio, cls, dist; then their counts. */
    const size_t rows = 1 + (size_t)G + 4, nacc = rows * D + rows;
    acc = calloc(nacc, sizeof(double));
    out->global = calloc(D, sizeof(float));
    out->segment = calloc((size_t)G * D, sizeof(float));
    out->segment_start = calloc((size_t)G, sizeof(double));
    out->segment_end = calloc((size_t)G, sizeof(double));
    out->segment_tokens = calloc((size_t)G, sizeof(int64_t));
    out->modality_mean = calloc(2 * D, sizeof(float));
    out->cls = calloc(D, sizeof(float));
    out->dist = calloc(D, sizeof(float));
    if (!acc || !out->global || !out->segment || !out->segment_start || !out->segment_end ||
        !out->segment_tokens || !out->modality_mean || !out->cls || !out->dist) {
        st = rv_fail(RV_ERR_NOMEM, "vit pool: out of memory for %lld segments of dim %d",
                     (long long)G, dim);
        goto end;
    }
    double *cnt = acc + rows * D;
    for (int64_t i = 0; i < in->len; i++) {
        const float *row = y + (size_t)i * D;
        int mod = in->modality[i];
        size_t fixed[2];
        int nf = 0;
        int64_t g_lo = 0, g_hi = -1;
        if (mod == RV_MOD_CLS) {
            /* special token 0 is the CLS, 1 AST's distillation token */
            fixed[nf++] = in->pos && in->pos[3 * i] == 1 ? rows - 1 : rows - 2;
        } else {
            /* The windows [g hop, g hop + seg) holding t; one starting after every
             * window's start counts in the last. Window floor(t / hop) always holds t
             * when hop <= seg (so rounding in the lower bound cannot lose a token);
             * with gaps between windows (hop > seg) a token may be in none. */
            double t = in->seq_time[2 * i] - start;
            double hi = t > 0 ? floor(t / hop_s) : 0;
            int clamped = hi >= (double)(G - 1);
            g_hi = clamped ? G - 1 : (int64_t)hi;
            if (hop_s < seg_s) {
                double lo = floor((t - seg_s) / hop_s) + 1;
                g_lo = lo > 0 ? (lo < (double)g_hi ? (int64_t)lo : g_hi) : 0;
            } else {
                g_lo = g_hi;
                if (hop_s > seg_s && !clamped && t >= g_hi * hop_s + seg_s)
                    g_lo = g_hi + 1; /* in a gap */
            }
            fixed[nf++] = 0;
            fixed[nf++] = 1 + (size_t)G + (mod == RV_MOD_AUDIO);
        }
        for (int j = 0; j < nf; j++) {
            double *a = acc + fixed[j] * D;
            for (size_t c = 0; c < D; c++)
                a[c] += row[c];
            cnt[fixed[j]] += 1;
        }
        for (int64_t g = g_lo; g <= g_hi; g++) {
            double *a = acc + (1 + (size_t)g) * D;
            for (size_t c = 0; c < D; c++)
                a[c] += row[c];
            cnt[1 + g] += 1;
        }
    }
    if ((st = rv_comm_allreduce(comm, acc, acc, nacc, RV_COMM_F64)) != RV_OK)
        goto end;

    out->dim = dim;
    out->segments = G;
    for (size_t r = 0; r < rows; r++) {
        float *dst = r == 0                 ? out->global
                     : r <= (size_t)G       ? out->segment + (r - 1) * D
                     : r < rows - 2         ? out->modality_mean + (r - 1 - G) * D
                     : r == rows - 2        ? out->cls
                                            : out->dist;
        if (cnt[r] > 0)
            for (size_t c = 0; c < D; c++)
                dst[c] = (float)(acc[r * D + c] / cnt[r]);
    }
    out->tokens = (int64_t)cnt[0];
    for (int64_t g = 0; g < G; g++) {
        out->segment_tokens[g] = (int64_t)cnt[1 + g];
        double e = g * hop_s + seg_s;
        /* the bounds in sequence time, then on the container's clock */
        out->segment_start[g] = t0 + (start + g * hop_s);
        out->segment_end[g] = t0 + (start + (e > span || (g == G - 1 && hop_s == seg_s) ? span : e));
    }
    out->modality_tokens[0] = (int64_t)cnt[1 + G];
    out->modality_tokens[1] = (int64_t)cnt[2 + G];
    out->has_cls = cnt[rows - 2] > 0;
    out->has_dist = cnt[rows - 1] > 0;
end:
    free(acc);
    if (st != RV_OK)
        rv_vit_pooled_free(out);
    return st;
}

/* y (D) = LayerNorm(x) with weight w, bias b, in double. */
static void layernorm_row(const float *x, const float *w, const float *b, int D, double eps,
                          float *y)
{
    double mean = 0, var = 0;
    for (int j = 0; j < D; j++)
        mean += x[j];
    mean /= D;
    for (int j = 0; j < D; j++)
        var += (x[j] - mean) * (x[j] - mean);
    double rstd = 1.0 / sqrt(var / D + eps);
    for (int j = 0; j < D; j++)
        y[j] = (float)((x[j] - mean) * rstd * w[j] + b[j]);
}

rv_status rv_vit_pool_head(const rv_vit_model *m, rv_vit_pooled *p)
{
    if (!m || !p || !p->global)
        return rv_fail(RV_ERR_INVALID, "vit pool head: model and pooled outputs are required");
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim;
    if (p->dim != D)
        return rv_fail(RV_ERR_INVALID, "vit pool head: pooled width %d, model width %d", p->dim, D);
    const int need_cls = c->pool == RV_POOL_CLS || c->pool == RV_POOL_CLS_DIST ||
                         c->pool == RV_POOL_CLS_NORM || c->pool == RV_POOL_CLS_TANH;
    if (need_cls && !p->has_cls)
        return rv_fail(RV_ERR_INVALID, "vit pool head: pooling '%s' needs the CLS token, which "
                       "the sequence lacks", rv_vit_pool_name(c->pool));
    if (c->pool == RV_POOL_CLS_DIST && !p->has_dist)
        return rv_fail(RV_ERR_INVALID, "vit pool head: pooling 'cls_dist' needs the "
                       "distillation token, which the sequence lacks");
    free(p->pooled);
    free(p->projected);
    p->projected = NULL;
    p->proj_dim = 0;
    if (!(p->pooled = calloc((size_t)D, sizeof(float))))
        return rv_fail(RV_ERR_NOMEM, "vit pool head: out of memory");
    float *o = p->pooled;
    switch (c->pool) {
    case RV_POOL_CLS:
        memcpy(o, p->cls, sizeof(float) * (size_t)D);
        break;
    case RV_POOL_CLS_DIST:
        for (int j = 0; j < D; j++)
            o[j] = (float)(((double)p->cls[j] + p->dist[j]) / 2);
        break;
    case RV_POOL_MEAN_NORM:
        layernorm_row(p->global, m->pool_ln_w, m->pool_ln_b, D, c->pool_eps, o);
        break;
    case RV_POOL_CLS_NORM:
        layernorm_row(p->cls, m->pool_ln_w, m->pool_ln_b, D, c->pool_eps, o);
        break;
    case RV_POOL_CLS_TANH:
        for (int i = 0; i < D; i++) {
            double acc = m->pooler_b[i];
            const float *w = m->pooler_w + (size_t)i * D;
            for (int j = 0; j < D; j++)
                acc += (double)w[j] * p->cls[j];
            o[i] = (float)tanh(acc);
        }
        break;
    default: /* RV_POOL_MEAN */
        memcpy(o, p->global, sizeof(float) * (size_t)D);
        break;
    }
    if (c->proj_dim > 0) {
        if (!(p->projected = calloc((size_t)c->proj_dim, sizeof(float))))
            return rv_fail(RV_ERR_NOMEM, "vit pool head: out of memory");
        for (int i = 0; i < c->proj_dim; i++) {
            double acc = 0;
            const float *w = m->proj_w + (size_t)i * D;
            for (int j = 0; j < D; j++)
                acc += (double)w[j] * o[j];
            p->projected[i] = (float)acc;
        }
        p->proj_dim = c->proj_dim;
    }
    free(p->logits);
    p->logits = NULL;
    p->classes = 0;
    if (c->head != RV_HEAD_NONE) { /* rv_vit_classify names a token the sequence lacks */
        if (!(p->logits = calloc((size_t)c->classes, sizeof(float))))
            return rv_fail(RV_ERR_NOMEM, "vit pool head: out of memory");
        rv_status s = rv_vit_classify(m, p->has_cls ? p->cls : NULL,
                                      p->has_dist ? p->dist : NULL, p->global, p->logits);
        if (s != RV_OK)
            return s;
        p->classes = c->classes;
    }
    return RV_OK;
}
