/* rv_vit.h: the encoder, a vision transformer over the token sequence of
 * rv_tokens.h, run with context parallelism: every rank embeds and encodes only
 * its own slice of the sequence; attention is the only step that sees other
 * ranks' tokens (through rv_cp_attention.h), and pooling is an all-reduce.
 *
 * One block function serves every model FAMILY, inference and training alike;
 * the family description in rv_vit_config (family, act, qkv_bias, layer_scale,
 * pre_norm, final_norm, pool, pos, audio_pos, time_code, the input
 * normalisation and the modalities) says what differs:
 *   x_i = embed(token i);  x = pre_ln(x) when pre_norm
 *   for each layer:
 *     x += ls_1 * out_proj(attention(q, k, v of ln_1(x)))   (ls_1 = 1 without layer scale)
 *     x += ls_2 * fc2(act(fc1(ln_2(x))))
 *   y = final_ln(x) when final_norm, else x
 * attention scaled by 1/sqrt(D/heads); q, k, v biases present as qkv_bias says
 * (absent ones are zero and stay zero in training). Pooling (the family's
 * "pooled" output, rv_vit_pool_head): the first special token (CLS), the mean of
 * the CLS and distillation tokens (AST), a LayerNorm of the mean of the patch
 * tokens (VideoMAE's fc_norm), a LayerNorm of CLS (CLIP's post_layernorm),
 * tanh(W CLS + b) (ViT's pooler), or the plain mean; then an optional linear
 * projection (CLIP's visual_projection).
 *
 * Classifier heads (rv_vit_head_kind; rv_vit_classify), each computed as its
 * transformers task model computes its logits (C classes, labels in id order):
 *   cls            W CLS + b                          ViTForImageClassification
 *   mean_norm      W pool_ln(mean) + b                VideoMAEForVideoClassification
 *                  (pool_ln = fc_norm, use_mean_pooling)
 *   cls_dist_norm  W head_ln((CLS + dist) / 2) + b    ASTForAudioClassification
 *                  (ASTMLPHead: layernorm, eps the model's, then dense)
 *   cls_mean       W [CLS; mean] + b  (W (C, 2D))     Dinov2ForImageClassification
 *   mean           W mean + b                         ringvit's finetune classify head
 * where mean is the mean of the non-special tokens' outputs (rv_vit_pooled's
 * global). multi_label (the config's problem_type "multi_label_classification")
 * says the classes are independent: probabilities by sigmoid, not softmax.
 *
 * Embedding (token i at start time t, s since t0; vit_embed.c):
 *   video token (tubelet g, patch row y, column x):
 *       video_w @ patch [+ video_b] + vpos(g, y, x) [+ time(t) + modality[0]]
 *   audio token (time step p, frequency band b):
 *       audio_w @ patch + audio_b + apos(p, b) [+ time(t) + modality[1]]
 *   special token j (0: CLS, 1: AST's distillation token):
 *       cls[j] [+ pos[j]] [+ time(t) + modality[2]]
 * with [time(t) + modality] for families with time_code (ringvit's own), where
 * time(t) = time_w @ sinusoid(t) (rv_vit_time_code): audio and video at the same
 * moment get the same temporal code, and recordings of any length work. vpos:
 *   RV_POS_GRID_*    the learned table pos[special + y*G + x] of the stored
 *                    (grid x grid) positions, resampled to the recording's patch
 *                    grid when it differs (bilinear or bicubic, align_corners
 *                    false, as torch.nn.functional.interpolate; special slots
 *                    kept); every tubelet gets the same spatial positions;
 *   RV_POS_SINUSOID  VideoMAE's fixed table: entry j of flat index
 *                    n = g*G'*G' + y*G' + x (G' the recording's grid) is
 *                    sin (j even) or cos (j odd) of n / 10000^(2 floor(j/2) / D),
 *                    for any number of tubelets;
 * apos:
 *   RV_APOS_BAND     ringvit's learned band[b];
 *   RV_APOS_GRID     AST's learned (bands x audio_grid_t) table audio_pos[b, p]
 *                    when the recording has at most audio_grid_t time steps, else
 *                    that table resampled along time to the recording's steps
 *                    (linear, align_corners false).
 *
 * Families (rv_vit_family; the Hugging Face layouts are read by vit_hub.c):
 *   ringvit   ringvit's own joint audio-video model: presets, `ringvit init`,
 *             `finetune` outputs, torchvision-named image ViTs (GELU erf, eps
 *             1e-6, biases everywhere, bilinear grid, time code, band
 *             embeddings, final norm, pooled = CLS);
 *   vit       transformers' ViTModel (eps 1e-12, bicubic grid, pooler when stored);
 *   videomae  VideoMAEModel (Conv3d tubelets, q and v biases only, sinusoid
 *             positions, mean pooling through fc_norm);
 *   ast       ASTModel (audio only: CLS + distillation token, 16x16 patches
 *             with stride 10 in both axes, learned frequency x time grid);
 *   clip      CLIP's vision tower (pre_layrnorm, QuickGELU, no patch bias,
 *             pooled = post_layernorm(CLS), visual_projection);
 *   dinov2    Dinov2Model (layer scale, bicubic grid, pooled = final-norm CLS).
 *
 * Weights in ringvit's own safetensors files (rv_vit_save; the hub layouts are
 * mapped onto the same tensors). Shared parts carry torchvision names:
 *   conv_proj.weight            (D, 3, P, P) F32     when T == 1 (torchvision's)
 *   conv_proj.bias              (D)                  (when the patch has a bias)
 *   class_token                 (1, special, D)
 *   encoder.pos_embedding       (1, rows, D)  special slots first (rows: 1 + grid*grid
 *                               for ringvit, special + grid*grid for grids, special else)
 *   encoder.layers.encoder_layer_{i}.ln_1.weight / .bias                    (D)
 *   encoder.layers.encoder_layer_{i}.self_attention.in_proj_weight          (3D, D)
 *   encoder.layers.encoder_layer_{i}.self_attention.in_proj_bias            (3D)
 *   encoder.layers.encoder_layer_{i}.self_attention.out_proj.weight / .bias (D, D), (D)
 *   encoder.layers.encoder_layer_{i}.ln_2.weight / .bias                    (D)
 *   encoder.layers.encoder_layer_{i}.mlp.0.weight / .bias                   (M, D), (M)
 *   encoder.layers.encoder_layer_{i}.mlp.3.weight / .bias                   (D, M), (D)
 *   encoder.layers.encoder_layer_{i}.layer_scale_1 / _2                     (D) (layer scale)
 *   encoder.ln.weight / .bias                                               (D) (final norm)
 * and project-specific ones live under ringvit.*:
 *   ringvit.tubelet_proj.weight (D, 3, T, P, P)   when T > 1 (Conv3d layout)
 *   ringvit.audio_proj.weight   (D, 1, F, W)      Conv2d over (freq, time)
 *   ringvit.audio_proj.bias     (D)
 *   ringvit.audio_band          (bands, D)        RV_APOS_BAND
 *   ringvit.audio_pos           (bands * audio_grid_t, D)  RV_APOS_GRID, band-major
 *   ringvit.time_proj.weight    (D, D)            time_code: applied to the sinusoid code
 *   ringvit.modality            (3, D)            time_code: video, audio, special
 *   ringvit.pre_ln.weight / .bias   (D)           pre_norm
 *   ringvit.pool_ln.weight / .bias  (D)           pooling LayerNorm
 *   ringvit.pooler.weight / .bias   (D, D), (D)   ViT's pooler
 *   ringvit.projection.weight       (proj_dim, D) the pooled output's projection
 *   ringvit.head.weight / .bias     (C, D or 2D), (C) the classifier head (head)
 *   ringvit.head_ln.weight / .bias  (D)           its LayerNorm (cls_dist_norm)
 * bands = (128 - F) / audio_fstride + 1. The config (rv_vit_config as JSON) is
 * the metadata entry "ringvit.config"; a model with a head has its labels as
 * the metadata entry "ringvit.labels" (a JSON list of C strings, in id order).
 * A file holding only torchvision names is that image ViT exactly (family
 * ringvit, video only): the absent ringvit.* tensors are zero, sizes come from
 * the tensor shapes (D from conv_proj.weight, P from its width, layers from the
 * names, M from mlp.0, grid from the pos_embedding length - 1, which must be a
 * square), heads default to D / 64 (a D that is not a multiple of 64 needs the
 * head count given: rv_vit_load_opts.heads, else RV_ERR_INVALID saying so), and
 * with a tubelet T > 1 asked for, the 2D patch weight is inflated: each of the
 * T frames gets conv_proj.weight / T, so a still clip embeds as the image does
 * (the same for the image families of the hub). Reading is hostile-input safe
 * (any malformed, missing, misshapen or wrongly typed tensor is RV_ERR_FORMAT
 * naming the tensor and the file).
 *
 * In memory every weight is f32 in ringvit's own layout (noted on the fields),
 * all in one arena; a tensor the family does not have is NULL. */
#ifndef RV_VIT_H
#define RV_VIT_H

#include <stddef.h>
#include <stdint.h>

#include "rv_api.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_cp_attention.h"
#include "rv_shard.h"
#include "rv_status.h"
#include "rv_tok_slice.h"
#include "rv_tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_VIT_CHANNELS 3         /* RGB */
#define RV_VIT_MEL_BINS 128       /* fbank bins (RV_FBANK_BINS) */
#define RV_VIT_TIME_PERIOD_MIN 0.1    /* s: the shortest period of the time code */
#define RV_VIT_TIME_PERIOD_MAX 10000.0 /* s: the longest */
#define RV_VIT_META_CONFIG "ringvit.config" /* safetensors metadata key */
#define RV_VIT_META_LABELS "ringvit.labels" /* the head's labels: a JSON list */
#define RV_VIT_MAX_CLASSES (1 << 20)        /* the most classes a head may have */

/* Model families (the header comment above says what each is). */
typedef enum rv_vit_family {
    RV_FAMILY_RINGVIT = 0,
    RV_FAMILY_VIT = 1,
    RV_FAMILY_VIDEOMAE = 2,
    RV_FAMILY_AST = 3,
    RV_FAMILY_CLIP = 4,
    RV_FAMILY_DINOV2 = 5,
} rv_vit_family;

/* Video positions. */
typedef enum rv_vit_pos {
    RV_POS_NONE = 0,
    RV_POS_GRID_BILINEAR = 1, /* learned grid, bilinear resampling (torchvision, ringvit) */
    RV_POS_GRID_BICUBIC = 2,  /* learned grid, bicubic resampling (transformers) */
    RV_POS_SINUSOID = 3,      /* fixed sinusoid over the flat (t, y, x) index (VideoMAE) */
} rv_vit_pos;

/* Audio positions. */
typedef enum rv_vit_audio_pos {
    RV_APOS_NONE = 0,
    RV_APOS_BAND = 1, /* a learned embedding per frequency band (ringvit) */
    RV_APOS_GRID = 2, /* a learned band x time grid, resampled along time (AST) */
} rv_vit_audio_pos;

/* The family's pooled output (rv_vit_pool_head). */
typedef enum rv_vit_pool_kind {
    RV_POOL_CLS = 0,        /* the CLS token's output */
    RV_POOL_CLS_DIST = 1,   /* mean of the CLS and distillation outputs (AST) */
    RV_POOL_MEAN_NORM = 2,  /* pool_ln(mean of the non-special tokens) (VideoMAE fc_norm) */
    RV_POOL_CLS_NORM = 3,   /* pool_ln(CLS) (CLIP post_layernorm) */
    RV_POOL_CLS_TANH = 4,   /* tanh(pooler_w CLS + pooler_b) (ViT's pooler) */
    RV_POOL_MEAN = 5,       /* mean of the non-special tokens */
} rv_vit_pool_kind;

/* The classifier head (the header comment says what each computes). */
typedef enum rv_vit_head_kind {
    RV_HEAD_NONE = 0,
    RV_HEAD_CLS = 1,           /* W CLS + b (ViT) */
    RV_HEAD_MEAN_NORM = 2,     /* W pool_ln(mean) + b (VideoMAE's fc_norm) */
    RV_HEAD_CLS_DIST_NORM = 3, /* W head_ln((CLS + dist) / 2) + b (AST) */
    RV_HEAD_CLS_MEAN = 4,      /* W [CLS; mean] + b (DINOv2) */
    RV_HEAD_MEAN = 5,          /* W mean + b (ringvit's finetune classify) */
} rv_vit_head_kind;

/* qkv_bias bits */
#define RV_VIT_BIAS_Q 1
#define RV_VIT_BIAS_K 2
#define RV_VIT_BIAS_V 4

typedef struct rv_vit_config {
    char preset[16];  /* "tiny", "small", "base", or "custom"; for hub models the family */
    int dim;          /* D: token width */
    int layers;       /* L */
    int heads;        /* D % heads == 0 */
    int mlp;          /* M: MLP hidden width (4 D in the presets) */
    float eps;        /* LayerNorm eps of the blocks and the final norm (1e-6) */
    int tubelet;      /* T: frames per video token (tokenizer's tubelet) */
    int patch;        /* P: pixels per patch side */
    int grid;         /* stored spatial position grid side (224 / 16 = 14 in the presets) */
    int audio_freq;   /* F: mel bins per audio patch (<= 128) */
    int audio_time;   /* W: fbank frames per audio patch */
    int cls;          /* leading special tokens: 0, 1 (CLS) or 2 (CLS, distillation) */
    /* ---- the family description (defaults: ringvit's own) ---- */
    int family;       /* rv_vit_family */
    int act;          /* rv_act: the MLP activation */
    int qkv_bias;     /* RV_VIT_BIAS_* bits present (7: all; 0: none) */
    int patch_bias;   /* 1: the video patch projection has a bias */
    int layer_scale;  /* 1: per-channel gamma on both residual branches */
    int pre_norm;     /* 1: a LayerNorm before the first block (CLIP's pre_layrnorm) */
    int final_norm;   /* 1: a LayerNorm on every token after the last block */
    int pool;         /* rv_vit_pool_kind */
    float pool_eps;   /* eps of the pooling LayerNorm */
    int pos;          /* rv_vit_pos: video positions */
    int audio_pos;    /* rv_vit_audio_pos */
    int time_code;    /* 1: the time projection and modality embeddings (ringvit) */
    int audio_fstride; /* mel bins between audio bands (F: none overlap) */
    int audio_tstride; /* fbank frames between audio time steps (W) */
    int audio_grid_t; /* RV_APOS_GRID: time steps of the stored grid */
    int video, audio; /* 1: the weights cover that modality */
    int proj_dim;     /* > 0: a linear projection of the pooled output */
    float mean[3], std[3];        /* video normalisation on [0, 1] values */
    float audio_mean, audio_std;  /* fbank normalisation (x - mean) / (2 std) */
    int image_size;   /* frame side the model's processor uses (default --size); 0:
                         grid * patch */
    int head;         /* rv_vit_head_kind: the classifier head (none by default) */
    int classes;      /* C: its classes (0 without a head) */
    int multi_label;  /* 1: the classes are independent (sigmoid); with a head only */
} rv_vit_config;

/* Presets (family ringvit): tiny (D 192, L 12, H 3), small (384, 12, 6), base
 * (768, 12, 12); all M = 4 D, eps 1e-6, T 2, P 16, grid 14, F 16, W 16, cls 1.
 * RV_ERR_INVALID naming the text for another name. */
RV_API rv_status rv_vit_preset(const char *name, rv_vit_config *out);

/* Sets the family description of c (every field after cls) to ringvit's own
 * defaults: GELU (erf), all biases, no layer scale, final norm, pooled = CLS
 * (mean without one), bilinear grid, band embeddings, time code, strides F and W,
 * both modalities, ImageNet mean/std, AST's fbank mean/std. */
RV_API void rv_vit_family_defaults(rv_vit_config *c);

/* "ringvit", "vit", "videomae", "ast", "clip", "dinov2" ("?" outside the enum).
 * Likewise for the other enums (the names are the JSON values of the config). */
RV_API const char *rv_vit_family_name(int family);
RV_API const char *rv_vit_act_name(int act);          /* "gelu", "gelu_tanh", "quick_gelu" */
RV_API const char *rv_vit_pool_name(int pool);        /* "cls", "cls_dist", "mean_norm", ... */
RV_API const char *rv_vit_pos_name(int pos);          /* "none", "grid_bilinear", ... */
RV_API const char *rv_vit_audio_pos_name(int apos);   /* "none", "band", "grid" */
RV_API const char *rv_vit_head_name(int head);        /* "none", "cls", "mean_norm", ... */
/* What head reads and computes, one line ("W [CLS; mean] + b (DINOv2's classifier)"). */
RV_API const char *rv_vit_head_text(int head);
/* The width of the head's input: 2 D for cls_mean, else D (0 without a head). */
RV_API int rv_vit_head_in(const rv_vit_config *c);

/* Checks sizes and their relations (D % heads, F <= 128, the family's fields and
 * their combinations), naming the numbers. */
RV_API rv_status rv_vit_config_check(const rv_vit_config *c);

/* Derived sizes: audio frequency bands (128 - F) / audio_fstride + 1; rows of
 * the pos table (see the header comment; 0 when none); special slots among them
 * (where the grid starts). */
RV_API int rv_vit_bands(const rv_vit_config *c);
RV_API int64_t rv_vit_pos_rows(const rv_vit_config *c);
RV_API int rv_vit_pos_special(const rv_vit_config *c);

/* The tokenizer options the model wants (rv_tokens.h): tubelet, patch, the video
 * and audio normalisation, the audio patch and its strides, the special tokens,
 * and the modalities its weights cover (to->video / to->audio). The interleaving
 * window keeps its default. */
RV_API void rv_vit_tok_opts(const rv_vit_config *c, rv_tok_opts *to);
/* The frame side the model's processor uses (image_size, else grid * patch). */
RV_API int rv_vit_frame_size(const rv_vit_config *c);

struct rv_span;
/* The tokenizer and ingest options of a run of the model, as embed and finetune
 * make them: rv_vit_tok_opts; frames of side size px (0: the model's,
 * rv_vit_frame_size), a multiple of the patch; a modality the model has no
 * weights for, or that the caller leaves out (no_video, no_audio), is neither
 * read nor tokenized; a block or frame span (may be NULL: full) makes the
 * tokenizer's windows the blocks, each led by its own special tokens, positions
 * restarting in each. io's other fields (fps, start, threads, ...) are kept.
 * RV_ERR_INVALID when the size is not a multiple of the patch, nothing is left
 * to read, or a frame span has no video. */
RV_API rv_status rv_vit_input_opts(const rv_vit_config *c, int size, int no_video, int no_audio,
                                   const struct rv_span *span, rv_tok_opts *to, rv_ingest_opts *io);

/* Config <-> the JSON text stored as metadata (jansson). to_json returns a
 * malloc'd string (NULL on allocation failure). The family keys are written only
 * where they differ from ringvit's defaults, so ringvit's own configs read as
 * before; a missing key is its default. */
RV_API char *rv_vit_config_to_json(const rv_vit_config *c);
RV_API rv_status rv_vit_config_from_json(const char *text, rv_vit_config *out);

typedef struct rv_vit_layer {
    float *ln1_w, *ln1_b;   /* (D) */
    float *qkv_w;           /* (3D, D) in_proj_weight: rows of q, then k, then v */
    float *qkv_b;           /* (3D) */
    float *proj_w, *proj_b; /* (D, D), (D) out_proj */
    float *ln2_w, *ln2_b;   /* (D) */
    float *fc1_w, *fc1_b;   /* (M, D), (M) mlp.0 */
    float *fc2_w, *fc2_b;   /* (D, M), (D) mlp.3 */
    float *ls1, *ls2;       /* (D) layer scale of the attention / MLP branch (NULL
                               without layer scale) */
} rv_vit_layer;

typedef struct rv_vit_model {
    rv_vit_config cfg;
    float *video_w;   /* (D, T*P*P*3): patch values in token order (t, y, x, c), c
                         fastest, as rv_tokens.h flattens them; the file's
                         (D, 3, T, P, P) permuted (NULL without video) */
    float *video_b;   /* (D) (NULL without a patch bias) */
    float *audio_w;   /* (D, F*W): (f, w) order, w fastest, as the tokens (NULL
                         without audio) */
    float *audio_b;   /* (D) */
    float *cls;       /* (special, D) the special tokens: CLS, then distillation */
    float *pos;       /* (rv_vit_pos_rows, D) special slots first, then the grid
                         row by row (NULL when 0 rows) */
    float *band;      /* (bands, D) audio band embeddings (RV_APOS_BAND) */
    float *audio_pos; /* (bands * audio_grid_t, D) AST's grid, band-major (RV_APOS_GRID) */
    float *time_w;    /* (D, D) time projection (time_code) */
    float *modality;  /* (3, D) video, audio, special (time_code) */
    float *pre_ln_w, *pre_ln_b; /* (D) pre_norm */
    rv_vit_layer *layer; /* (L) */
    float *ln_w, *ln_b;  /* (D) final LayerNorm (final_norm) */
    float *pool_ln_w, *pool_ln_b; /* (D) the pooling LayerNorm (RV_POOL_*_NORM) */
    float *pooler_w, *pooler_b;   /* (D, D), (D) RV_POOL_CLS_TANH */
    float *proj_w;       /* (proj_dim, D) */
    float *head_w;       /* (C, rv_vit_head_in) the classifier (NULL without a head) */
    float *head_b;       /* (C) */
    float *head_ln_w, *head_ln_b; /* (D) its LayerNorm (RV_HEAD_CLS_DIST_NORM) */
    float *arena;        /* every tensor above lives here */
    size_t arena_floats; /* its length */
    char **labels;       /* (C) the classes' names, UTF-8, in id order (NULL without a
                            head); not in the arena: one allocation the model owns */
} rv_vit_model;

/* A model with every weight zero (LayerNorm weights one); with a head, its labels
 * are the ids as text ("0", "1", ...) until rv_vit_set_labels. */
RV_API rv_status rv_vit_new(const rv_vit_config *c, rv_vit_model **out);

/* The head's labels (n of them, each UTF-8 text, copied); RV_ERR_INVALID when the
 * model has no head, n is not its classes, or a label is NULL or not UTF-8. */
RV_API rv_status rv_vit_set_labels(rv_vit_model *m, const char *const *labels, int n);

/* Fresh weights from seed, as torchvision initialises its VisionTransformer:
 * conv_proj truncated normal with std sqrt(1 / fan_in), bias 0; class token 0;
 * pos_embedding normal std 0.02; in_proj xavier uniform, bias 0; out_proj
 * kaiming uniform (a = sqrt 5), bias 0; MLP xavier uniform, bias normal std 1e-6;
 * LayerNorms 1, 0. The ringvit.* tensors: audio_proj as conv_proj, audio_band and
 * modality normal std 0.02, time_proj truncated normal std 0.02. The same seed
 * gives the same weights on every machine. */
RV_API rv_status rv_vit_init_random(rv_vit_model *m, uint64_t seed);

typedef struct rv_vit_load_opts {
    int heads;    /* > 0: overrides the stored or default head count (ringvit and
                     torchvision files) */
    int tubelet;  /* > 0: the tubelet wanted; a 2D patch weight is inflated to it
                     (image families too), a file stored with another T > 1 is an
                     error naming both */
} rv_vit_load_opts;

/* What a load found (rv_vit_load_ex), for `ringvit inspect` and warnings. */
typedef struct rv_vit_load_info {
    char format[16];       /* "ringvit" (ringvit.config metadata), "torchvision"
                              (torchvision names only) or "hub" (a folder) */
    char model_type[64];   /* hub: config.json's model_type */
    char weights[4096];    /* the weights file read */
    int file_tensors;      /* tensors in the file */
    int used;              /* read into the model */
    char **ignored;        /* (nignored) known tensors the encoder does not use
                              (decoders, the text tower, buffers, a classifier it
                              cannot apply) */
    int nignored;
    char **unknown;        /* (nunknown) tensors of no known role (warned) */
    int nunknown;
    char **zeroed;         /* (nzeroed) model tensors the file lacks, left zero */
    int nzeroed;
    char **notes;          /* (nnotes) one line each: what the loader decided and why
                              (e.g. "pooled = fc_norm(mean) (use_mean_pooling)") */
    int nnotes;
} rv_vit_load_info;

RV_API void rv_vit_load_info_free(rv_vit_load_info *info);

/* Reads a model (opts may be NULL): a ringvit or torchvision-named .safetensors
 * file, or a folder in the Hugging Face layout (config.json, model.safetensors,
 * preprocessor_config.json where the family has one; vit_hub.c). */
RV_API rv_status rv_vit_load(const char *path, const rv_vit_load_opts *opts,
                             rv_vit_model **out);
/* The same, telling what it found in *info (zeroed first; free with
 * rv_vit_load_info_free, also after a failure). */
RV_API rv_status rv_vit_load_ex(const char *path, const rv_vit_load_opts *opts,
                                rv_vit_model **out, rv_vit_load_info *info);

/* Writes every tensor under the names above (conv_proj.weight when T == 1,
 * ringvit.tubelet_proj.weight otherwise) and the config metadata, to a temporary
 * name renamed when complete. */
RV_API rv_status rv_vit_save(const rv_vit_model *m, const char *path);

/* 16 hex digits: a 64-bit FNV-1a hash of the config JSON, every weight's bytes
 * and (with a head) the labels, naming the model in outputs. */
RV_API void rv_vit_hash(const rv_vit_model *m, char out[17]);

/* Parameter count (the arena length). */
RV_API int64_t rv_vit_params(const rv_vit_model *m);

/* Sets *m to NULL; NULL or *m == NULL is a no-op. */
RV_API void rv_vit_free(rv_vit_model **m);

/* The fixed time code of t seconds, (D): for i < D/2, code[2i] = sin(w_i t),
 * code[2i+1] = cos(w_i t), w_i = 2 pi / period_i with periods geometric from
 * RV_VIT_TIME_PERIOD_MIN (i = 0) to RV_VIT_TIME_PERIOD_MAX (i = D/2 - 1); an odd
 * D leaves the last entry 0. Computed in double. */
RV_API void rv_vit_time_code(double t, int dim, float *code);

/* ---- forward with context parallelism ------------------------------------------------ */

/* One rank's slice of the token sequence, in local order (its shard plan
 * segments, segment 0 first), as rv_tok_batch hands them out. */
typedef struct rv_vit_tokens {
    int64_t len;              /* tokens on this rank (rv_shard_len) */
    const uint8_t *modality;  /* (len) rv_modality */
    const int64_t *pos;       /* (len, 3): video (g, y, x), audio (p, band, 0) */
    const double *seq_time;   /* (len, 2) start, end: sequence time (s from t0) */
    int64_t nvideo;           /* video tokens among them */
    const float *video;       /* (nvideo, T*P*P*3) their patches, in token order */
    int64_t naudio;
    const float *audio;       /* (naudio, F*W) */
    int grid;                 /* patches per side of this recording's frames
                                 (size / P); positions are resampled when it
                                 differs from cfg.grid */
    int64_t audio_steps;      /* audio time steps of the whole sequence (the
                                 layout's steps; with block spans the longest
                                 block's, rv_vit_audio_steps): RV_APOS_GRID
                                 resamples its positions to it when it exceeds
                                 audio_grid_t, unless layout gives each block's */
    const int64_t *window;    /* (len) each token's window (block) index, as the
                                 tokenizer hands it out; required by block and
                                 frame spans, else may be NULL */
    const rv_tok_layout *layout; /* the layout the tokens come from, or NULL: when
                                 its windows are cut from the recording (block
                                 and frame spans: window_positions) and window is
                                 given, each audio token's RV_APOS_GRID positions
                                 are resampled to its own block's steps, as the
                                 block embedded alone has them (a short last
                                 block is not stretched to the longest's) */
} rv_vit_tokens;

/* The audio steps of L's tokens (rv_vit_tokens.audio_steps): the layout's, or,
 * when positions restart in each window (block and frame spans), the longest
 * window's. */
RV_API int64_t rv_vit_audio_steps(const rv_tok_layout *L);
/* The audio steps of L's window w (rv_tok_window_items): what its tokens' grid
 * positions are resampled to when rv_vit_tokens.layout is L. */
RV_API int64_t rv_vit_window_audio_steps(const rv_tok_layout *L, int64_t w);
/* The forward's view of one rank's slice of L (rv_tok_slice.h): its arrays, not
 * copied; video and audio are NULL when the slice keeps no patches. */
RV_API rv_vit_tokens rv_vit_slice_tokens(const rv_tok_layout *L, const rv_tok_slice *s);

/* Attention spans on the time axis that audio and video tokens share (issue:
 * hour-long recordings at linear cost). A token's time is its start, s.
 *   full         every token sees every token (the default)
 *   window=W     token i sees token j when |t_i - t_j| <= W / 2
 *   block=W      the recording is cut into consecutive W-second blocks (the
 *                tokenizer's windows, each led by its own special tokens) and
 *                tokens see only their own block: the same as embedding each
 *                block on its own
 *   frame        each tubelet time step (and the audio patches starting within
 *                it) is its own block: an image model so equals itself on every
 *                frame
 * With causal attention a span also needs t_j <= t_i (by sequence position for
 * equal times). Blocks and frames read each token's block from the tokens'
 * window index (rv_vit_tokens.window). */
typedef enum rv_span_kind {
    RV_SPAN_FULL = 0,
    RV_SPAN_WINDOW = 1,
    RV_SPAN_BLOCK = 2,
    RV_SPAN_FRAME = 3,
} rv_span_kind;

typedef struct rv_span {
    rv_span_kind kind;
    double seconds;    /* W of window and block (> 0) */
} rv_span;

/* "full", "frame", "block=SECONDS", "window=SECONDS" -> span; RV_ERR_INVALID naming
 * the text. format writes the same form ("window=16"). */
RV_API rv_status rv_span_parse(const char *text, rv_span *out);
RV_API void rv_span_format(const rv_span *s, char *buf, size_t cap);

typedef struct rv_vit_run {
    rv_backend *be;           /* compute backend (not owned) */
    rv_comm *comm;            /* the context-parallel group (not owned) */
    rv_shard_plan plan;       /* the sequence over comm's ranks */
    rv_cp_strategy strategy;
    int causal;               /* 1: causal attention (use the zigzag plan) */
    /* For a backend whose memory is device memory (not rv_backend_is_host): the
     * model's weights in that memory (rv_vit_to_backend); the forward then runs
     * the blocks there. NULL on a host backend. */
    const rv_vit_model *weights;
    rv_span span;             /* attention span (zero: full); a span over more
                                 than one rank needs the contiguous plan */
    /* A host backend (rv_backend_is_host) for the embedding of a device run (not
     * owned), made once by the caller and passed to every call; NULL: each call
     * creates its own over every core. Not read on a host backend. */
    rv_backend *host;
    /* Called before each layer of the forward (NULL: never): anything but RV_OK
     * stops it with that status (an interrupt). A rank that stops alone leaves
     * its peers failing at their next exchange with it (rv_local_run: at once). */
    rv_status (*check)(void *arg);
    void *check_arg;
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
RV_API rv_status rv_vit_to_backend(const rv_vit_model *m, rv_backend *be, rv_vit_model **out);
RV_API void rv_vit_backend_free(rv_backend *be, rv_vit_model **dm);

/* y (len, D): this rank's per-token outputs after the final LayerNorm, in host
 * memory. Every rank of run->comm calls it together. stats may be NULL.
 * On a device backend (run->weights set) the embedding runs on the host
 * (run->host, else a CPU backend over every core) and the blocks, the CP
 * attention and the final LayerNorm on the device; y is copied back. Training
 * (rv_vit_train.h) splits the work the same way: its saved activations are
 * device memory, the embedding and its backward run on the host. */
RV_API rv_status rv_vit_forward(const rv_vit_model *m, const rv_vit_run *run,
                                const rv_vit_tokens *in, float *y, rv_vit_stats *stats);

/* x (in->len, D): the embedding of every token of in, on a host backend
 * (rv_backend_is_host, as cpu): what the forward starts from. in may be any run
 * of tokens of a sequence (a tokenizer batch), so a long recording is embedded
 * while it is tokenized and its patches never held whole. Adds the GEMM FLOPs to
 * *flops (may be NULL). */
RV_API rv_status rv_vit_embed(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                              float *x, double *flops);

/* As rv_vit_forward from embeddings: y (len, D) holds rv_vit_embed's output on
 * entry and the outputs on return; in->video and in->audio are not read. */
RV_API rv_status rv_vit_forward_embedded(const rv_vit_model *m, const rv_vit_run *run,
                                         const rv_vit_tokens *in, float *y,
                                         rv_vit_stats *stats);

/* FLOPs of the whole sequence's forward (all ranks), for rates. */
RV_API double rv_vit_forward_flops(const rv_vit_config *c, int64_t seq, int64_t nvideo,
                                   int64_t naudio, int causal);

/* ---- pooling without gathering the tokens -------------------------------------------- */

typedef struct rv_vit_pool_opts {
    double segment_s;  /* window length, s (default 10) */
    double end_s;      /* the recording's end, sequence time (s from t0): segments
                          cover [start_s, end_s) */
    double hop_s;      /* start of segment g is start_s + g * hop_s (0: segment_s,
                          adjacent windows; less: overlapping ones) */
    double start_s;    /* where segment 0 starts, sequence time (default 0; the
                          grid's start, negative when audio precedes the first
                          frame) */
    double t0;         /* t0 on the container's clock, s: the segment bounds come
                          out at t0 + their sequence times (default 0: sequence
                          time) */
} rv_vit_pool_opts;

typedef struct rv_vit_pooled {
    int dim;
    int64_t tokens;           /* tokens pooled (all but CLS) */
    float *global;            /* (D) mean of every token's output but CLS */
    int64_t segments;         /* G = max(1, ceil((end_s - start_s) / hop_s)) */
    float *segment;           /* (G, D) means of the tokens starting in each window
                                 start_s + [g hop_s, g hop_s + segment_s); a token
                                 starting after every window counts in the last,
                                 one before the first in the first; an empty
                                 window is zeros */
    double *segment_start;    /* (G) t0 + (start_s + g * hop_s): s on the container's
                                 clock */
    double *segment_end;      /* (G) t0 + (start_s + min(g * hop_s + segment_s,
                                 end_s - start_s)) */
    int64_t *segment_tokens;  /* (G) */
    float *modality_mean;     /* (2, D) video, audio (zeros when none) */
    int64_t modality_tokens[2];
    int has_cls;              /* 1 when the sequence holds a CLS token */
    float *cls;               /* (D) its output (zeros when none) */
    int has_dist;             /* 1 when it holds a distillation token (special 1) */
    float *dist;              /* (D) its output (zeros when none) */
    /* rv_vit_pool_head: */
    float *pooled;            /* (D) the family's pooled output (NULL before) */
    int proj_dim;             /* > 0 when the model projects it */
    float *projected;         /* (proj_dim) proj_w @ pooled */
    int classes;              /* > 0 when the model has a classifier head */
    float *logits;            /* (classes) rv_vit_classify(cls, dist, global) */
} rv_vit_pooled;

/* Pools y (in->len, dim) of every rank by all-reduce (sums in double); every
 * rank gets the same result. Every rank of comm calls it together. */
RV_API rv_status rv_vit_pool(rv_comm *comm, const rv_vit_tokens *in, const float *y, int dim,
                             const rv_vit_pool_opts *opts, rv_vit_pooled *out);

/* The family's pooled output from what rv_vit_pool gathered (host only, no
 * communication): p->pooled (D) by m->cfg.pool (the header comment), then
 * p->projected = proj_w @ pooled when the model has a projection, and
 * p->logits = rv_vit_classify(m, cls, dist, global) when it has a head. A pool
 * kind or head whose token is missing from the sequence (CLS pooling without a
 * CLS) is RV_ERR_INVALID naming it. */
RV_API rv_status rv_vit_pool_head(const rv_vit_model *m, rv_vit_pooled *p);

/* logits (C) of the model's classifier head from the final outputs of one
 * sequence or one attention block: cls (D) its CLS token's output, dist (D) its
 * distillation token's (AST), mean (D) the mean of its non-special tokens'
 * outputs (rv_vit_pooled.global, or a block's mean); the header comment gives
 * each head's formula. Each head reads only its inputs, the others may be NULL:
 *   cls  cls;  mean_norm  mean;  cls_dist_norm  cls, dist;  cls_mean  cls, mean;
 *   mean  mean.
 * Computed in double on the host (no device, no communication), rounded to f32
 * once. RV_ERR_INVALID without a head, or when an input the head reads is NULL
 * (naming it). */
RV_API rv_status rv_vit_classify(const rv_vit_model *m, const float *cls, const float *dist,
                                 const float *mean, float *logits);

/* Frees the arrays and zeroes the struct. */
RV_API void rv_vit_pooled_free(rv_vit_pooled *p);

/* ---- pooling per attention block ------------------------------------------------------ */

/* Under block and frame spans every block (the tokenizer's window, led by its own
 * special tokens) is a sequence of its own: its pooled outputs are the family's
 * for that block alone (rv_vit_pool_head on the block's CLS, distillation token
 * and mean), gathered on rank 0. */
typedef struct rv_vit_blocks {
    int dim;
    int64_t blocks;           /* G: the sequence's windows */
    int64_t *tokens;          /* (G) non-special tokens of each block */
    float *mean;              /* (G, D) the mean of each block's non-special tokens */
    uint8_t *has_cls;         /* (G) 1 when the block holds a CLS (special 0) */
    float *cls;               /* (G, D) its output (zeros when none) */
    uint8_t *has_dist;        /* (G) 1 when it holds a distillation token (special 1) */
    float *dist;              /* (G, D) its output (zeros when none) */
    /* rv_vit_pool_blocks_head: */
    float *pooled;            /* (G, D) each block's pooled output (NULL before) */
    int proj_dim;             /* > 0 when the model projects it */
    float *projected;         /* (G, proj_dim) */
    int classes;              /* > 0 when the model has a classifier head */
    float *logits;            /* (G, classes) each block's (rv_vit_classify) */
} rv_vit_blocks;

/* The per-block sums of y (in->len, dim) over the windows [0, windows) of
 * in->window, on rank 0 of comm (each rank sends its blocks' partial sums; a
 * block cut between two ranks is added up there; sums in double). Every rank of
 * comm calls it together; out is filled on rank 0 and left empty elsewhere. */
RV_API rv_status rv_vit_pool_blocks(rv_comm *comm, const rv_vit_tokens *in, const float *y,
                                    int dim, int64_t windows, rv_vit_blocks *out);
/* Each block's pooled output, projection and logits (host only): what
 * rv_vit_pool_head gives a sequence of that block alone. */
RV_API rv_status rv_vit_pool_blocks_head(const rv_vit_model *m, rv_vit_blocks *b);
RV_API void rv_vit_blocks_free(rv_vit_blocks *b);

#ifdef __cplusplus
}
#endif
#endif
