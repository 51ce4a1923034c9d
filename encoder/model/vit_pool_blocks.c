/* vit_pool_blocks.c: pooling per attention block (rv_vit.h) under block and frame
 * spans, where each block is a sequence of its own. Each rank sums its tokens'
 * rows per block in double (the mean of the non-special tokens, the CLS and
 * distillation rows) over the range of blocks its slice touches; rank 0 learns
 * every rank's range (one all-gather of two integers), receives each range's
 * sums and adds them (a block cut between neighbouring ranks is added up), then
 * divides. Only rank 0 holds the result: what the output needs, without an
 * all-reduce of G x 3D doubles over every rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_tokens.h"
#include "rv_vit.h"

#define TAG_BLOCKS 21

void rv_vit_blocks_free(rv_vit_blocks *b)
{
    if (!b)
        return;
    free(b->tokens);
    free(b->mean);
    free(b->has_cls);
    free(b->cls);
    free(b->has_dist);
    free(b->dist);
    free(b->pooled);
    free(b->projected);
    free(b->logits);
    memset(b, 0, sizeof *b);
}

/* A block's record of sums: count, has_cls, has_dist, then sum, cls, dist (D each). */
static size_t record_len(int dim)
{
    return 3 + 3 * (size_t)dim;
}

/* This rank's blocks [lo, hi] and their records (hi < lo: none). */
static rv_status sums_of(const rv_vit_tokens *in, const float *y, int dim, int64_t windows,
                         int64_t *lo, int64_t *hi, double **rec)
{
    const size_t D = (size_t)dim, R = record_len(dim);
    *lo = INT64_MAX, *hi = -1, *rec = NULL;
    for (int64_t i = 0; i < in->len; i++) {
        const int64_t w = in->window[i];
        if (w < 0 || w >= windows)
            return rv_fail(RV_ERR_INVALID, "vit pool blocks: token %lld is in window %lld of %lld",
                           (long long)i, (long long)w, (long long)windows);
        *lo = w < *lo ? w : *lo;
        *hi = w > *hi ? w : *hi;
    }
    if (*hi < *lo)
        return RV_OK;
    const size_t n = (size_t)(*hi - *lo + 1);
    if (!(*rec = calloc(n * R, sizeof(double))))
        return rv_fail(RV_ERR_NOMEM, "vit pool blocks: out of memory for %zu blocks", n);
    for (int64_t i = 0; i < in->len; i++) {
        double *r = *rec + (size_t)(in->window[i] - *lo) * R;
        const float *row = y + (size_t)i * D;
        double *dst;
        if (in->modality[i] == RV_MOD_CLS) {
            /* special token 0 is the CLS, 1 AST's distillation token */
            const int dist = in->pos && in->pos[3 * i] == 1;
            r[dist ? 2 : 1] = 1;
            dst = r + 3 + (dist ? 2 : 1) * D;
        } else {
            r[0] += 1;
            dst = r + 3;
        }
        for (size_t c = 0; c < D; c++)
            dst[c] += row[c];
    }
    return RV_OK;
}

/* Rank 0: adds n records starting at block lo into the totals. */
static void add_records(double *tot, const double *rec, int64_t lo, int64_t n, int dim)
{
    const size_t R = record_len(dim);
    for (size_t k = 0; k < (size_t)n * R; k++)
        tot[(size_t)lo * R + k] += rec[k];
}

static rv_status finish(const double *tot, int64_t G, int dim, rv_vit_blocks *out)
{
    const size_t D = (size_t)dim, R = record_len(dim);
    out->dim = dim;
    out->blocks = G;
    out->tokens = calloc((size_t)G, sizeof(int64_t));
    out->mean = calloc((size_t)G * D, sizeof(float));
    out->has_cls = calloc((size_t)G, 1);
    out->cls = calloc((size_t)G * D, sizeof(float));
    out->has_dist = calloc((size_t)G, 1);
    out->dist = calloc((size_t)G * D, sizeof(float));
    if (!out->tokens || !out->mean || !out->has_cls || !out->cls || !out->has_dist || !out->dist)
        return rv_fail(RV_ERR_NOMEM, "vit pool blocks: out of memory for %lld blocks",
                       (long long)G);
    for (int64_t g = 0; g < G; g++) {
        const double *r = tot + (size_t)g * R;
        out->tokens[g] = (int64_t)r[0];
        out->has_cls[g] = r[1] > 0;
        out->has_dist[g] = r[2] > 0;
        for (size_t c = 0; c < D; c++) {
            /* A special token appears once per block: its sum is its row. */
            out->mean[g * D + c] = r[0] > 0 ? (float)(r[3 + c] / r[0]) : 0.0f;
            out->cls[g * D + c] = (float)r[3 + D + c];
            out->dist[g * D + c] = (float)r[3 + 2 * D + c];
        }
    }
    return RV_OK;
}

rv_status rv_vit_pool_blocks(rv_comm *comm, const rv_vit_tokens *in, const float *y, int dim,
                             int64_t windows, rv_vit_blocks *out)
{
    const size_t R = record_len(dim);
    int64_t lo, hi, *ranges = NULL;
    double *rec = NULL, *tot = NULL, *buf = NULL;
    rv_status st;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "vit pool blocks: out is NULL");
    memset(out, 0, sizeof *out);
    if (!comm || !in || dim <= 0 || windows < 0 ||
        (in->len > 0 && (!y || !in->modality || !in->window)))
        return rv_fail(RV_ERR_INVALID, "vit pool blocks: communicator, tokens with their "
                       "windows, outputs and dim > 0 (got %d) are required", dim);
    if ((st = sums_of(in, y, dim, windows, &lo, &hi, &rec)) != RV_OK)
        goto end;
    int64_t mine[2] = {lo, hi};
    if (!(ranges = malloc(sizeof(int64_t) * 2 * (size_t)comm->size))) {
        st = rv_fail(RV_ERR_NOMEM, "vit pool blocks: out of memory");
        goto end;
    }
    if ((st = rv_comm_allgather(comm, mine, ranges, sizeof mine)) != RV_OK)
        goto end;
    if (comm->rank != 0) {
        rv_comm_request *q = NULL;
        if (hi >= lo &&
            ((st = rv_comm_isend(comm, rec, sizeof(double) * (size_t)(hi - lo + 1) * R, 0,
                                 TAG_BLOCKS, &q)) != RV_OK ||
             (st = rv_comm_wait(&q)) != RV_OK))
            goto end;
        goto end;
    }
    if (!(tot = calloc((size_t)(windows > 0 ? windows : 1) * R, sizeof(double)))) {
        st = rv_fail(RV_ERR_NOMEM, "vit pool blocks: out of memory for %lld blocks",
                     (long long)windows);
        goto end;
    }
    if (hi >= lo)
        add_records(tot, rec, lo, hi - lo + 1, dim);
    for (int r = 1; r < comm->size; r++) {
        const int64_t rlo = ranges[2 * r], rhi = ranges[2 * r + 1];
        if (rhi < rlo)
            continue;
        const size_t bytes = sizeof(double) * (size_t)(rhi - rlo + 1) * R;
        rv_comm_request *q = NULL;
        free(buf);
        if (!(buf = malloc(bytes))) {
            st = rv_fail(RV_ERR_NOMEM, "vit pool blocks: out of memory");
            goto end;
        }
        if ((st = rv_comm_irecv(comm, buf, bytes, r, TAG_BLOCKS, &q)) != RV_OK ||
            (st = rv_comm_wait(&q)) != RV_OK)
            goto end;
        add_records(tot, buf, rlo, rhi - rlo + 1, dim);
    }
    st = finish(tot, windows, dim, out);
end:
    free(ranges);
    free(rec);
    free(tot);
    free(buf);
    if (st != RV_OK)
        rv_vit_blocks_free(out);
    return st;
}

rv_status rv_vit_pool_blocks_head(const rv_vit_model *m, rv_vit_blocks *b)
{
    if (!m || !b || (b->blocks > 0 && !b->mean))
        return rv_fail(RV_ERR_INVALID, "vit pool blocks head: model and block sums are required");
    const int D = m->cfg.dim, P = m->cfg.proj_dim, C = m->cfg.classes;
    const size_t G = (size_t)b->blocks;
    if (b->dim != D)
        return rv_fail(RV_ERR_INVALID, "vit pool blocks head: width %d, model width %d", b->dim, D);
    free(b->pooled);
    free(b->projected);
    free(b->logits);
    b->projected = b->logits = NULL;
    b->proj_dim = b->classes = 0;
    if (!(b->pooled = calloc(G * (size_t)D + 1, sizeof(float))) ||
        (P > 0 && !(b->projected = calloc(G * (size_t)P + 1, sizeof(float)))) ||
        (C > 0 && !(b->logits = calloc(G * (size_t)C + 1, sizeof(float)))))
        return rv_fail(RV_ERR_NOMEM, "vit pool blocks head: out of memory");
    rv_status st = RV_OK;
    /* Each block as a pooled sequence of its own, through the one pool head. */
    for (size_t g = 0; g < G && st == RV_OK; g++) {
        rv_vit_pooled one = {.dim = D, .tokens = b->tokens[g], .global = b->mean + g * D,
                             .has_cls = b->has_cls[g], .cls = b->cls + g * D,
                             .has_dist = b->has_dist[g], .dist = b->dist + g * D};
        if ((st = rv_vit_pool_head(m, &one)) != RV_OK)
            rv_fail(st, "block %zu: %s", g, rv_last_error());
        else {
            memcpy(b->pooled + g * D, one.pooled, sizeof(float) * (size_t)D);
            if (P > 0)
                memcpy(b->projected + g * (size_t)P, one.projected, sizeof(float) * (size_t)P);
            if (C > 0)
                memcpy(b->logits + g * (size_t)C, one.logits, sizeof(float) * (size_t)C);
        }
        free(one.pooled);
        free(one.projected);
        free(one.logits);
    }
    if (st == RV_OK)
        b->proj_dim = P, b->classes = C;
    return st;
}
