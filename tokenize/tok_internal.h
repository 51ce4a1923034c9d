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

/* ---- token_layout.c ---------------------------------------------------------- */

/* Makes L without checks beyond the arithmetic (rv_tok_layout_make checks);
 * L->t0 is left as it is. */
void tok_layout_fill(rv_tok_layout *L, const rv_tok_opts *to, const rv_ingest_opts *io,
                     int64_t nframes, int64_t nsamples);

/* Tubelet g's and audio step p's time spans, sequence time (s from t0). */
void tok_tubelet_time(const rv_tok_layout *L, int64_t g, double t[2]);
void tok_step_time(const rv_tok_layout *L, int64_t p, double t[2]);

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
