/* tokenize_collect.h: gathers the batches of a tokenize pass into one table
 * indexed by global token position (modality, position, both times, window,
 * patch values)
 * plus the fbank rows by frame index, so tests can compare passes token by
 * token; a plain reference cut of audio patches from fbank rows; and a
 * synthetic recording fed to the engine in chunks the way ingest hands them
 * out. Header-only; every helper is static. */
#ifndef RV_TEST_TOKENIZE_COLLECT_H
#define RV_TEST_TOKENIZE_COLLECT_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
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
    double *time;         /* (seq, 2) on the container's clock */
    double *seq_time;     /* (seq, 2) sequence time */
    int64_t *win;         /* (seq) window index */
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
    t->seq_time = calloc((size_t)seq * 2 + 2, sizeof(double));
    t->win = calloc((size_t)seq + 1, sizeof(int64_t));
    t->patch = calloc((size_t)(seq * pd) + 1, sizeof(float));
    t->nfbank = nfbank;
    t->fb_have = calloc((size_t)nfbank + 1, 1);
    t->fbank = calloc((size_t)nfbank * 128 + 1, sizeof(float));
    t->ordered = 1;
    t->next_first = -1;
    cr_assert(t->have && t->mod && t->pos && t->time && t->seq_time && t->win && t->patch &&
              t->fb_have &&
              t->fbank);
}

TC_HELPER void tt_free(tok_table *t)
{
    free(t->have);
    free(t->mod);
    free(t->pos);
    free(t->time);
    free(t->seq_time);
    free(t->win);
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
    cr_assert(b->count == 0 || b->window, "a batch of %lld tokens without window indices",
              (long long)b->count);
    for (int64_t i = 0; i < b->count; i++) {
        int64_t g = b->first + i;
        cr_assert(g >= 0 && g < t->seq, "token %lld outside [0, %lld)", (long long)g,
                  (long long)t->seq);
        t->have[g]++;
        t->mod[g] = b->modality[i];
        memcpy(t->pos + 3 * g, b->pos + 3 * i, 3 * sizeof(int64_t));
        memcpy(t->time + 2 * g, b->time + 2 * i, 2 * sizeof(double));
        memcpy(t->seq_time + 2 * g, b->seq_time + 2 * i, 2 * sizeof(double));
        t->win[g] = b->window[i];
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

/* Token g of a and of b are the same (modality, position, both times, window,
 * patch bits). */
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
    if (memcmp(a->seq_time + 2 * g, b->seq_time + 2 * g, 2 * sizeof(double))) {
        snprintf(why, n, "sequence time [%.17g %.17g] vs [%.17g %.17g]", a->seq_time[2 * g],
                 a->seq_time[2 * g + 1], b->seq_time[2 * g], b->seq_time[2 * g + 1]);
        return 0;
    }
    if (a->win[g] != b->win[g]) {
        snprintf(why, n, "window %lld vs %lld", (long long)a->win[g], (long long)b->win[g]);
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

/* Audio patch (p, band) of L written plainly from fbank rows (rows[f * 128 +
 * bin] is fbank frame f): mel bins band * fstride + f, frames p * stride + w,
 * (f, w) with w fastest. The normalisation is the library's expression,
 * (x - mean) * (1 / (2 std)), so a comparison is bit for bit and any
 * difference is a wrong bin or frame. */
TC_HELPER void tt_audio_patch_ref(const rv_tok_layout *L, const float *rows, int64_t p, int band,
                                  float *out)
{
    const rv_tok_opts *o = &L->opts;
    const int F = o->audio_freq, W = o->audio_time;
    const int fs = o->audio_fstride ? o->audio_fstride : F;
    const float scale = 1.0f / (2.0f * o->audio_std);
    for (int f = 0; f < F; f++)
        for (int w = 0; w < W; w++) {
            int64_t frame = p * o->audio_stride + w;
            int bin = band * fs + f;
            out[f * W + w] = (rows[frame * 128 + bin] - o->audio_mean) * scale;
        }
}

/* A synthetic recording: nframes (S, S, 3) frames and nsamples of 16 kHz audio,
 * from a fixed generator (the same bytes on every machine). */
typedef struct tt_media {
    int64_t nframes, nsamples;
    int size;
    uint8_t *frames;
    float *audio;
    double *times; /* zeros: the engine takes times from the layout */
    double t0;     /* the chunks' t0 (0 unless a test sets it) */
} tt_media;

TC_HELPER uint32_t tt_lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*x >> 33);
}

TC_HELPER void tt_media_make(tt_media *m, int64_t nframes, int size, int64_t nsamples, uint64_t seed)
{
    const size_t fsize = (size_t)size * size * 3;
    memset(m, 0, sizeof *m);
    m->nframes = nframes;
    m->nsamples = nsamples;
    m->size = size;
    m->frames = malloc(fsize * (size_t)nframes + 1);
    m->audio = malloc(sizeof(float) * (size_t)nsamples + 1);
    m->times = calloc((size_t)nframes + 1, sizeof(double));
    cr_assert(m->frames && m->audio && m->times);
    uint64_t x = seed;
    for (size_t i = 0; i < fsize * (size_t)nframes; i++)
        m->frames[i] = (uint8_t)(tt_lcg(&x) >> 24);
    for (int64_t i = 0; i < nsamples; i++)
        m->audio[i] = (float)((int)(tt_lcg(&x) >> 16) - 32768) / 65536.0f;
}

TC_HELPER void tt_media_free(tt_media *m)
{
    free(m->frames);
    free(m->audio);
    free(m->times);
    memset(m, 0, sizeof *m);
}

/* A part of m as a recording of its own: frames [k0, k0 + nframes) and samples
 * [j0, j0 + nsamples) of m, shared (not copied; do not free the view). */
TC_HELPER tt_media tt_media_view(const tt_media *m, int64_t k0, int64_t nframes, int64_t j0,
                                 int64_t nsamples)
{
    const size_t fsize = (size_t)m->size * m->size * 3;
    cr_assert(k0 >= 0 && nframes >= 0 && k0 + nframes <= m->nframes, "frames [%lld, +%lld) "
              "outside the %lld of the recording", (long long)k0, (long long)nframes,
              (long long)m->nframes);
    cr_assert(j0 >= 0 && nsamples >= 0 && j0 + nsamples <= m->nsamples, "samples [%lld, +%lld) "
              "outside the %lld of the recording", (long long)j0, (long long)nsamples,
              (long long)m->nsamples);
    tt_media v = {.nframes = nframes, .nsamples = nsamples, .size = m->size,
                  .frames = m->frames + (size_t)k0 * fsize, .audio = m->audio + j0,
                  .times = m->times, .t0 = m->t0};
    return v;
}

/* One past the last grid index holding a frame or a sample of m. */
TC_HELPER int64_t tt_media_grid_end(const rv_ingest_opts *io, const tt_media *m)
{
    int64_t k = m->nframes;
    while (rv_ingest_audio_index(io, k) < m->nsamples)
        k++;
    return k;
}

/* Pushes grid indices [k0, k1) of m into tk as ingest would: each chunk some
 * grid indices (sizes[] in turn), their frames and the samples [J(k), J(k+n))
 * up to the recording's end. The engine finishes when finish is 1. */
TC_HELPER void tt_feed(rv_tokenizer *tk, const rv_ingest_opts *io, const tt_media *m, int64_t k0,
                       int64_t k1, const int *sizes, int nsizes, int finish)
{
    const size_t fsize = (size_t)m->size * m->size * 3;
    for (int64_t k = k0, c = 0; k < k1; c++) {
        int64_t n = sizes[c % nsizes];
        n = n < k1 - k ? n : k1 - k;
        int64_t f1 = k + n < m->nframes ? k + n : m->nframes;
        int64_t j0 = rv_ingest_audio_index(io, k), j1 = rv_ingest_audio_index(io, k + n);
        j0 = j0 < m->nsamples ? j0 : m->nsamples;
        j1 = j1 < m->nsamples ? j1 : m->nsamples;
        rv_ingest_chunk ch = {.first_frame = k,
                              .nframes = f1 > k ? (int)(f1 - k) : 0,
                              .size = m->size,
                              .t0 = m->t0,
                              .frames = f1 > k ? m->frames + (size_t)k * fsize : NULL,
                              .frame_time = m->times,
                              .source_time = m->times,
                              .first_sample = j0,
                              .nsamples = j1 - j0,
                              .audio = m->nsamples > 0 ? m->audio + j0 : NULL,
                              .last = k + n >= k1};
        rv_status st = rv_tokenizer_push(tk, &ch);
        cr_assert_eq(st, RV_OK, "push of grid [%lld, %lld): %s", (long long)k, (long long)(k + n),
                     rv_last_error());
        k += n;
    }
    if (finish)
        cr_assert_eq(rv_tokenizer_finish(tk), RV_OK, "finish: %s", rv_last_error());
}

#endif
