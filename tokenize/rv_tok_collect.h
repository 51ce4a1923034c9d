/* rv_tok_collect.h: a recording's whole token sequence as the tensors `ringvit
 * tokens -o` writes and rv_flat_tokens returns, gathered from the tokenizer's
 * batches as they arrive (counted only, in memory, or in unlinked scratch
 * files beside the output: rv_collect_keep, rv_ingest.h):
 *   video_patches   (video tokens, T*P*P*3) f32   normalised, (t, y, x, c)
 *   audio_patches   (audio tokens, F*W) f32       normalised, (f, w)
 *   audio_fbank     (fbank frames, 128) f32       log-mel, before normalisation
 *                                                 (rv_tok_batch.fbank's rows:
 *                                                 with blocks each block's own,
 *                                                 block after block)
 *   token_modality  (seq) u8                      0 video, 1 audio, 2 cls / dist
 *   token_pos       (seq, 3) i64                  (t, y, x) | (t, f, 0) | (i, 0, 0)
 *   token_time      (seq, 2) f64                  start, end: s on the container's clock
 *   token_window    (seq) i64                     window (attention block) index */
#ifndef RV_TOK_COLLECT_H
#define RV_TOK_COLLECT_H

#include "rv_api.h"
#include "rv_ingest.h"
#include "rv_status.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RV_TOK_VIDEO_PATCHES, RV_TOK_AUDIO_PATCHES, RV_TOK_AUDIO_FBANK, RV_TOK_MODALITY,
       RV_TOK_POS, RV_TOK_TIME, RV_TOK_WINDOW, RV_TOK_ARRAYS };

typedef struct rv_tok_collect_opts {
    rv_collect_keep keep;   /* what is kept of the tensors (RV_KEEP_NONE: counts) */
    const char *beside;     /* RV_KEEP_SCRATCH: the output path the scratch files
                               go beside */
    rv_tok_batch_fn check;  /* called with every batch before it is kept (NULL:
                               none): a limit, an interrupt; anything but RV_OK
                               stops the pass with that status */
    void *user;             /* check's */
} rv_tok_collect_opts;

typedef struct rv_tok_collected rv_tok_collected;

/* Tokenizes rec's whole sequence (planned, or open when rec->need_count) and
 * gathers it. stats (may be NULL) receives the pass: stats->layout is the
 * sequence, its t0 the recording's. A count other than the layout's is
 * RV_ERR_INTERNAL. *out is NULL on failure. */
RV_API rv_status rv_tok_collect(const char *path, const rv_tok_recording *rec,
                                const rv_tok_opts *to, const rv_tok_collect_opts *o,
                                rv_tok_collected **out, rv_tok_stats *stats);
/* The tensors (RV_TOK_ARRAYS of them, by the enum above; data NULL when not
 * kept); the data live until the set is freed or the tensor taken. */
RV_API void rv_tok_collected_arrays(const rv_tok_collected *c, rv_collected out[RV_TOK_ARRAYS]);
/* In memory: tensor i's buffer (malloc'd, for the caller to free; NULL when it
 * is empty or not in memory), no longer the set's. */
RV_API void *rv_tok_collected_take(rv_tok_collected *c, int i);
/* Sets *c to NULL; NULL or *c == NULL is a no-op. */
RV_API void rv_tok_collected_free(rv_tok_collected **c);

#ifdef __cplusplus
}
#endif
#endif
