/* tok_internal.h: what the tokenize files share and nobody else sees: the
 * window arithmetic behind rv_tok_layout, and the "open" layout the whole-file
 * pass uses while the recording's length is still unknown. One file per job:
 *   rv_tokens.h          the token sequence and its layout (public)
 *   rv_tokenize.h        the tokenizer and the passes over a file (public)
 *   rv_shard.h           shard plans: which tokens each rank holds (public)
 *   rv_patch.h           tubelet and audio patches (public)
 *   rv_fbank.h           the Kaldi log-mel filterbank (public)
 *   tok_opts.c           the options: defaults, checks, audio bands
 *   token_layout.c       the sequence order as arithmetic (rv_tok_layout_make,
 *                        windows, token index <-> info and time)
 *   token_blocks.c       windows cut from the recording (window_positions):
 *                        each window's own tubelets, fbank frames and steps
 *   token_spans.c        before decoding: the layout from the probe, what a run
 *                        of tokens reads (rv_tok_span_of), each rank's spans
 *   shard_plan.c         contiguous and zigzag shard plans
 *   tubelet.c            frames <-> tubelet patches
 *   fbank.c              log-mel filterbank (av_tx FFT); fbank_unavailable.c
 *                        replaces it in a build without FFmpeg
 *   audio_patches.c      fbank rows -> audio patches
 *   tokenizer.c          the tokenizer engine: chunks in, windows of tokens out
 *   tokenize_stream.c    passes over a file: whole, a run of tokens, one rank
 *   rv_tok_slice.h       one recording on one rank, the recipe embed and
 *                        finetune share: plan from the headers, then the rank's
 *                        slice into arrays (public); tok_slice.c
 *   rv_tok_collect.h     the whole sequence as the tensors `ringvit tokens -o`
 *                        writes and rv_flat_tokens returns (public); tok_collect.c
 *   rv_tok_report.h      the tokens report as JSON (public); tok_report.c */
#ifndef RV_TOK_INTERNAL_H
#define RV_TOK_INTERNAL_H

#include "rv_tokens.h"

/* Frame and sample counts of an open layout: "as many as arrive". Every derived
 * count is then RV_TOK_OPEN too; only windows whose items are all known may be
 * asked about (the whole-file pass closes the layout at the end). */
#define RV_TOK_OPEN INT64_MAX

/* ---- token_blocks.c ---------------------------------------------------------- */

/* Whether L's windows are cut from the recording (rv_tokens.h: window_positions):
 * each window tokenized as a recording of its own. */
static inline int tok_cut(const rv_tok_layout *L) { return L->opts.window_positions; }

/* What a window cut from the recording holds: tubelets (of its frames), fbank
 * frames and audio steps (of its samples). */
typedef enum tok_kind { TOK_TUBELETS, TOK_FBANKS, TOK_STEPS } tok_kind;

/* The window of the latest item asked for and its items [lo, hi): consecutive
 * items then cost O(1). Zero-initialise; one cursor per kind. */
typedef struct tok_cursor {
    int kind;        /* tok_kind + 1; 0: nothing cached */
    int64_t w, lo, hi;
} tok_cursor;

/* Window w's first frame K(w) (TOK_TUBELETS) or first sample J(w) (else): the
 * first one at or after the window's start; not cut at the recording's end. */
int64_t tok_block_edge(const rv_tok_layout *L, tok_kind kind, int64_t w);
/* The window holding frame (sample) k: the largest w with edge(w) <= k. */
int64_t tok_block_of_edge(const rv_tok_layout *L, tok_kind kind, int64_t k);
/* Items of windows [0, w) (every window's with w past the last; counts
 * RV_TOK_OPEN: every window whole). */
int64_t tok_block_before(const rv_tok_layout *L, tok_kind kind, int64_t w);
/* The window holding item i (0 <= i < the items), O(log windows); with a
 * cursor (may be NULL) O(1) for the items of the window cached and the next. */
int64_t tok_block_of_item(const rv_tok_layout *L, tok_kind kind, int64_t i);
int64_t tok_block_item(const rv_tok_layout *L, tok_kind kind, int64_t i, tok_cursor *c);
/* Whether a whole window can hold an item of kind at all (windows shorter
 * than one fbank frame or one audio step hold none). */
int tok_block_can_hold(const rv_tok_layout *L, tok_kind kind);
/* The last window holding an item (-1: none); closed counts only. */
int64_t tok_block_last(const rv_tok_layout *L, tok_kind kind);

/* ---- token_layout.c ---------------------------------------------------------- */

/* Makes L without checks beyond the arithmetic (rv_tok_layout_make checks);
 * L->t0 is left as it is. */
void tok_layout_fill(rv_tok_layout *L, const rv_tok_opts *to, const rv_ingest_opts *io,
                     int64_t nframes, int64_t nsamples);

/* Tubelet g's and audio step p's time spans, sequence time (s from t0). */
void tok_tubelet_time(const rv_tok_layout *L, int64_t g, double t[2]);
void tok_step_time(const rv_tok_layout *L, int64_t p, double t[2]);

/* Where items read, in either layout (windows of the whole grid, or cut from
 * the recording); c (may be NULL) caches the window for the next call.
 *   tok_tubelet_frames: tubelet g's frames [*k0, *k1): T from its first, fewer
 *     where its window's frames end (cut windows); not cut at nframes;
 *   tok_fbank_sample: fbank frame f's first sample (it reads 400);
 *   tok_step_fbank: audio step p's first fbank frame (it reads W);
 *   tok_window_of_frame: the window of frame k's tokens (its tubelet's). */
void tok_tubelet_frames(const rv_tok_layout *L, int64_t g, tok_cursor *c, int64_t *k0,
                        int64_t *k1);
int64_t tok_fbank_sample(const rv_tok_layout *L, int64_t f, tok_cursor *c);
int64_t tok_step_fbank(const rv_tok_layout *L, int64_t p, tok_cursor *c);
int64_t tok_window_of_frame(const rv_tok_layout *L, int64_t k);

/* First tubelet / audio step whose window is >= w (not clamped to the count). */
int64_t tok_tubelet_lo(const rv_tok_layout *L, int64_t w);
int64_t tok_step_lo(const rv_tok_layout *L, int64_t w);

/* Special tokens leading each window (cls with cls_each_window, else 0), and
 * the special tokens among the global tokens [0, i). */
int64_t tok_lead(const rv_tok_layout *L);
int64_t tok_specials_before(const rv_tok_layout *L, int64_t i);

/* ---- token_spans.c ----------------------------------------------------------- */

/* Largest grid index k with J(k) <= j, and smallest with J(k) >= j, where J(k)
 * = rv_ingest_audio_index(io, k), the first audio sample of grid index k. */
int64_t tok_grid_at_or_before(const rv_ingest_opts *io, int64_t j);
int64_t tok_grid_at_or_after(const rv_ingest_opts *io, int64_t j);

static inline int64_t tok_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t tok_max(int64_t a, int64_t b) { return a > b ? a : b; }

#endif
