/* token_layout.c: the sequence order of rv_tokens.h as arithmetic. Windows are
 * decided on exact integers: tubelet g starts g*T*fps_den/fps_num seconds after
 * the grid start and audio step p starts p*stride*10000 microseconds after it
 * (its first sample, p*stride*160, at 1/16000 s each); a time window w is
 * [w*window_us, (w+1)*window_us) microseconds, a frame window w is tubelet w's
 * [w*T*fps_den/fps_num, (w+1)*T*fps_den/fps_num) seconds, so every rank and
 * every pass puts a token in the same window, whatever the chunking. With
 * cls_each_window each window starts with its cls special tokens ("lead").
 * Windows cut from the recording (window_positions) count their own items
 * instead (token_blocks.c); the order and the index arithmetic over the
 * windows' first items are the same for both. */
#include <math.h>

#include "tok_internal.h"

__extension__ typedef __int128 i128;

#define US 1000000

static i128 ceil_div(i128 a, i128 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

static int64_t clamp_i128(i128 v)
{
    return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* first g with g*T*fps_den*US >= w*window_us*fps_num (frame windows: w); cut
 * windows: the tubelets of the windows before w */
int64_t tok_tubelet_lo(const rv_tok_layout *L, int64_t w)
{
    if (tok_cut(L))
        return tok_block_before(L, TOK_TUBELETS, w);
    if (L->opts.frame_windows)
        return w;
    i128 num = (i128)w * L->window_us * L->ingest.fps_num;
    i128 den = (i128)L->opts.tubelet * L->ingest.fps_den * US;
    return clamp_i128(ceil_div(num, den));
}

/* first p with p*stride*10000 >= w*window_us; frame windows: first p with
 * p*stride*160 / 16000 >= w*T*fps_den / fps_num, i.e.
 * p*stride*fps_num >= w*T*fps_den*100 */
int64_t tok_step_lo(const rv_tok_layout *L, int64_t w)
{
    if (tok_cut(L))
        return tok_block_before(L, TOK_STEPS, w);
    if (L->opts.frame_windows) {
        i128 num = (i128)w * L->opts.tubelet * L->ingest.fps_den * 100;
        i128 den = (i128)L->opts.audio_stride * L->ingest.fps_num;
        return clamp_i128(ceil_div(num, den));
    }
    i128 num = (i128)w * L->window_us;
    i128 den = (i128)L->opts.audio_stride * 10000;
    return clamp_i128(ceil_div(num, den));
}

int64_t rv_tok_window_of_tubelet(const rv_tok_layout *L, int64_t g)
{
    if (tok_cut(L))
        return tok_block_of_item(L, TOK_TUBELETS, g);
    if (L->opts.frame_windows)
        return g;
    i128 num = (i128)g * L->opts.tubelet * L->ingest.fps_den * US;
    i128 den = (i128)L->window_us * L->ingest.fps_num;
    return clamp_i128(num / den);
}

int64_t rv_tok_window_of_step(const rv_tok_layout *L, int64_t p)
{
    if (tok_cut(L))
        return tok_block_of_item(L, TOK_STEPS, p);
    if (L->opts.frame_windows) {
        i128 num = (i128)p * L->opts.audio_stride * L->ingest.fps_num;
        i128 den = (i128)L->opts.tubelet * L->ingest.fps_den * 100;
        return clamp_i128(num / den);
    }
    i128 num = (i128)p * L->opts.audio_stride * 10000;
    return clamp_i128(num / L->window_us);
}

/* Special tokens leading each window: cls with cls_each_window, else none
 * (the leading cls of the sequence are before window 0's start). */
int64_t tok_lead(const rv_tok_layout *L)
{
    return L->opts.cls_each_window ? L->opts.cls : 0;
}

double rv_tok_window_time(const rv_tok_layout *L, int64_t w)
{
    if (L->opts.frame_windows)
        return rv_ingest_frame_time(&L->ingest, w * L->opts.tubelet);
    /* exact integers (< 2^53 us, 285 years), so one correctly rounded division */
    int64_t start_us = llround(L->ingest.start_s * US);
    return (double)(start_us + w * L->window_us) / (double)US;
}

static int64_t mul_or_open(int64_t a, int64_t n)
{
    return n == RV_TOK_OPEN ? RV_TOK_OPEN : a * n;
}

void tok_layout_fill(rv_tok_layout *L, const rv_tok_opts *to, const rv_ingest_opts *io,
                     int64_t nframes, int64_t nsamples)
{
    const int open = nframes == RV_TOK_OPEN;
    L->opts = *to;
    L->ingest = *io;
    L->ingest.first_frame = 0;
    L->ingest.max_frames = 0;
    L->nframes = to->video ? (nframes > 0 ? nframes : 0) : 0;
    L->nsamples = to->audio ? (nsamples > 0 ? nsamples : 0) : 0;
    L->grid = io->size / to->patch;
    L->per_tubelet = L->grid * L->grid;
    L->bands = rv_tok_audio_bands(to);
    L->video_dim = (int64_t)to->tubelet * to->patch * to->patch * 3;
    L->audio_dim = (int64_t)to->audio_freq * to->audio_time;
    if (to->frame_windows) {
        L->window_us = 0;
    } else {
        L->window_us = llround(to->window_s * US);
        if (L->window_us < 1)
            L->window_us = 1;
    }
    if (L->nframes == RV_TOK_OPEN)
        L->tubelets = RV_TOK_OPEN;
    else if (tok_cut(L))
        L->tubelets = tok_block_before(L, TOK_TUBELETS, INT64_MAX);
    else
        L->tubelets = (L->nframes + to->tubelet - 1) / to->tubelet;
    if (L->nsamples == RV_TOK_OPEN) {
        L->fbank_frames = L->steps = RV_TOK_OPEN;
    } else if (tok_cut(L)) {
        L->fbank_frames = tok_block_before(L, TOK_FBANKS, INT64_MAX);
        L->steps = tok_block_before(L, TOK_STEPS, INT64_MAX);
    } else {
        L->fbank_frames = L->nsamples >= RV_FBANK_LEN
                              ? 1 + (L->nsamples - RV_FBANK_LEN) / RV_FBANK_HOP : 0;
        L->steps = L->fbank_frames >= to->audio_time
                       ? 1 + (L->fbank_frames - to->audio_time) / to->audio_stride : 0;
    }
    L->nvideo = mul_or_open(L->per_tubelet, L->tubelets);
    L->naudio = mul_or_open(L->bands, L->steps);
    if (open || L->nvideo == RV_TOK_OPEN || L->naudio == RV_TOK_OPEN) {
        L->windows = RV_TOK_OPEN;
        L->seq = RV_TOK_OPEN;
        L->nspecial = to->cls_each_window && to->cls ? RV_TOK_OPEN : to->cls;
        return;
    }
    int64_t wv = L->tubelets > 0 ? rv_tok_window_of_tubelet(L, L->tubelets - 1) + 1 : 0;
    int64_t wa = L->steps > 0 ? rv_tok_window_of_step(L, L->steps - 1) + 1 : 0;
    if (tok_cut(L)) {
        wv = tok_block_last(L, TOK_TUBELETS) + 1;
        wa = tok_block_last(L, TOK_STEPS) + 1;
    }
    L->windows = tok_max(wv, wa);
    L->nspecial = to->cls_each_window ? L->windows * to->cls : to->cls;
    L->seq = L->nspecial + L->nvideo + L->naudio;
}

rv_status rv_tok_layout_make(const rv_tok_opts *to, const rv_ingest_opts *io,
                             int64_t nframes, int64_t nsamples, rv_tok_layout *out)
{
    rv_status st = rv_tok_opts_check(to);
    if (st != RV_OK)
        return st;
    if ((st = rv_ingest_opts_check(io)) != RV_OK)
        return st;
    if (to->patch > io->size || io->size % to->patch)
        return rv_fail(RV_ERR_INVALID, "tokenize: patch %d px must divide the frame size %d px",
                       to->patch, io->size);
    if (nframes < 0 || nsamples < 0)
        return rv_fail(RV_ERR_INVALID, "tokenize: negative frame (%lld) or sample (%lld) count",
                       (long long)nframes, (long long)nsamples);
    /* Keep every token index, position and patch offset well inside int64. */
    if (nframes > ((int64_t)1 << 40) || nsamples > ((int64_t)1 << 45))
        return rv_fail(RV_ERR_UNSUPPORTED, "tokenize: %lld frames / %lld samples is too long",
                       (long long)nframes, (long long)nsamples);
    out->t0 = 0; /* sequence time until the caller places it */
    tok_layout_fill(out, to, io, nframes, nsamples);
    return RV_OK;
}

int64_t rv_tok_window_start(const rv_tok_layout *L, int64_t w)
{
    const int64_t lead = tok_lead(L);
    if (w <= 0)
        return lead ? 0 : L->opts.cls;
    int64_t g = tok_min(tok_tubelet_lo(L, w), L->tubelets);
    int64_t p = tok_min(tok_step_lo(L, w), L->steps);
    int64_t specials = lead ? lead * w : L->opts.cls;
    return specials + (int64_t)L->per_tubelet * g + (int64_t)L->bands * p;
}

void rv_tok_window_items(const rv_tok_layout *L, int64_t w, int64_t *g0, int64_t *g1,
                         int64_t *p0, int64_t *p1)
{
    *g0 = tok_min(tok_tubelet_lo(L, w), L->tubelets);
    *g1 = tok_min(tok_tubelet_lo(L, w + 1), L->tubelets);
    *p0 = tok_min(tok_step_lo(L, w), L->steps);
    *p1 = tok_min(tok_step_lo(L, w + 1), L->steps);
}

int64_t rv_tok_window_of(const rv_tok_layout *L, int64_t i)
{
    /* The largest w with start(w) <= i: empty windows share their start with
     * the next one, and the largest picks the window that holds i. (With
     * cls_each_window no window is empty unless cls is 0.) */
    int64_t lo = 0, hi = L->windows > 0 ? L->windows - 1 : 0;
    if (i < rv_tok_window_start(L, 0))
        return 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (rv_tok_window_start(L, mid) <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Token i's window w, its offset off from the window's first video token
 * (negative: special token off + lead of w), the window's first tubelet g0,
 * its video tokens nv and its first audio step p0. */
static void window_split(const rv_tok_layout *L, int64_t i, int64_t *w, int64_t *off,
                         int64_t *g0, int64_t *nv, int64_t *p0)
{
    int64_t g1, p1;
    *w = rv_tok_window_of(L, i);
    *off = i - rv_tok_window_start(L, *w) - tok_lead(L);
    rv_tok_window_items(L, *w, g0, &g1, p0, &p1);
    *nv = (int64_t)L->per_tubelet * (g1 - *g0);
}

int64_t rv_tok_video_before(const rv_tok_layout *L, int64_t i)
{
    if (i >= L->seq)
        return L->nvideo;
    if (i <= L->opts.cls)
        return 0;
    int64_t w, off, g0, nv, p0;
    window_split(L, i, &w, &off, &g0, &nv, &p0);
    return (int64_t)L->per_tubelet * g0 + tok_min(tok_max(off, 0), nv);
}

int64_t rv_tok_audio_before(const rv_tok_layout *L, int64_t i)
{
    if (i >= L->seq)
        return L->naudio;
    if (i <= L->opts.cls)
        return 0;
    int64_t w, off, g0, nv, p0;
    window_split(L, i, &w, &off, &g0, &nv, &p0);
    return (int64_t)L->bands * p0 + tok_max(0, off - nv);
}

int64_t tok_specials_before(const rv_tok_layout *L, int64_t i)
{
    const int64_t lead = tok_lead(L);
    if (!lead)
        return tok_max(0, tok_min(i, L->opts.cls));
    if (i <= 0)
        return 0;
    if (i >= L->seq)
        return L->nspecial;
    int64_t w = rv_tok_window_of(L, i);
    return lead * w + tok_min(i - rv_tok_window_start(L, w), lead);
}

int64_t rv_tok_index_video(const rv_tok_layout *L, int64_t g, int part)
{
    int64_t w = rv_tok_window_of_tubelet(L, g);
    int64_t glo = tok_min(tok_tubelet_lo(L, w), L->tubelets);
    return rv_tok_window_start(L, w) + tok_lead(L) + (int64_t)L->per_tubelet * (g - glo) + part;
}

int64_t rv_tok_index_audio(const rv_tok_layout *L, int64_t p, int band)
{
    int64_t w = rv_tok_window_of_step(L, p), g0, g1, p0, p1;
    rv_tok_window_items(L, w, &g0, &g1, &p0, &p1);
    return rv_tok_window_start(L, w) + tok_lead(L) + (int64_t)L->per_tubelet * (g1 - g0) +
           (int64_t)L->bands * (p - p0) + band;
}

/* Audio sample j is at start + j / 16000 s: one correctly rounded division of
 * exact integers (microseconds * 16 and samples * 1000 are both 1/16e6 s). */
static double sample_time(const rv_tok_layout *L, int64_t j)
{
    int64_t start_us = llround(L->ingest.start_s * US);
    return (double)(start_us * 16 + j * 1000) / 16e6;
}

void tok_tubelet_frames(const rv_tok_layout *L, int64_t g, tok_cursor *c, int64_t *k0,
                        int64_t *k1)
{
    const int64_t T = L->opts.tubelet;
    if (!tok_cut(L)) {
        *k0 = g * T;
        *k1 = *k0 + T;
        return;
    }
    int64_t w = tok_block_item(L, TOK_TUBELETS, g, c);
    int64_t g0 = c ? c->lo : tok_block_before(L, TOK_TUBELETS, w);
    *k0 = tok_block_edge(L, TOK_TUBELETS, w) + (g - g0) * T;
    *k1 = tok_min(*k0 + T, tok_block_edge(L, TOK_TUBELETS, w + 1));
}

int64_t tok_fbank_sample(const rv_tok_layout *L, int64_t f, tok_cursor *c)
{
    if (!tok_cut(L))
        return f * RV_FBANK_HOP;
    int64_t w = tok_block_item(L, TOK_FBANKS, f, c);
    int64_t f0 = c ? c->lo : tok_block_before(L, TOK_FBANKS, w);
    return tok_block_edge(L, TOK_FBANKS, w) + (f - f0) * RV_FBANK_HOP;
}

int64_t tok_step_fbank(const rv_tok_layout *L, int64_t p, tok_cursor *c)
{
    if (!tok_cut(L))
        return p * L->opts.audio_stride;
    int64_t w = tok_block_item(L, TOK_STEPS, p, c);
    int64_t p0 = c ? c->lo : tok_block_before(L, TOK_STEPS, w);
    return tok_block_before(L, TOK_FBANKS, w) + (p - p0) * L->opts.audio_stride;
}

int64_t tok_window_of_frame(const rv_tok_layout *L, int64_t k)
{
    if (tok_cut(L))
        return tok_block_of_edge(L, TOK_TUBELETS, k);
    return rv_tok_window_of_tubelet(L, k / L->opts.tubelet);
}

void tok_tubelet_time(const rv_tok_layout *L, int64_t g, double t[2])
{
    int64_t k0, k1;
    tok_tubelet_frames(L, g, NULL, &k0, &k1);
    t[0] = rv_ingest_frame_time(&L->ingest, k0);
    t[1] = rv_ingest_frame_time(&L->ingest, k0 + L->opts.tubelet);
}

void tok_step_time(const rv_tok_layout *L, int64_t p, double t[2])
{
    int64_t j0 = tok_fbank_sample(L, tok_step_fbank(L, p, NULL), NULL);
    int64_t j1 = j0 + (int64_t)(L->opts.audio_time - 1) * RV_FBANK_HOP + RV_FBANK_LEN;
    t[0] = sample_time(L, j0);
    t[1] = sample_time(L, j1);
}

double rv_tok_start_time(const rv_tok_layout *L)
{
    return L->t0 + L->ingest.start_s;
}

/* Token i in sequence time; rv_tok_info places it on the container's clock. */
static void token_info(const rv_tok_layout *L, int64_t i, rv_token *out)
{
    if (!tok_lead(L) && i < L->opts.cls) { /* the class (0) or distillation (1) token */
        double ts = rv_ingest_frame_time(&L->ingest, 0);
        *out = (rv_token){.modality = RV_MOD_CLS, .pos = {i, 0, 0}, .seq_time = {ts, ts},
                          .item = -1};
        return;
    }
    int64_t w, off, g0, nv, p0;
    window_split(L, i, &w, &off, &g0, &nv, &p0);
    const int rel = L->opts.window_positions;
    if (off < 0) { /* special token off + lead of window w */
        double tw = rv_tok_window_time(L, w);
        *out = (rv_token){.modality = RV_MOD_CLS, .pos = {off + tok_lead(L), 0, 0},
                          .seq_time = {tw, tw}, .item = -1, .window = w};
    } else if (off < nv) {
        int64_t g = g0 + off / L->per_tubelet;
        int part = (int)(off % L->per_tubelet);
        *out = (rv_token){.modality = RV_MOD_VIDEO,
                          .pos = {rel ? g - g0 : g, part / L->grid, part % L->grid},
                          .item = g,
                          .part = part,
                          .window = w};
        tok_tubelet_time(L, g, out->seq_time);
    } else {
        int64_t a = off - nv, p = p0 + a / L->bands;
        int band = (int)(a % L->bands);
        *out = (rv_token){.modality = RV_MOD_AUDIO, .pos = {rel ? p - p0 : p, band, 0},
                          .item = p, .part = band, .window = w};
        tok_step_time(L, p, out->seq_time);
    }
}

rv_status rv_tok_info(const rv_tok_layout *L, int64_t i, rv_token *out)
{
    if (i < 0 || i >= L->seq)
        return rv_fail(RV_ERR_INVALID, "tokenize: token %lld outside the sequence of %lld",
                       (long long)i, (long long)L->seq);
    token_info(L, i, out);
    out->time[0] = L->t0 + out->seq_time[0];
    out->time[1] = L->t0 + out->seq_time[1];
    return RV_OK;
}
