/* token_blocks.c: windows cut from the recording (window_positions, rv_tokens.h),
 * as arithmetic. Window w starts at frame K(w) and at sample J(w), the first
 * ones at or after its start, both of the form ceil(w * num / den) on exact
 * integers (time windows: w * window_us microseconds after the grid start;
 * frame windows: frame w * T). The frames [K(w), K(w + 1)) and the samples
 * [J(w), J(w + 1)) (cut at the recording's end) are the window's own
 * recording: its tubelets from its first frame, its fbank frames from its
 * first sample, its audio steps from its first fbank frame.
 *
 * Every window but the one holding the last frame (sample) has q or q + 1 of
 * them, q = floor(num / den), and the count of tubelets, fbank frames or steps
 * of a window is a function f of that number alone, so the items of windows
 * [0, w) add up in closed form:
 *   w f(q) + (f(q + 1) - f(q)) (B(w) - w q)     (B(w) - w q windows have q + 1),
 * plus f of the last window's count once w is past it. The window of an item
 * is the largest w whose items before it are at most the item's index: a
 * binary search over that sum (O(log windows)), or O(1) for consecutive items
 * with a cursor. */
#include "tok_internal.h"

__extension__ typedef __int128 i128;

#define US 1000000

/* B(w) = ceil(w * num / den) */
typedef struct edges {
    i128 num, den;
} edges;

static int64_t clamp_i128(i128 v)
{
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

static edges kind_edges(const rv_tok_layout *L, tok_kind kind)
{
    const rv_tok_opts *o = &L->opts;
    const rv_ingest_opts *io = &L->ingest;
    if (kind == TOK_TUBELETS) {
        if (o->frame_windows)
            return (edges){o->tubelet, 1};
        return (edges){(i128)L->window_us * io->fps_num, (i128)io->fps_den * US};
    }
    /* samples: sample j is j / 16000 s after the grid start */
    if (o->frame_windows)
        return (edges){(i128)o->tubelet * io->fps_den * RV_AUDIO_RATE, io->fps_num};
    return (edges){(i128)L->window_us * RV_AUDIO_RATE, US};
}

static int64_t edge_at(edges e, int64_t w)
{
    return clamp_i128(((i128)w * e.num + e.den - 1) / e.den);
}

/* The largest w with B(w) <= k (k >= 0). */
static int64_t edge_window(edges e, int64_t k)
{
    return clamp_i128((i128)k * e.den / e.num);
}

/* Items a window of d frames (TOK_TUBELETS) or d samples holds. */
static int64_t per_window(const rv_tok_layout *L, tok_kind kind, int64_t d)
{
    const rv_tok_opts *o = &L->opts;
    if (d <= 0)
        return 0;
    if (kind == TOK_TUBELETS)
        return (d + o->tubelet - 1) / o->tubelet;
    int64_t f = d >= RV_FBANK_LEN ? 1 + (d - RV_FBANK_LEN) / RV_FBANK_HOP : 0;
    if (kind == TOK_FBANKS)
        return f;
    return f >= o->audio_time ? 1 + (f - o->audio_time) / o->audio_stride : 0;
}

static int64_t kind_count(const rv_tok_layout *L, tok_kind kind)
{
    return kind == TOK_TUBELETS ? L->nframes : L->nsamples;
}

int64_t tok_block_edge(const rv_tok_layout *L, tok_kind kind, int64_t w)
{
    return edge_at(kind_edges(L, kind), w);
}

int64_t tok_block_of_edge(const rv_tok_layout *L, tok_kind kind, int64_t k)
{
    return edge_window(kind_edges(L, kind), k);
}

int64_t tok_block_before(const rv_tok_layout *L, tok_kind kind, int64_t w)
{
    const int64_t n = kind_count(L, kind);
    if (n <= 0 || w <= 0)
        return 0;
    const edges e = kind_edges(L, kind);
    /* windows [0, last) are whole; window last holds the last frame (sample) */
    const int64_t last = n == RV_TOK_OPEN ? INT64_MAX : edge_window(e, n - 1);
    const int64_t full = w < last ? w : last;
    const int64_t q = clamp_i128(e.num / e.den);
    const int64_t fq = per_window(L, kind, q), fq1 = per_window(L, kind, q + 1);
    i128 s = (i128)full * fq + (i128)(fq1 - fq) * ((i128)edge_at(e, full) - (i128)full * q);
    if (w > last)
        s += per_window(L, kind, n - edge_at(e, last));
    return clamp_i128(s);
}

int tok_block_can_hold(const rv_tok_layout *L, tok_kind kind)
{
    const edges e = kind_edges(L, kind);
    const int64_t q = clamp_i128(e.num / e.den);
    /* whole windows have q, or q + 1 when num / den is not a whole number */
    return per_window(L, kind, q) > 0 || (e.num % e.den != 0 && per_window(L, kind, q + 1) > 0);
}

int64_t tok_block_of_item(const rv_tok_layout *L, tok_kind kind, int64_t i)
{
    const int64_t n = kind_count(L, kind);
    if (n <= 0 || i < 0)
        return 0;
    /* the windows to search: up to the last one holding a frame (sample) */
    int64_t hi;
    if (n != RV_TOK_OPEN) {
        hi = edge_window(kind_edges(L, kind), n - 1) + 1;
    } else {
        /* open: gallop to a window whose items before it pass i (there is one
         * when a window can hold an item at all) */
        if (!tok_block_can_hold(L, kind))
            return 0;
        hi = 1;
        while (hi < INT64_MAX / 2 && tok_block_before(L, kind, hi) <= i)
            hi *= 2;
    }
    /* the largest w in [0, hi] with before(w) <= i */
    int64_t lo = 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (tok_block_before(L, kind, mid) <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int64_t tok_block_item(const rv_tok_layout *L, tok_kind kind, int64_t i, tok_cursor *c)
{
    if (c && c->kind == (int)kind + 1 && i >= c->lo && i < c->hi)
        return c->w;
    int64_t w;
    if (c && c->kind == (int)kind + 1 && i == c->hi) {
        /* the next item: the next window holding one (a few at most are empty) */
        w = c->w + 1;
        int64_t hi = tok_block_before(L, kind, w + 1);
        for (int tries = 0; hi <= i && tries < 8; tries++)
            hi = tok_block_before(L, kind, ++w + 1);
        if (hi <= i)
            w = tok_block_of_item(L, kind, i);
    } else {
        w = tok_block_of_item(L, kind, i);
    }
    if (c)
        *c = (tok_cursor){.kind = (int)kind + 1, .w = w, .lo = tok_block_before(L, kind, w),
                          .hi = tok_block_before(L, kind, w + 1)};
    return w;
}

int64_t tok_block_last(const rv_tok_layout *L, tok_kind kind)
{
    int64_t total = tok_block_before(L, kind, INT64_MAX);
    if (total <= 0)
        return -1;
    return tok_block_of_item(L, kind, total - 1);
}
