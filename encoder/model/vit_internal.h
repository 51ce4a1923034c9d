/* vit_internal.h: what the encoder's forward and backward files share (not
 * installed): the argument checks and clock of the forward (vit_forward.c), the
 * token embedding of one rank's slice (vit_embed.c), the bilinear and bicubic
 * resampling of the stored position tables it uses and that resampling's
 * transpose. The public API is rv_vit.h, rv_vit_train.h, rv_cp_attention.h and
 * rv_safetensors.h. One file per job:
 *
 * Config and families
 *   rv_vit.h            the encoder: config, family description, model, forward,
 *                       pooling, spans (public)
 *   vit_config.c        named presets and the config checks
 *   vit_config_json.c   rv_vit_config <-> the "ringvit.config" JSON text
 *   vit_family.c        family defaults and enum names, derived sizes, what a
 *                       model asks of the tokenizer and of ingest
 * Weights in memory and I/O
 *   vit_model.c         the weight arena and its pointers, parameter count, hash
 *   vit_labels.c        the classifier head's labels beside the arena
 *   vit_tensors.h       the tensor list load, save and checkpoints walk
 *   vit_init.c          fresh weights from a seed; vit_rng.h / vit_rng.c, the
 *                       generator
 *   vit_load.c          safetensors -> model (ringvit's and torchvision's names)
 *   vit_load_util.h/.c  what the two readers share: dtype and shape checks,
 *                       F16/BF16 -> f32, the patch weight's permutation
 *   vit_hub.h           Hugging Face folders: vit_hub_config.c (config.json,
 *                       preprocessor_config.json), vit_hub.c (the tensors)
 *   vit_save.c          model -> safetensors
 *   vit_backend_copy.c  the weights copied into a backend's memory
 *   rv_safetensors.h/.c the safetensors reader and writer (public)
 * Forward (inference)
 *   vit_tokens.c        a rank's token slice (rv_tok_slice.h) as the forward's
 *                       input, and the audio steps its positions use
 *   vit_embed.c         the token embedding of a rank's slice, sinusoid codes
 *   vit_resample.c      position tables resampled to the run's grid, and back
 *   vit_block.c         one encoder block, the only copy (inference and training)
 *   vit_forward.c       embedding, L blocks, final LayerNorm (rv_vit_forward)
 *   vit_forward_rows.c  the blocks in query rows under an attention span
 *   vit_span.c          attention spans: parsing, the per-token keys
 *   vit_pool.c          pooling by all-reduce (global, segments, modalities, CLS)
 *                       and the family's pooled head
 *   vit_classify.c      the classifier heads' logits (rv_vit_classify)
 * Backward and training (rv_vit_train.h)
 *   vit_train_forward.c the forward that keeps the activations
 *   vit_backward.c      the blocks' backward, in reverse
 *   vit_embed_backward.c the embedding's backward
 *   train_head.c        the task heads' weights; train_classify.c, the
 *                       classification loss; train_mae.c, masked reconstruction
 *   train_adamw.c       AdamW, its schedule, the gradient norm
 *   train_step.c        one optimizer step: gradients summed over cp then dp,
 *                       clipped, AdamW over the model and the head
 *   train_decay.c       which parameters weight decay applies to
 *   train_ckpt.c        checkpoints that resume exactly
 * Context-parallel attention (rv_cp_attention.h; cp_common.h, cp_span.h, cp_strategies.h)
 *   cp_attention.c      set-up, span set-up, dispatch to the table's entry
 *   cp_strategies.c     the table of strategies: names, checks, entries
 *   cp_ring_forward.c   ring forward: K/V chunks travel to rank+1
 *   cp_ring_backward.c  ring backward: whole blocks and partial dK/dV travel
 *   cp_span_ring.c      the ring under a span: K/V runs only to reached ranks
 *   cp_allgather.c      all-gather strategy, forward and backward
 *   cp_ulysses.c        Ulysses: all-to-all to head shards and back
 *   cp_span.c           a span's state: keys, masks, pair counts, envelopes
 *   cp_common.c         what they share: segments, buffers, re-ordering, stats
 * Flat calls for other languages (rv_flat.h, flat_internal.h; Python's ctypes)
 *   flat_arrays.c       named arrays (rv_arrays) the caller copies and frees
 *   flat_opts.c         options as JSON text, checked key by key
 *   flat_probe.c        probe JSON for a path, the --version text, build info
 *   flat_reader.c       frames and audio pulled chunk by chunk (a producer thread
 *                       over ingest's frames collector)
 *   flat_tokens.c       a whole token sequence as `ringvit tokens` writes it
 *                       (tokenize's collector and report)
 *   flat_encoder.c      embed in-process, cp ranks as threads, as `ringvit embed`
 *   flat_labels.c       an embed output's ranked labels, as `ringvit labels`
 *   flat_model.c        a --model spec: preset, weights file or folder
 *   flat_interrupt.c    rv_flat_interrupt: a counter the long loops poll */
#ifndef RV_VIT_INTERNAL_H
#define RV_VIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rv_clock.h"
#include "rv_vit.h"

/* Resampling taps of output index o of out from an axis of in entries, as
 * torch.nn.functional.interpolate with align_corners = false: bilinear (2 taps,
 * cubic 0) or bicubic (4 taps, A = -0.75); indices clamped into [0, in).
 * Returns the tap count. */
int vit_taps(int o, int in, int out, int cubic, int idx[4], double w[4]);

/* The spatial position grid resampled from the stored (sg x sg) to (dg x dg):
 * src (sg*sg, D) row by row, dst (dg*dg, D); weights in double. */
void vit_grid_resample(const float *src, int sg, int dg, int dim, int cubic, float *dst);

/* Its transpose: dsrc (sg*sg, D) += R^T ddst, ddst (dg*dg, D), summed in double:
 * the gradient of the stored grid from that of the resampled one. */
void vit_grid_resample_bwd(const double *ddst, int sg, int dg, int dim, int cubic, double *dsrc);

/* AST's time axis: the stored columns (and weights) of step p when the
 * recording has steps time steps and the grid grid_t: the column itself while
 * steps <= grid_t, else linear resampling (align_corners false). Returns the
 * tap count (1 or 2). */
int vit_time_taps(int64_t p, int64_t steps, int grid_t, int64_t idx[2], double w[2]);

/* The steps token i's grid positions are resampled to: its block's
 * (rv_vit_tokens.layout), else in->audio_steps. c caches the last block's;
 * start it at {-1, 0}. */
typedef struct vit_steps_cache {
    int64_t w, steps;
} vit_steps_cache;
int64_t vit_token_audio_steps(const rv_vit_tokens *in, int64_t i, vit_steps_cache *c);

/* x (D) += apos(step, band): AST's grid position of an audio token (vit_time_taps). */
void vit_apos_row(const rv_vit_model *m, int64_t step, int band, int64_t steps, float *x);

/* VideoMAE's fixed sinusoid position of flat index n: den (D) from
 * vit_sinusoid_denoms, then x (D) += the position (rounded to float first). */
void vit_sinusoid_denoms(int dim, double *den);
void vit_sinusoid_add(int64_t n, int dim, const double *den, float *x);

/* The grid positions of a recording with patch grid dg: the stored table's grid
 * part resampled (bilinear or bicubic as the family says) into dst (dg*dg, D).
 * Only for grid positions with dg != cfg.grid. */
void vit_pos_resample(const rv_vit_model *m, int dg, float *dst);

/* codes (len, D): the time code of every token's start (rv_vit_time_code); a
 * start equal to the previous token's copies its row. */
void vit_time_codes(const rv_vit_tokens *in, int dim, float *codes);

/* The attention span of run over this rank's slice, handed to cp (vit_span.c):
 * nothing for full attention. Every rank of the CP group calls it together. */
rv_status vit_span_setup(rv_cp_attn *cp, const rv_vit_run *run, const rv_vit_tokens *in);

/* The checks of rv_vit_forward (model, run, backend, plan, slice; y non-NULL when
 * len > 0; run->weights set on a device backend, run->host a host backend), with
 * messages naming the numbers. patches: 1 when the tokens' patches are read. */
rv_status vit_check_args(const rv_vit_model *m, const rv_vit_run *run, const rv_vit_tokens *in,
                         const float *y, int patches);

/* The host backend for a device run's embedding: run->host, or when that is NULL a
 * CPU backend over every core made now, also stored in *owned for the caller to
 * free (rv_backend_free); *owned is NULL otherwise. */
rv_status vit_host_backend(const rv_vit_run *run, rv_backend **hb, rv_backend **owned);

/* What one block's forward reads and writes besides its weights (vit_block.c);
 * every buffer (len, .) of this rank's slice, in the backend's memory. */
typedef struct vit_block_io {
    const float *x;      /* (len, D) the block input */
    float *xmid;         /* (len, D) the residual after attention (== x: in place) */
    float *xout;         /* (len, D) the block output (== xmid: in place) */
    float *h;            /* (len, D) the LayerNorm outputs */
    float *q, *k, *v;    /* (len, D) each, as the CP attention wants them */
    float *o;            /* (len, D) the attention output (may be h) */
    float *lse;          /* (heads, len) */
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; /* (len) each */
    float *pre;          /* fc1's output: (chunk, M), or (len, M) with pre_all_rows */
    float *act;          /* act(pre): == pre (in place), or its own (len, M) */
    int chunk;           /* MLP rows per pass (len with pre_all_rows) */
    int pre_all_rows;    /* 1: pre holds every row (training keeps it) */
    float *tmp_attn;     /* (len, D) layer-scale scratch, not o (NULL without layer scale) */
    float *tmp_mlp;      /* (len, D) layer-scale scratch, may be h */
} vit_block_io;

/* One block (vit_block.c): xmid = x + attention branch, xout = xmid + MLP
 * branch; adds FLOPs and the attention / MLP wall times to *s. Every rank of the
 * CP group calls it together. */
rv_status vit_block_forward(rv_backend *be, rv_cp_attn *cp, const rv_vit_config *c,
                            const rv_vit_layer *w, int len, const vit_block_io *io,
                            rv_vit_stats *s);

/* The blocks of an inference forward under a span, in query rows
 * (vit_forward_rows.c): y (len, D) the residual stream in the backend's memory,
 * updated in place; *bytes gets the buffers it held. */
rv_status vit_blocks_rows(rv_backend *be, rv_cp_attn *cp, const rv_vit_config *c,
                          const rv_vit_model *wm, const rv_vit_run *run, float *y, int len,
                          rv_vit_stats *s, size_t *bytes);

/* Scratch the embedding borrows from the forward's buffers (each (len, D) floats
 * of this rank's slice; they are overwritten). */
typedef struct vit_embed_scratch {
    float *codes;  /* (len, D) the tokens' time codes */
    float *video;  /* (nvideo, D) video projections before scattering */
    float *audio;  /* (naudio, D) audio projections */
    float *pos;    /* (in->grid^2, D) the resampled grid, or NULL when in->grid equals
                      the stored grid (or there is no video, or no grid) */
} vit_embed_scratch;

/* Checks the slice against the model (modalities, counts, positions in range),
 * naming the first bad token; patches: the video and audio patches must be there
 * too (0: an embedded forward, which does not read them). */
rv_status vit_tokens_check(const rv_vit_model *m, const rv_vit_tokens *in, int patches);

/* x (len, D) = embed(token i) for every token of the slice (rv_vit.h). hidden
 * (len, may be NULL): 1 replaces token i's patch projection (weights and bias) by
 * mask_token (D), as rv_vit_forward_train does. Adds the GEMM FLOPs to *flops. */
rv_status vit_embed(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                    const uint8_t *hidden, const float *mask_token,
                    const vit_embed_scratch *s, float *x, double *flops);


/* ---- training (rv_vit_train.h) ---------------------------------------------------------- */

/* What rv_vit_forward_train keeps for rv_vit_backward: everything (len, .) of
 * this rank's slice, in one host allocation (arena). */
struct rv_vit_acts {
    int64_t len;       /* tokens of the slice */
    int dim, layers, heads, mlp;
    float *x;          /* (L + 1, len, D) block inputs; x[L] is the final LayerNorm's input */
    float *xmid;       /* (L, len, D) the residual after attention (ln_2's input) */
    float *qkv;        /* (L, 3, len, D) q, k, v, each (len, heads, dh) */
    float *o;          /* (L, len, D) attention output (before out_proj) */
    float *pre;        /* (L, len, M) fc1 output before GELU */
    float *lse;        /* (L, heads, len) */
    float *ln_stats;   /* (L, 4, len) mean, rstd of ln_1, then of ln_2 */
    float *final_stats; /* (2, len) mean, rstd of the final LayerNorm */
    float *emb;        /* (len, D) the embedding before a pre-norm (NULL without) */
    float *pre_stats;  /* (2, len) its LayerNorm statistics (NULL without) */
    uint8_t *hidden;   /* (len) the hidden flags (0 when none were given) */
    int any_hidden;    /* 1 when a video or audio token is hidden */
    float *arena;      /* host memory, or be's when be is set */
    rv_backend *be;    /* the device backend whose memory holds arena; NULL: host */
    size_t bytes;      /* the allocation */
};

/* The embedding's backward for dx (len, D), the gradient of the embeddings x:
 * adds into grad's video_w, video_b, audio_w, audio_b (not for hidden tokens),
 * cls, pos (through the resampling's transpose when in->grid differs), band,
 * time_w, modality, and the hidden tokens' rows into dmask (D; may be NULL when
 * none is hidden). codes (len, D) and proj (max(nvideo, naudio), D) are scratch.
 * Adds the GEMM FLOPs to *flops. */
rv_status vit_embed_backward(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                             const uint8_t *hidden, const float *dx, float *codes, float *proj,
                             rv_vit_model *grad, float *dmask, double *flops);

/* m->labels set to the ids as text ("0" .. "C-1"), the labels of a head nobody
 * named yet (vit_labels.c). */
rv_status vit_labels_default(rv_vit_model *m);

#endif
