/* rv_vit.h: the encoder, a vision transformer over the token sequence of
 * rv_tokens.h, run with context parallelism: every rank embeds and encodes only
 * its own slice of the sequence; attention is the only step that sees other
 * ranks' tokens (through rv_cp_attention.h), and pooling is an all-reduce.
 *
 * Model (as torchvision's VisionTransformer, pre-LayerNorm blocks):
 *   x_i = embed(token i)
 *   for each layer: x += out_proj(attention(qkv(ln_1(x))));  x += mlp.3(gelu(mlp.0(ln_2(x))))
 *   y = encoder.ln(x)
 * with LayerNorm eps cfg.eps (1e-6), GELU in erf form, biases everywhere, and
 *   embed(video token, tubelet g, patch (py, px)) =
 *         video_w @ patch + video_b + pos[1 + spatial(py, px)] + time(t) + modality[0]
 *   embed(audio token, step p, band b) =
 *         audio_w @ patch + audio_b + band[b] + time(t) + modality[1]
 *   embed(CLS token) = cls + pos[0] + time(t) + modality[2]
 * where t is the token's start time (s since t0, rv_tokens.h), time(t) =
 * time_w @ sinusoid(t) (the fixed code of rv_vit_time_code), and spatial(py, px)
 * is the stored grid's position embedding at that patch: the stored (grid x grid)
 * table when the recording's patch grid equals it, else the table resampled
 * bilinearly to the recording's grid (align_corners = false, as
 * torch.nn.functional.interpolate(mode="bilinear") does; the CLS slot is kept).
 * Audio and video at the same moment get the same temporal code, and any length
 * of recording works, because time is a number, not a table index.
 *
 * Weights (safetensors, rv_safetensors.h). Shared parts carry torchvision names:
 *   conv_proj.weight            (D, 3, P, P) F32     when T == 1 (torchvision's)
 *   conv_proj.bias              (D)
 *   class_token                 (1, 1, D)
 *   encoder.pos_embedding       (1, 1 + grid*grid, D)   CLS slot first
 *   encoder.layers.encoder_layer_{i}.ln_1.weight / .bias                    (D)
 *   encoder.layers.encoder_layer_{i}.self_attention.in_proj_weight          (3D, D)
 *   encoder.layers.encoder_layer_{i}.self_attention.in_proj_bias            (3D)
 *   encoder.layers.encoder_layer_{i}.self_attention.out_proj.weight / .bias (D, D), (D)
 *   encoder.layers.encoder_layer_{i}.ln_2.weight / .bias                    (D)
 *   encoder.layers.encoder_layer_{i}.mlp.0.weight / .bias                   (M, D), (M)
 *   encoder.layers.encoder_layer_{i}.mlp.3.weight / .bias                   (D, M), (D)
 *   encoder.ln.weight / .bias                                               (D)
 * and project-specific ones live under ringvit.*:
 *   ringvit.tubelet_proj.weight (D, 3, T, P, P)   when T > 1 (Conv3d layout)
 *   ringvit.audio_proj.weight   (D, 1, F, W)      Conv2d over (freq, time)
 *   ringvit.audio_proj.bias     (D)
 *   ringvit.audio_band          (bands, D)        one per frequency band, bands = 128 / F
 *   ringvit.time_proj.weight    (D, D)            applied to the sinusoid code
 *   ringvit.modality            (3, D)            video, audio, cls
 * The config (rv_vit_config as JSON) is the metadata entry "ringvit.config".
 * A file holding only torchvision names is that image ViT exactly: the absent
 * ringvit.* tensors are zero, sizes come from the tensor shapes (D from
 * conv_proj.weight, P from its width, layers from the names, M from mlp.0, grid
 * from the pos_embedding length - 1, which must be a square), heads default to
 * D / 64 (a D that is not a multiple of 64 needs the head count given:
 * rv_vit_load_opts.heads, else RV_ERR_INVALID saying so), and with a tubelet T > 1 asked for, the 2D patch weight is inflated:
 * each of the T frames gets conv_proj.weight / T, so a still clip embeds as the
 * image does. Reading is hostile-input safe (any malformed, missing, misshapen or
 * wrongly typed tensor is RV_ERR_FORMAT naming the tensor and the file).
 *
 * In memory every weight is f32 in ringvit's own layout (noted on the fields),
 * all in one arena. */
#ifndef RV_VIT_H
#define RV_VIT_H

#include <stddef.h>
#include <stdint.h>

#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_cp_attention.h"
#include "rv_shard.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_VIT_CHANNELS 3         /* RGB */
#define RV_VIT_MEL_BINS 128       /* fbank bins (RV_FBANK_BINS) */
#define RV_VIT_TIME_PERIOD_MIN 0.1    /* s: the shortest period of the time code */
#define RV_VIT_TIME_PERIOD_MAX 10000.0 /* s: the longest */
#define RV_VIT_META_CONFIG "ringvit.config" /* safetensors metadata key */

typedef struct rv_vit_config {
    char preset[16];  /* "tiny", "small", "base", or "custom" */
    int dim;          /* D: token width */
    int layers;       /* L */
    int heads;        /* D % heads == 0 */
    int mlp;          /* M: MLP hidden width (4 D in the presets) */
    float eps;        /* LayerNorm eps (1e-6) */
    int tubelet;      /* T: frames per video token (tokenizer's tubelet) */
    int patch;        /* P: pixels per patch side */
    int grid;         /* stored spatial position grid side (224 / 16 = 14 in the presets) */
    int audio_freq;   /* F: mel bins per audio patch; divides 128 */
    int audio_time;   /* W: fbank frames per audio patch */
    int cls;          /* 1: a class token leads the sequence */
} rv_vit_config;

/* Presets: tiny (D 192, L 12, H 3), small (384, 12, 6), base (768, 12, 12); all
 * M = 4 D, eps 1e-6, T 2, P 16, grid 14, F 16, W 16, cls 1. RV_ERR_INVALID
 * naming the text for another name. */
rv_status rv_vit_preset(const char *name, rv_vit_config *out);

/* Checks sizes and their relations (D % heads, 128 % F, ...), naming the numbers. */
rv_status rv_vit_config_check(const rv_vit_config *c);

/* Config <-> the JSON text stored as metadata (jansson). to_json returns a
 * malloc'd string (NULL on allocation failure). */
char *rv_vit_config_to_json(const rv_vit_config *c);
rv_status rv_vit_config_from_json(const char *text, rv_vit_config *out);

typedef struct rv_vit_layer {
    float *ln1_w, *ln1_b;   /* (D) */
    float *qkv_w;           /* (3D, D) in_proj_weight: rows of q, then k, then v */
    float *qkv_b;           /* (3D) */
    float *proj_w, *proj_b; /* (D, D), (D) out_proj */
    float *ln2_w, *ln2_b;   /* (D) */
    float *fc1_w, *fc1_b;   /* (M, D), (M) mlp.0 */
    float *fc2_w, *fc2_b;   /* (D, M), (D) mlp.3 */
} rv_vit_layer;

typedef struct rv_vit_model {
    rv_vit_config cfg;
    float *video_w;   /* (D, T*P*P*3): patch values in token order (t, y, x, c), c
                         fastest, as rv_tokens.h flattens them; the file's
                         (D, 3, T, P, P) permuted */
    float *video_b;   /* (D) */
    float *audio_w;   /* (D, F*W): (f, w) order, w fastest, as the tokens */
    float *audio_b;   /* (D) */
    float *cls;       /* (D) class token */
    float *pos;       /* (1 + grid*grid, D) spatial positions, CLS slot first,
                         then row by row */
    float *band;      /* (bands, D) audio band embeddings, bands = 128 / F */
    float *time_w;    /* (D, D) time projection */
    float *modality;  /* (3, D) video, audio, cls */
    rv_vit_layer *layer; /* (L) */
    float *ln_w, *ln_b;  /* (D) final LayerNorm */
    float *arena;        /* every tensor above lives here */
    size_t arena_floats; /* its length */
} rv_vit_model;

/* A model with every weight zero (LayerNorm weights one). */
rv_status rv_vit_new(const rv_vit_config *c, rv_vit_model **out);

/* Fresh weights from seed, as torchvision initialises its VisionTransformer:
 * conv_proj truncated normal with std sqrt(1 / fan_in), bias 0; class token 0;
 * pos_embedding normal std 0.02; in_proj xavier uniform, bias 0; out_proj
 * kaiming uniform (a = sqrt 5), bias 0; MLP xavier uniform, bias normal std 1e-6;
 * LayerNorms 1, 0. The ringvit.* tensors: audio_proj as conv_proj, audio_band and
 * modality normal std 0.02, time_proj truncated normal std 0.02. The same seed
 * gives the same weights on every machine. */
rv_status rv_vit_init_random(rv_vit_model *m, uint64_t seed);

typedef struct rv_vit_load_opts {
    int heads;    /* > 0: overrides the stored or default head count */
    int tubelet;  /* > 0: the tubelet wanted; a 2D file is inflated to it, a file
                     stored with another T > 1 is an error naming both */
} rv_vit_load_opts;

/* Reads a model (opts may be NULL). */
rv_status rv_vit_load(const char *path, const rv_vit_load_opts *opts, rv_vit_model **out);

/* Writes every tensor under the names above (conv_proj.weight when T == 1,
 * ringvit.tubelet_proj.weight otherwise) and the config metadata, to a temporary
 * name renamed when complete. */
rv_status rv_vit_save(const rv_vit_model *m, const char *path);

/* 16 hex digits: a 64-bit FNV-1a hash of the config JSON and every weight's
 * bytes, naming the model in outputs. */
void rv_vit_hash(const rv_vit_model *m, char out[17]);

/* Parameter count (the arena length). */
int64_t rv_vit_params(const rv_vit_model *m);

/* Sets *m to NULL; NULL or *m == NULL is a no-op. */
void rv_vit_free(rv_vit_model **m);

/* The fixed time code of t seconds, (D): for i < D/2, code[2i] = sin(w_i t),
 * code[2i+1] = cos(w_i t), w_i = 2 pi / period_i with periods geometric from
 * RV_VIT_TIME_PERIOD_MIN (i = 0) to RV_VIT_TIME_PERIOD_MAX (i = D/2 - 1); an odd
 * D leaves the last entry 0. Computed in double. */
void rv_vit_time_code(double t, int dim, float *code);

/* ---- forward with context parallelism ------------------------------------------------ */

/* One rank's slice of the token sequence, in local order (its shard plan
 * segments, segment 0 first), as rv_tok_batch hands them out. */
typedef struct rv_vit_tokens {
    int64_t len;              /* tokens on this rank (rv_shard_len) */
    const uint8_t *modality;  /* (len) rv_modality */
    const int64_t *pos;       /* (len, 3): video (g, y, x), audio (p, band, 0) */
    const double *time;       /* (len, 2) start, end; s since t0 */
    int64_t nvideo;           /* video tokens among them */
    const float *video;       /* (nvideo, T*P*P*3) their patches, in token order */
    int64_t naudio;
    const float *audio;       /* (naudio, F*W) */
    int grid;                 /* patches per side of this recording's frames
                                 (size / P); positions are resampled when it
                                 differs from cfg.grid */
} rv_vit_tokens;

typedef struct rv_vit_run {
    rv_backend *be;           /* compute backend (not owned) */
    rv_comm *comm;            /* the context-parallel group (not owned) */
    rv_shard_plan plan;       /* the sequence over comm's ranks */
    rv_cp_strategy strategy;
    int causal;               /* 1: causal attention (use the zigzag plan) */
    /* For a backend other than "cpu": the model's weights in its memory
     * (rv_vit_to_backend); the forward then runs the blocks there. NULL on cpu. */
    const rv_vit_model *weights;
} rv_vit_run;

typedef struct rv_vit_stats {
    double flops;         /* this rank's forward FLOPs (GEMMs, attention) */
    double embed_s, attn_s, mlp_s, other_s; /* wall seconds per part */
    size_t peak_bytes;    /* most activation bytes held at once (weights excluded),
                             the CP attention's buffers included */
    rv_cp_stats cp;       /* the CP attention's counters over all layers */
} rv_vit_stats;

/* A copy of m whose tensors live in be's memory (device memory for "cuda"): the
 * same struct, every pointer into an arena of be's; the host model is unchanged.
 * Free with rv_vit_backend_free on the same backend. */
rv_status rv_vit_to_backend(const rv_vit_model *m, rv_backend *be, rv_vit_model **out);
void rv_vit_backend_free(rv_backend *be, rv_vit_model **dm);

/* y (len, D): this rank's per-token outputs after the final LayerNorm, in host
 * memory. Every rank of run->comm calls it together. stats may be NULL.
 * On a device backend (run->weights set) the embedding runs on the host (a CPU
 * backend over every core) and the blocks, the CP attention and the final
 * LayerNorm on the device; y is copied back. Training (forward_train, backward)
 * is CPU-only for now. */
rv_status rv_vit_forward(const rv_vit_model *m, const rv_vit_run *run,
                         const rv_vit_tokens *in, float *y, rv_vit_stats *stats);

/* FLOPs of the whole sequence's forward (all ranks), for rates. */
double rv_vit_forward_flops(const rv_vit_config *c, int64_t seq, int64_t nvideo,
                            int64_t naudio, int causal);

/* ---- pooling without gathering the tokens -------------------------------------------- */

typedef struct rv_vit_pool_opts {
    double segment_s;  /* window length, s (default 10) */
    double end_s;      /* the recording's end, s since t0: segments cover [0, end_s) */
} rv_vit_pool_opts;

typedef struct rv_vit_pooled {
    int dim;
    int64_t tokens;           /* tokens pooled (all but CLS) */
    float *global;            /* (D) mean of every token's output but CLS */
    int64_t segments;         /* G = max(1, ceil(end_s / segment_s)) */
    float *segment;           /* (G, D) means of the tokens starting in each window;
                                 a token starting at or after G * segment_s counts in
                                 the last; an empty window is zeros */
    double *segment_start;    /* (G) g * segment_s */
    double *segment_end;      /* (G) min((g + 1) * segment_s, end_s) (the last: end_s) */
    int64_t *segment_tokens;  /* (G) */
    float *modality_mean;     /* (2, D) video, audio (zeros when none) */
    int64_t modality_tokens[2];
    int has_cls;              /* 1 when the sequence holds a CLS token */
    float *cls;               /* (D) its output (zeros when none) */
} rv_vit_pooled;

/* Pools y (in->len, dim) of every rank by all-reduce (sums in double); every
 * rank gets the same result. Every rank of comm calls it together. */
rv_status rv_vit_pool(rv_comm *comm, const rv_vit_tokens *in, const float *y, int dim,
                      const rv_vit_pool_opts *opts, rv_vit_pooled *out);

/* Frees the arrays and zeroes the struct. */
void rv_vit_pooled_free(rv_vit_pooled *p);

#ifdef __cplusplus
}
#endif
#endif
