/* tokenizer.c: the tokenizer engine (rv_tokenize.h). Chunks come in; frames are
 * gathered into tubelets, audio into fbank frames and audio patches; a window
 * is handed out once every item it holds is made (all its tubelets, and all
 * its audio steps, whose patches reach past the window's end). Items are made
 * only inside the pass's interest: tubelets [gA, gB), audio steps [pA, pB),
 * fbank frames [fA, fB), so a rank's pass touches only what its tokens read.
 *
 * Every window goes out as one batch (the sequence's leading special tokens
 * with the first), each token with its window index; with cls_each_window the
 * window's own special tokens lead it, also in a window without items, and a
 * pass whose range starts or ends inside a window hands out its part of them.
 *
 * Open pass: the counts are RV_TOK_OPEN until finish; a window is only handed
 * out once the items up to the next window exist, and then its start index and
 * contents are the same in the closed layout (every earlier window is full),
 * so the running order is the final one. With cls_each_window a window is
 * also held back until an item of it or of a later window exists: an empty
 * window after the last item is not in the sequence, and its special tokens
 * must not go out.
 *
 * Windows cut from the recording (window_positions): a tubelet ends early
 * where its window's frames end (its last frame repeated, as at the
 * recording's end), fbank frames restart at each window's first sample and
 * audio steps at its first fbank frame; where each item starts comes from the
 * layout (tok_tubelet_frames, tok_fbank_sample, tok_step_fbank), with a
 * cursor per kind so consecutive items cost O(1).
 *
 * Times: each token's sequence time comes from the layout's arithmetic, its
 * time on the container's clock is the layout's t0 plus it (an open pass takes
 * t0 from its first chunk). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_clock.h"
#include "rv_fbank.h"
#include "rv_patch.h"
#include "rv_tokenize.h"
#include "tok_internal.h"

struct rv_tokenizer {
    rv_tok_layout L;
    int open;                  /* counts still unknown (open pass before finish) */
    int t0_pending;            /* open pass: t0 comes with the first chunk */
    int64_t tok_a, tok_b;      /* tokens handed out: [tok_a, tok_b) */
    int64_t gA, gB, pA, pB;    /* tubelets and audio steps to make */
    int64_t fA, fB;            /* fbank frames to compute */
    int64_t kA, kB;            /* frames they read */
    int64_t jA, jB;            /* samples they read */
    int64_t w_next, w_end;     /* windows still to hand out */
    int64_t lead;              /* special tokens leading each window (cls_each_window) */
    int64_t cls_first;         /* the leading special tokens of the sequence still to */
    int cls_pending;           /* hand out: [cls_first, cls_first + cls_pending) */
    rv_tok_batch_fn fn;
    void *user;
    float lut[3][256];
    rv_fbank *fb;
    size_t fsize;              /* bytes per frame */
    /* video */
    uint8_t *tub;              /* (T, S, S, 3) frames of tubelet g_next so far */
    int tub_n;
    int64_t g_next;
    int64_t tub_k0, tub_k1;    /* tubelet g_next's frames [tub_k0, tub_k1) */
    tok_cursor vcur, fcur, pcur; /* the windows of tubelets, fbank frames, steps */
    uint8_t *last;             /* the latest frame inside the layout, for padding */
    int have_last;
    int64_t k_seen;            /* one past the highest frame index seen */
    float *vp;                 /* made tubelets [vp_g0, g_next): (Q, video_dim) each */
    int64_t vp_g0, vp_cap;
    /* audio */
    float *sb;                 /* samples [sb_j0, sb_j0 + sb_n) */
    int64_t sb_j0, sb_n, sb_cap;
    int64_t j_seen;            /* one past the highest sample index seen */
    float *fr;                 /* fbank rows [fr_f0, fr_f0 + fr_n) */
    int64_t fr_f0, fr_n, fr_cap;
    int64_t f_next, f_reported;
    float *ap;                 /* made audio steps [ap_p0, p_next): (bands, audio_dim) */
    int64_t ap_p0, ap_cap, p_next;
    /* batch scratch */
    uint8_t *mod;
    int64_t *pos;
    double *time;              /* container's clock */
    double *seqt;              /* sequence time */
    int64_t *win;
    int64_t meta_cap;
    rv_tok_stats st;
    double cb_s;               /* CPU time spent in the callback */
    int finished;
};

/* Grows *p (elements of size elem) to hold at least need. */
static rv_status grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return RV_OK;
    int64_t c = *cap > 0 ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return rv_fail(RV_ERR_NOMEM, "tokenize: out of memory (%lld x %zu bytes)", (long long)c,
                       elem);
    *p = q;
    *cap = c;
    return RV_OK;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The frames of tubelet g_next, once it is one to make. */
static void next_tubelet(rv_tokenizer *t)
{
    if (t->g_next < t->gB)
        tok_tubelet_frames(&t->L, t->g_next, &t->vcur, &t->tub_k0, &t->tub_k1);
}

/* Derived ranges from [gA, gB), [pA, pB), [fA, fB). */
static void set_needs(rv_tokenizer *t)
{
    const rv_tok_layout *L = &t->L;
    int64_t k0, k1;
    if (t->gB > t->gA) {
        tok_tubelet_frames(L, t->gA, NULL, &t->kA, &k1);
        if (t->gB == RV_TOK_OPEN) {
            t->kB = RV_TOK_OPEN;
        } else {
            tok_tubelet_frames(L, t->gB - 1, NULL, &k0, &k1);
            t->kB = tok_min(k1, L->nframes);
        }
    } else {
        t->kA = t->kB = t->gA * L->opts.tubelet; /* no frame to read */
    }
    if (t->kB < t->kA)
        t->kB = t->kA;
    if (t->fB > t->fA) {
        t->jA = tok_fbank_sample(L, t->fA, NULL);
        t->jB = t->fB == RV_TOK_OPEN ? RV_TOK_OPEN
                                     : tok_fbank_sample(L, t->fB - 1, NULL) + RV_FBANK_LEN;
    } else {
        t->jA = t->jB = t->fA * RV_FBANK_HOP; /* no sample to read */
    }
}

rv_status rv_tokenizer_new(const rv_tok_layout *plan, int64_t first, int64_t count,
                           const rv_tok_opts *to, const rv_ingest_opts *io, int has_video,
                           int has_audio, rv_tok_batch_fn fn, void *user, rv_tokenizer **out)
{
    rv_status st = RV_OK;
    *out = NULL;
    if (!fn)
        return rv_fail(RV_ERR_INVALID, "tokenize: no batch callback");
    rv_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return rv_fail(RV_ERR_NOMEM, "tokenize: out of memory");
    t->fn = fn;
    t->user = user;
    if (plan) {
        rv_tok_span sp;
        t->L = *plan;
        if ((st = rv_tok_span_of(plan, first, count, &sp)) != RV_OK)
            goto end;
        t->tok_a = first;
        t->tok_b = first + count;
        t->gA = sp.tubelet0;
        t->gB = sp.tubelet1;
        t->pA = sp.step0;
        t->pB = sp.step1;
        if (first == 0 && count == plan->seq) { /* the whole pass: every fbank frame */
            t->fA = 0;
            t->fB = plan->fbank_frames;
        } else {
            t->fA = sp.fbank0;
            t->fB = sp.fbank1;
        }
        t->lead = tok_lead(plan);
        t->cls_first = first;
        t->cls_pending = t->lead ? 0 : (int)sp.cls;
        t->w_next = count > 0 ? rv_tok_window_of(plan, first) : 0;
        t->w_end = count > 0 ? rv_tok_window_of(plan, first + count - 1) + 1 : 0;
    } else {
        rv_tok_layout check;
        if ((st = rv_tok_layout_make(to, io, 0, 0, &check)) != RV_OK)
            goto end;
        if (to->frame_windows && !has_video) {
            st = rv_fail(RV_ERR_INVALID, "tokenize: frame windows (window w = tubelet w) need "
                         "video, and the recording has none");
            goto end;
        }
        tok_layout_fill(&t->L, to, io, has_video ? RV_TOK_OPEN : 0, has_audio ? RV_TOK_OPEN : 0);
        t->open = t->L.seq == RV_TOK_OPEN;
        t->t0_pending = 1;
        t->tok_a = 0;
        t->tok_b = t->L.seq;
        t->gB = t->L.tubelets;
        t->pB = t->L.steps;
        t->fB = t->L.fbank_frames;
        /* cut windows too short for a fbank frame (a step) never hold one */
        if (tok_cut(&t->L) && !tok_block_can_hold(&t->L, TOK_FBANKS))
            t->fB = 0;
        if (tok_cut(&t->L) && !tok_block_can_hold(&t->L, TOK_STEPS))
            t->pB = 0;
        t->lead = tok_lead(&t->L);
        t->cls_pending = t->lead ? 0 : to->cls;
        t->w_end = t->L.windows;
    }
    set_needs(t);
    t->g_next = t->vp_g0 = t->gA;
    next_tubelet(t);
    t->p_next = t->ap_p0 = t->pA;
    t->f_next = t->f_reported = t->fr_f0 = t->fA;
    t->sb_j0 = t->jA;
    const rv_tok_layout *L = &t->L;
    t->fsize = (size_t)L->ingest.size * L->ingest.size * 3;
    rv_tubelet_lut(L->opts.mean, L->opts.std, t->lut);
    if (t->gB > t->gA) {
        t->tub = malloc(t->fsize * (size_t)L->opts.tubelet);
        t->last = malloc(t->fsize);
        if (!t->tub || !t->last) {
            st = rv_fail(RV_ERR_NOMEM, "tokenize: out of memory for %d frames", L->opts.tubelet);
            goto end;
        }
    }
    if (t->fB > t->fA && (st = rv_fbank_new(&t->fb)) != RV_OK)
        goto end;
    t->st.layout = t->L;
    t->st.first = t->tok_a;
    *out = t;
    t = NULL;
end:
    rv_tokenizer_free(&t);
    return st;
}

void rv_tokenizer_free(rv_tokenizer **pt)
{
    rv_tokenizer *t = pt ? *pt : NULL;
    if (!t)
        return;
    rv_fbank_free(&t->fb);
    free(t->tub);
    free(t->last);
    free(t->vp);
    free(t->sb);
    free(t->fr);
    free(t->ap);
    free(t->mod);
    free(t->pos);
    free(t->time);
    free(t->seqt);
    free(t->win);
    free(t);
    *pt = NULL;
}

void rv_tokenizer_stats(const rv_tokenizer *t, rv_tok_stats *out)
{
    *out = t->st;
    out->layout = t->L;
}

/* ---- making items -------------------------------------------------------------------- */

/* Tubelet g_next from its tub_n frames: a tubelet whose frames end early (at
 * the recording's end, or at its window's with cut windows) repeats its last. */
static rv_status make_tubelet(rv_tokenizer *t)
{
    const rv_tok_layout *L = &t->L;
    const int T = L->opts.tubelet;
    const int64_t per = (int64_t)L->per_tubelet * L->video_dim;
    rv_status st = grow((void **)&t->vp, &t->vp_cap, (t->g_next + 1 - t->vp_g0) * per,
                        sizeof(float));
    if (st != RV_OK)
        return st;
    const uint8_t *ptr[64];
    for (int i = 0; i < T; i++)
        ptr[i] = t->tub + (size_t)(i < t->tub_n ? i : t->tub_n - 1) * t->fsize;
    rv_tubelet_patchify(ptr, T, L->ingest.size, L->opts.patch, t->lut,
                        t->vp + (t->g_next - t->vp_g0) * per);
    t->g_next++;
    t->tub_n = 0;
    next_tubelet(t);
    return RV_OK;
}

/* Adds one frame (grid index k) to the tubelet being filled. */
static rv_status take_frame(rv_tokenizer *t, int64_t k, const uint8_t *frame)
{
    if (t->g_next >= t->gB || k != t->tub_k0 + t->tub_n)
        return rv_fail(RV_ERR_INTERNAL, "tokenize: frame %lld arrived, %lld expected",
                       (long long)k, (long long)(t->tub_k0 + t->tub_n));
    memcpy(t->tub + (size_t)t->tub_n * t->fsize, frame, t->fsize);
    t->tub_n++;
    if (t->tub_n < t->L.opts.tubelet && t->tub_k0 + t->tub_n < t->tub_k1)
        return RV_OK;
    return make_tubelet(t);
}

/* The last tubelet when the frames end inside it: its last frame repeated. */
static rv_status close_tubelet(rv_tokenizer *t)
{
    if (t->tub_n == 0 || t->g_next >= t->gB)
        return RV_OK;
    return make_tubelet(t);
}

/* Computes the fbank frames the buffered samples allow, then the audio steps
 * the fbank rows allow. */
static rv_status run_audio(rv_tokenizer *t)
{
    const rv_tok_layout *L = &t->L;
    const int W = L->opts.audio_time;
    rv_status st;
    const int64_t avail = t->sb_j0 + t->sb_n;
    int64_t j = 0; /* fbank frame f_next's first sample */
    while (t->f_next < t->fB &&
           (j = tok_fbank_sample(L, t->f_next, &t->fcur)) + RV_FBANK_LEN <= avail) {
        if ((st = grow((void **)&t->fr, &t->fr_cap, (t->fr_n + 1) * RV_FBANK_BINS,
                       sizeof(float))) != RV_OK)
            return st;
        rv_fbank_frame(t->fb, t->sb + (j - t->sb_j0), t->fr + (t->f_next - t->fr_f0) * RV_FBANK_BINS);
        t->fr_n++;
        t->f_next++;
        t->st.fbank_frames++;
    }
    /* Samples before the next frame's start are read by no later frame. */
    int64_t next = t->f_next < t->fB ? tok_fbank_sample(L, t->f_next, &t->fcur)
                                     : t->f_next * RV_FBANK_HOP;
    int64_t drop = tok_min(next - t->sb_j0, t->sb_n);
    if (drop > 0) {
        memmove(t->sb, t->sb + drop, sizeof(float) * (size_t)(t->sb_n - drop));
        t->sb_n -= drop;
        t->sb_j0 += drop;
    }
    const int64_t per = (int64_t)L->bands * L->audio_dim;
    int64_t f0; /* audio step p_next's first fbank frame */
    while (t->p_next < t->pB && (f0 = tok_step_fbank(L, t->p_next, &t->pcur)) + W <= t->f_next) {
        if ((st = grow((void **)&t->ap, &t->ap_cap, (t->p_next + 1 - t->ap_p0) * per,
                       sizeof(float))) != RV_OK)
            return st;
        rv_audio_patchify(t->fr + (f0 - t->fr_f0) * RV_FBANK_BINS, RV_FBANK_BINS,
                          L->opts.audio_freq, rv_tok_audio_fstride(&L->opts), W,
                          L->opts.audio_mean, L->opts.audio_std,
                          t->ap + (t->p_next - t->ap_p0) * per);
        t->p_next++;
    }
    return RV_OK;
}

static rv_status take_samples(rv_tokenizer *t, int64_t j0, const float *x, int64_t n)
{
    int64_t lo = tok_max(j0, t->sb_j0 + t->sb_n), hi = tok_min(j0 + n, t->jB);
    if (j0 > t->sb_j0 + t->sb_n && hi > j0)
        return rv_fail(RV_ERR_INTERNAL, "tokenize: audio sample %lld arrived, %lld expected",
                       (long long)j0, (long long)(t->sb_j0 + t->sb_n));
    if (hi <= lo)
        return RV_OK;
    rv_status st = grow((void **)&t->sb, &t->sb_cap, t->sb_n + (hi - lo), sizeof(float));
    if (st != RV_OK)
        return st;
    if (x)
        memcpy(t->sb + t->sb_n, x + (lo - j0), sizeof(float) * (size_t)(hi - lo));
    else
        memset(t->sb + t->sb_n, 0, sizeof(float) * (size_t)(hi - lo));
    t->sb_n += hi - lo;
    return run_audio(t);
}

/* ---- handing out windows ------------------------------------------------------------ */

static rv_status call(rv_tokenizer *t, const rv_tok_batch *b)
{
    double c0 = rv_clock_thread_cpu_s();
    rv_status st = t->fn(b, t->user);
    t->cb_s += rv_clock_thread_cpu_s() - c0;
    if (st != RV_OK && !rv_last_error()[0])
        rv_fail(st, "tokenize: the batch callback failed");
    return st;
}

/* Forgets tubelets before g, audio steps before p, and fbank rows nobody needs. */
static void release(rv_tokenizer *t, int64_t g, int64_t p)
{
    const rv_tok_layout *L = &t->L;
    int64_t k = tok_min(g, t->g_next) - t->vp_g0;
    if (k > 0) {
        int64_t per = (int64_t)L->per_tubelet * L->video_dim;
        memmove(t->vp, t->vp + k * per, sizeof(float) * (size_t)((t->g_next - t->vp_g0 - k) * per));
        t->vp_g0 += k;
    }
    k = tok_min(p, t->p_next) - t->ap_p0;
    if (k > 0) {
        int64_t per = (int64_t)L->bands * L->audio_dim;
        memmove(t->ap, t->ap + k * per, sizeof(float) * (size_t)((t->p_next - t->ap_p0 - k) * per));
        t->ap_p0 += k;
    }
    int64_t keep = t->f_reported;
    if (t->p_next < t->pB)
        keep = tok_min(keep, tok_step_fbank(L, t->p_next, &t->pcur));
    k = tok_min(keep, t->fr_f0 + t->fr_n) - t->fr_f0;
    if (k > 0) {
        memmove(t->fr, t->fr + k * RV_FBANK_BINS, sizeof(float) * (size_t)((t->fr_n - k) * RV_FBANK_BINS));
        t->fr_n -= k;
        t->fr_f0 += k;
    }
}

/* Room for count tokens' modality, position, times and window. */
static rv_status ensure_meta(rv_tokenizer *t, int64_t count)
{
    if (count <= t->meta_cap)
        return RV_OK;
    int64_t cap = t->meta_cap > 0 ? t->meta_cap : 256;
    while (cap < count)
        cap *= 2;
    uint8_t *m = realloc(t->mod, (size_t)cap);
    if (m)
        t->mod = m;
    int64_t *p = realloc(t->pos, sizeof(int64_t) * 3 * (size_t)cap);
    if (p)
        t->pos = p;
    double *d = realloc(t->time, sizeof(double) * 2 * (size_t)cap);
    if (d)
        t->time = d;
    double *ds = realloc(t->seqt, sizeof(double) * 2 * (size_t)cap);
    if (ds)
        t->seqt = ds;
    int64_t *wi = realloc(t->win, sizeof(int64_t) * (size_t)cap);
    if (wi)
        t->win = wi;
    if (!m || !p || !d || !ds || !wi)
        return rv_fail(RV_ERR_NOMEM, "tokenize: out of memory for %lld tokens", (long long)cap);
    t->meta_cap = cap;
    return RV_OK;
}

static rv_status emit(rv_tokenizer *t, int64_t w, int last)
{
    const rv_tok_layout *L = &t->L;
    const int64_t Q = L->per_tubelet, B = L->bands;
    const int rel = L->opts.window_positions;
    /* window w: its special tokens [ws, vs) (cls_each_window), video tokens
     * [vs, vs + nv), audio tokens [vs + nv, vs + nv + na); this pass's part of
     * them is [a, b) */
    int64_t g0 = 0, g1 = 0, p0 = 0, p1 = 0, ws = 0, vs = 0, nv = 0, na = 0, a = 0, b = 0;
    if (w >= 0) {
        rv_tok_window_items(L, w, &g0, &g1, &p0, &p1);
        ws = rv_tok_window_start(L, w);
        vs = ws + t->lead;
        nv = Q * (g1 - g0);
        na = B * (p1 - p0);
        a = tok_max(ws, t->tok_a);
        b = tok_min(vs + nv + na, t->tok_b);
        if (b < a)
            b = a;
    }
    int64_t count = (b - a) + t->cls_pending;
    rv_status st = ensure_meta(t, count);
    if (st != RV_OK)
        return st;
    rv_tok_batch bt = {.first = w >= 0 ? a : t->tok_b, .modality = t->mod, .pos = t->pos,
                       .time = t->time, .seq_time = t->seqt, .window = t->win};
    int64_t n = 0;
    /* The leading special tokens come first: they go out with the first window
     * (a range starting at 1 of cls = 2 has only the distillation token). */
    if (t->cls_pending) {
        double ts = rv_ingest_frame_time(&L->ingest, 0);
        for (; n < t->cls_pending; n++) {
            t->mod[n] = RV_MOD_CLS;
            t->pos[3 * n] = t->cls_first + n;
            t->pos[3 * n + 1] = t->pos[3 * n + 2] = 0;
            t->seqt[2 * n] = t->seqt[2 * n + 1] = ts;
            t->win[n] = 0;
        }
        bt.first = t->cls_first;
        t->st.cls_tokens += t->cls_pending;
        t->cls_pending = 0;
    }
    /* the window's special tokens [a, min(b, vs)) (cls_each_window) */
    int64_t se = tok_min(b, vs);
    if (se > a) {
        double tw = rv_tok_window_time(L, w);
        for (int64_t i = a; i < se; i++, n++) {
            t->mod[n] = RV_MOD_CLS;
            t->pos[3 * n] = i - ws;
            t->pos[3 * n + 1] = t->pos[3 * n + 2] = 0;
            t->seqt[2 * n] = t->seqt[2 * n + 1] = tw;
            t->win[n] = w;
        }
        t->st.cls_tokens += se - a;
    }
    /* video tokens [max(a, vs), min(b, vs + nv)) */
    int64_t va = tok_max(a, vs), ve = tok_min(b, vs + nv);
    if (ve > va) {
        int64_t off = va - vs, g = g0 + off / Q;
        bt.video = t->vp + ((g - t->vp_g0) * Q + off % Q) * L->video_dim;
        bt.nvideo = ve - va;
        double tt[2];
        int64_t tg = -1;
        for (int64_t i = va; i < ve; i++, n++) {
            off = i - vs;
            g = g0 + off / Q;
            int part = (int)(off % Q);
            if (g != tg) {
                tok_tubelet_time(L, g, tt);
                tg = g;
            }
            t->mod[n] = RV_MOD_VIDEO;
            t->pos[3 * n] = rel ? g - g0 : g;
            t->pos[3 * n + 1] = part / L->grid;
            t->pos[3 * n + 2] = part % L->grid;
            t->seqt[2 * n] = tt[0];
            t->seqt[2 * n + 1] = tt[1];
            t->win[n] = w;
        }
    }
    /* audio tokens [max(a, vs + nv), b) */
    int64_t as = tok_max(a, vs + nv);
    if (b > as) {
        int64_t off = as - vs - nv, p = p0 + off / B;
        bt.audio = t->ap + ((p - t->ap_p0) * B + off % B) * L->audio_dim;
        bt.naudio = b - as;
        double tt[2];
        int64_t tp = -1;
        for (int64_t i = as; i < b; i++, n++) {
            off = i - vs - nv;
            p = p0 + off / B;
            if (p != tp) {
                tok_step_time(L, p, tt);
                tp = p;
            }
            t->mod[n] = RV_MOD_AUDIO;
            t->pos[3 * n] = rel ? p - p0 : p;
            t->pos[3 * n + 1] = off % B;
            t->pos[3 * n + 2] = 0;
            t->seqt[2 * n] = tt[0];
            t->seqt[2 * n + 1] = tt[1];
            t->win[n] = w;
        }
    }
    bt.count = n;
    for (int64_t i = 0; i < 2 * n; i++) /* on the container's clock */
        t->time[i] = L->t0 + t->seqt[i];
    bt.fbank_first = t->f_reported;
    bt.nfbank = t->f_next - t->f_reported;
    bt.fbank = t->fr ? t->fr + (t->f_reported - t->fr_f0) * RV_FBANK_BINS : NULL;
    bt.last = last;
    if (n > 0 || bt.nfbank > 0 || last) {
        if ((st = call(t, &bt)) != RV_OK)
            return st;
        t->st.tokens += n;
        t->st.video_tokens += bt.nvideo;
        t->st.audio_tokens += bt.naudio;
        t->f_reported = t->f_next;
    }
    if (w >= 0)
        release(t, g1, p1);
    return RV_OK;
}

/* Open pass, cls_each_window: whether window w is sure to be in the final
 * sequence, i.e. a video or audio token of window w or later exists (a
 * tubelet once its first frame came, an audio step once it is made); an
 * empty window is only in the sequence when a later one holds a token, and
 * it brings its own special tokens. */
static int window_exists(const rv_tokenizer *t, int64_t w)
{
    const rv_tok_layout *L = &t->L;
    if (t->k_seen > 0 && tok_window_of_frame(L, t->k_seen - 1) >= w)
        return 1;
    return t->p_next > 0 && rv_tok_window_of_step(L, t->p_next - 1) >= w;
}

/* Hands out every window whose items are all made. */
static rv_status emit_ready(rv_tokenizer *t)
{
    while (t->w_next < t->w_end) {
        int64_t g0, g1, p0, p1;
        rv_tok_window_items(&t->L, t->w_next, &g0, &g1, &p0, &p1);
        if (t->g_next < clamp64(g1, t->gA, t->gB) || t->p_next < clamp64(p1, t->pA, t->pB))
            break;
        if (t->open && t->lead && !window_exists(t, t->w_next))
            break;
        rv_status st = emit(t, t->w_next, 0);
        if (st != RV_OK)
            return st;
        t->w_next++;
    }
    return RV_OK;
}

/* ---- the public engine -------------------------------------------------------------- */

static rv_status push(rv_tokenizer *t, const rv_ingest_chunk *c)
{
    const rv_tok_layout *L = &t->L;
    rv_status st;
    if (t->t0_pending) {
        t->L.t0 = c->t0;
        t->t0_pending = 0;
    }
    if (c->nframes > 0) {
        if (c->size != L->ingest.size)
            return rv_fail(RV_ERR_INVALID, "tokenize: frames of %d px, the layout has %d px",
                           c->size, L->ingest.size);
        int last_in = -1;
        for (int i = 0; i < c->nframes; i++) {
            int64_t k = c->first_frame + i;
            if (k + 1 > t->k_seen)
                t->k_seen = k + 1;
            if (!t->open && k >= L->nframes) {
                t->st.dropped_frames++;
                continue;
            }
            last_in = i;
            if (k < t->kA || k >= t->kB)
                continue;
            if ((st = take_frame(t, k, c->frames + (size_t)i * t->fsize)) != RV_OK)
                return st;
        }
        if (last_in >= 0 && t->last) {
            memcpy(t->last, c->frames + (size_t)last_in * t->fsize, t->fsize);
            t->have_last = 1;
        }
    }
    if (c->nsamples > 0 && c->audio) {
        int64_t end = c->first_sample + c->nsamples;
        if (end > t->j_seen)
            t->j_seen = end;
        if (!t->open && end > L->nsamples)
            t->st.dropped_samples += end - tok_max(c->first_sample, L->nsamples);
        if ((st = take_samples(t, c->first_sample, c->audio, c->nsamples)) != RV_OK)
            return st;
    }
    return emit_ready(t);
}

rv_status rv_tokenizer_push(rv_tokenizer *t, const rv_ingest_chunk *c)
{
    if (t->finished)
        return rv_fail(RV_ERR_INVALID, "tokenize: chunk after the end");
    double c0 = rv_clock_thread_cpu_s(), cb0 = t->cb_s;
    rv_status st = push(t, c);
    t->st.cpu_s += rv_clock_thread_cpu_s() - c0 - (t->cb_s - cb0);
    return st;
}

/* Closes the open layout at the counts that arrived. */
static void close_layout(rv_tokenizer *t)
{
    rv_tok_layout *L = &t->L;
    int64_t nframes = L->nframes == RV_TOK_OPEN ? t->k_seen : 0;
    int64_t nsamples = L->nsamples == RV_TOK_OPEN ? t->j_seen : 0;
    tok_layout_fill(L, &L->opts, &L->ingest, nframes, nsamples);
    t->open = 0;
    t->gB = L->tubelets;
    t->pB = L->steps;
    t->fB = L->fbank_frames;
    /* the cursors cached windows of the open counts; the last one may end early */
    t->vcur = t->fcur = t->pcur = (tok_cursor){0};
    set_needs(t);
    next_tubelet(t);
    t->tok_b = L->seq;
    t->w_end = L->windows;
}

static rv_status finish(rv_tokenizer *t)
{
    const rv_tok_layout *L = &t->L;
    rv_status st;
    if (t->open) {
        close_layout(t);
    } else {
        /* Frames the layout has and the recording had not: the last one repeated. */
        int64_t k_have = t->g_next < t->gB ? t->tub_k0 + t->tub_n : t->kB;
        if (t->kB > t->kA && k_have < t->kB) {
            int64_t fps_ceil = (L->ingest.fps_num + L->ingest.fps_den - 1) / L->ingest.fps_den;
            int64_t limit = (int64_t)ceil(RV_TOK_PAD_MAX_S * (double)fps_ceil);
            if (L->nframes - t->k_seen > limit || !t->have_last)
                return rv_fail(RV_ERR_FORMAT,
                               "the recording has %lld sampled frames where the plan (from the "
                               "container's duration) has %lld: more than %g s short",
                               (long long)t->k_seen, (long long)L->nframes, RV_TOK_PAD_MAX_S);
            for (int64_t k = k_have; k < t->kB; k++)
                if ((st = take_frame(t, k, t->last)) != RV_OK)
                    return st;
            t->st.padded_frames += t->kB - k_have;
        }
        /* Samples likewise: silence. */
        int64_t j_have = t->sb_j0 + t->sb_n;
        if (t->jB > t->jA && j_have < t->jB) {
            if (L->nsamples - t->j_seen > (int64_t)(RV_TOK_PAD_MAX_S * RV_AUDIO_RATE))
                return rv_fail(RV_ERR_FORMAT,
                               "the recording has %lld audio samples where the plan (from the "
                               "container's duration) has %lld: more than %g s short",
                               (long long)t->j_seen, (long long)L->nsamples, RV_TOK_PAD_MAX_S);
            if ((st = take_samples(t, j_have, NULL, t->jB - j_have)) != RV_OK)
                return st;
            t->st.padded_samples += t->jB - j_have;
        }
    }
    if ((st = close_tubelet(t)) != RV_OK)
        return st;
    if ((st = emit_ready(t)) != RV_OK)
        return st;
    if (t->w_next < t->w_end)
        return rv_fail(RV_ERR_INTERNAL, "tokenize: window %lld of %lld not complete at the end "
                       "(tubelets %lld/%lld, steps %lld/%lld)", (long long)t->w_next,
                       (long long)t->w_end, (long long)t->g_next, (long long)t->gB,
                       (long long)t->p_next, (long long)t->pB);
    return emit(t, -1, 1);
}

rv_status rv_tokenizer_finish(rv_tokenizer *t)
{
    if (t->finished)
        return rv_fail(RV_ERR_INVALID, "tokenize: finished twice");
    double c0 = rv_clock_thread_cpu_s(), cb0 = t->cb_s;
    rv_status st = finish(t);
    t->finished = 1;
    t->st.cpu_s += rv_clock_thread_cpu_s() - c0 - (t->cb_s - cb0);
    t->st.layout = t->L;
    return st;
}
