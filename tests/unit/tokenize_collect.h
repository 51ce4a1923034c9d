/* tokenize_collect.h: gathers the batches of a tokenize pass into one table
 * indexed by global token position (modality, position, time, patch values)
 * plus the fbank rows by frame index, so tests can compare passes token by
 * token. Header-only; every helper is static. */
#ifndef RV_TEST_TOKENIZE_COLLECT_H
#define RV_TEST_TOKENIZE_COLLECT_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rv_tokenize.h"

#define TC_HELPER __attribute__((unused)) static

typedef struct tok_table {
    int64_t seq;          /* slots (the layout's sequence length) */
    int64_t vdim, adim;
    uint8_t *have;        /* (seq) times each token was handed out */
    uint8_t *mod;         /* (seq) */
    int64_t *pos;         /* (seq, 3) */
    double *time;         /* (seq, 2) */
    float *patch;         /* (seq, max(vdim, adim)) */
    int64_t nfbank;       /* slots for fbank rows */
    uint8_t *fb_have;     /* (nfbank) */
    float *fbank;         /* (nfbank, 128) */
    int64_t batches, last_batches, next_first;
    int ordered;          /* batches came in increasing, contiguous order */
} tok_table;

TC_HELPER void tt_init(tok_table *t, int64_t seq, int64_t vdim, int64_t adim, int64_t nfbank)
{
    memset(t, 0, sizeof *t);
    t->seq = seq;
    t->vdim = vdim;
    t->adim = adim;
    int64_t pd = vdim > adim ? vdim : adim;
    t->have = calloc((size_t)seq + 1, 1);
    t->mod = calloc((size_t)seq + 1, 1);
    t->pos = calloc((size_t)seq * 3 + 3, sizeof(int64_t));
    t->time = calloc((size_t)seq * 2 + 2, sizeof(double));
    t->patch = calloc((size_t)(seq * pd) + 1, sizeof(float));
    t->nfbank = nfbank;
    t->fb_have = calloc((size_t)nfbank + 1, 1);
    t->fbank = calloc((size_t)nfbank * 128 + 1, sizeof(float));
    t->ordered = 1;
    t->next_first = -1;
    cr_assert(t->have && t->mod && t->pos && t->time && t->patch && t->fb_have && t->fbank);
}

TC_HELPER void tt_free(tok_table *t)
{
    free(t->have);
    free(t->mod);
    free(t->pos);
    free(t->time);
    free(t->patch);
    free(t->fb_have);
    free(t->fbank);
    memset(t, 0, sizeof *t);
}

/* The batch callback: user is a tok_table. */
TC_HELPER rv_status tt_collect(const rv_tok_batch *b, void *user)
{
    tok_table *t = user;
    int64_t pd = t->vdim > t->adim ? t->vdim : t->adim;
    int64_t v = 0, a = 0;
    t->batches++;
    t->last_batches += b->last;
    if (b->count > 0) {
        if (t->next_first >= 0 && b->first != t->next_first)
            t->ordered = 0;
        t->next_first = b->first + b->count;
    }
    for (int64_t i = 0; i < b->count; i++) {
        int64_t g = b->first + i;
        cr_assert(g >= 0 && g < t->seq, "token %lld outside [0, %lld)", (long long)g,
                  (long long)t->seq);
        t->have[g]++;
        t->mod[g] = b->modality[i];
        memcpy(t->pos + 3 * g, b->pos + 3 * i, 3 * sizeof(int64_t));
        memcpy(t->time + 2 * g, b->time + 2 * i, 2 * sizeof(double));
        if (b->modality[i] == RV_MOD_VIDEO) {
            memcpy(t->patch + g * pd, b->video + v * t->vdim, sizeof(float) * (size_t)t->vdim);
            v++;
        } else if (b->modality[i] == RV_MOD_AUDIO) {
            memcpy(t->patch + g * pd, b->audio + a * t->adim, sizeof(float) * (size_t)t->adim);
            a++;
        }
    }
    cr_assert_eq(v, b->nvideo);
    cr_assert_eq(a, b->naudio);
    for (int64_t f = 0; f < b->nfbank; f++) {
        int64_t fi = b->fbank_first + f;
        cr_assert(fi >= 0 && fi < t->nfbank, "fbank frame %lld outside [0, %lld)", (long long)fi,
                  (long long)t->nfbank);
        t->fb_have[fi]++;
        memcpy(t->fbank + fi * 128, b->fbank + f * 128, 128 * sizeof(float));
    }
    return RV_OK;
}

/* Token g of a and of b are the same (modality, position, time, patch bits). */
TC_HELPER int tt_same_token(const tok_table *a, const tok_table *b, int64_t g, char *why,
                            size_t n)
{
    int64_t pd = a->vdim > a->adim ? a->vdim : a->adim;
    if (a->mod[g] != b->mod[g]) {
        snprintf(why, n, "modality %d vs %d", a->mod[g], b->mod[g]);
        return 0;
    }
    if (memcmp(a->pos + 3 * g, b->pos + 3 * g, 3 * sizeof(int64_t))) {
        snprintf(why, n, "position (%lld %lld %lld) vs (%lld %lld %lld)",
                 (long long)a->pos[3 * g], (long long)a->pos[3 * g + 1], (long long)a->pos[3 * g + 2],
                 (long long)b->pos[3 * g], (long long)b->pos[3 * g + 1], (long long)b->pos[3 * g + 2]);
        return 0;
    }
    if (memcmp(a->time + 2 * g, b->time + 2 * g, 2 * sizeof(double))) {
        snprintf(why, n, "time [%.17g %.17g] vs [%.17g %.17g]", a->time[2 * g], a->time[2 * g + 1],
                 b->time[2 * g], b->time[2 * g + 1]);
        return 0;
    }
    int64_t d = a->mod[g] == RV_MOD_VIDEO ? a->vdim : a->mod[g] == RV_MOD_AUDIO ? a->adim : 0;
    for (int64_t i = 0; i < d; i++)
        if (memcmp(&a->patch[g * pd + i], &b->patch[g * pd + i], sizeof(float))) {
            snprintf(why, n, "patch value %lld: %.9g vs %.9g", (long long)i, a->patch[g * pd + i],
                     b->patch[g * pd + i]);
            return 0;
        }
    return 1;
}

#endif
