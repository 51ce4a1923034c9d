/* rv_vit_train.h: training the encoder of rv_vit.h with context parallelism:
 * a forward that keeps what the backward needs, the backward of every layer
 * (embeddings, LayerNorms, projections, CP attention, MLP), the task heads and
 * losses (classify, masked reconstruction), AdamW with its schedule, the
 * training step over a dp x cp mesh, and checkpoints that resume exactly.
 *
 * Gradients live in an rv_vit_model used as a buffer (rv_vit_new of the same
 * config, then rv_vit_grad_zero): the same fields, "d" for each weight. The
 * backward ADDS this rank's share into it; the sum over the ranks of the
 * context-parallel group is the gradient of the whole sequence (rv_train_step
 * all-reduces over the cp and dp groups).
 *
 * Everything here is deterministic: the same inputs, seeds and rank count give
 * the same bits on the CPU backend. */
#ifndef RV_VIT_TRAIN_H
#define RV_VIT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "rv_api.h"
#include "rv_comm.h"
#include "rv_safetensors.h"
#include "rv_status.h"
#include "rv_vit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- encoder forward with saved activations, and backward ----------------------------- */

/* What one rank's training forward keeps for its backward (opaque): per layer
 * the block input and the residual after attention, LayerNorm statistics (the
 * outputs are recomputed), q, k, v, the attention output and its LSE, the MLP's
 * pre-activation; memory scales with the slice. */
typedef struct rv_vit_acts rv_vit_acts;

/* As rv_vit_forward, keeping activations in *acts (allocated here; free with
 * rv_vit_acts_free). hidden (len, may be NULL): 1 hides token i's content:
 * its patch projection (video_w @ patch + video_b, or the audio one) is
 * replaced by mask_token (D) while its position, band, time and modality
 * embeddings stay (the masked-reconstruction task). */
RV_API rv_status rv_vit_forward_train(const rv_vit_model *m, const rv_vit_run *run,
                                      const rv_vit_tokens *in, const uint8_t *hidden,
                                      const float *mask_token, float *y, rv_vit_acts **acts,
                                      rv_vit_stats *stats);

/* Backward from dy (len, D), the loss gradient of this rank's outputs y.
 * Adds into grad (every weight of the model, this rank's share) and into
 * dmask_token (D; may be NULL when no token was hidden). Every rank of
 * run->comm calls it together (the CP attention backward communicates). acts
 * must come from rv_vit_forward_train with the same m, run, in. stats (may be
 * NULL) gets the backward's FLOPs, times and peak bytes (saved activations
 * included). */
RV_API rv_status rv_vit_backward(const rv_vit_model *m, const rv_vit_run *run,
                                 const rv_vit_tokens *in, const rv_vit_acts *acts,
                                 const float *dy, rv_vit_model *grad, float *dmask_token,
                                 rv_vit_stats *stats);

RV_API void rv_vit_acts_free(rv_vit_acts **a);

/* Sets every weight of g to zero. */
RV_API void rv_vit_grad_zero(rv_vit_model *g);

/* FLOPs of the whole sequence's backward (all ranks), for rates. */
RV_API double rv_vit_backward_flops(const rv_vit_config *c, int64_t seq, int64_t nvideo,
                                    int64_t naudio, int causal);

/* ---- task heads and losses --------------------------------------------------------------- */

typedef enum rv_task {
    RV_TASK_CLASSIFY = 0, /* linear head on the pooled global embedding, cross-entropy */
    RV_TASK_MAE = 1,      /* masked reconstruction of hidden patches, mean squared error */
} rv_task;

/* "classify" / "mae" <-> task; parse fails with RV_ERR_INVALID naming the text. */
RV_API const char *rv_task_name(rv_task t);
RV_API rv_status rv_task_parse(const char *text, rv_task *out);

/* The trainable weights beside the encoder, in one arena. Saved as
 *   heads.head.weight (C, D), heads.head.bias (C)      (torchvision's classifier names)
 *   ringvit.mask_token (D), ringvit.mae_video.weight (T*P*P*3, D), .bias,
 *   ringvit.mae_audio.weight (F*W, D), .bias
 * (only the task's own). */
typedef struct rv_train_head {
    rv_task task;
    int dim;            /* D */
    int classes;        /* C (classify) */
    int64_t video_dim;  /* T*P*P*3 (mae) */
    int64_t audio_dim;  /* F*W (mae) */
    float *cls_w;       /* (C, D) classify */
    float *cls_b;       /* (C) */
    float *mask_token;  /* (D) mae */
    float *mae_video_w; /* (video_dim, D) mae: hidden video token output -> its patch */
    float *mae_video_b; /* (video_dim) */
    float *mae_audio_w; /* (audio_dim, D) */
    float *mae_audio_b; /* (audio_dim) */
    float *arena;
    size_t arena_floats;
} rv_train_head;

/* A zeroed head for the model config (classes used by classify only). */
RV_API rv_status rv_train_head_new(const rv_vit_config *c, rv_task task, int classes,
                                   rv_train_head **out);
/* Fresh weights from seed: linear weights xavier uniform, biases 0, mask token
 * normal std 0.02. */
RV_API rv_status rv_train_head_init(rv_train_head *h, uint64_t seed);
RV_API void rv_train_head_free(rv_train_head **h);
/* Adds the head's tensors (names above) to a safetensors writer / reads them
 * (RV_ERR_FORMAT naming a missing or misshapen tensor). */
RV_API rv_status rv_train_head_write(const rv_train_head *h, rv_st_writer *w);
RV_API rv_status rv_train_head_read(rv_train_head *h, const rv_safetensors *st);

/* Classify loss of one recording, on every rank of comm (the cp group) together.
 * pooled: the global mean of rv_vit_pool (identical on every rank). Computes
 * logits = cls_w @ pooled + cls_b, loss = cross-entropy with label (natural
 * log, stable log-softmax), *pred the argmax. Adds dy (len, D) += dL/dy for
 * this rank's tokens (the global mean's gradient: dpooled / tokens for every
 * non-CLS token), and the head gradient into dhead (a head used as a gradient
 * buffer) ON COMM RANK 0 ONLY, so that summing gradients over the cp group
 * counts it once. scale multiplies every gradient (1 / (dp * accum) for the
 * step's mean). */
RV_API rv_status rv_classify_loss(rv_comm *comm, const rv_train_head *h,
                                  const rv_vit_tokens *in, const rv_vit_pooled *pooled,
                                  int label, float scale, double *loss, int *pred, float *dy,
                                  rv_train_head *dhead);

/* Which tokens the masked-reconstruction task hides: video and audio tokens
 * (never CLS), each independently with probability fraction, decided by a
 * counter-based hash of (seed, global token index), so every rank finds the
 * same answer for its own tokens without communication and a resumed run the
 * same as an uninterrupted one. plan / rank give the slice's global indices
 * (local order = segments of rv_shard_segments). hidden (len) gets 1/0. */
RV_API void rv_mae_hidden(uint64_t seed, double fraction, const rv_shard_plan *plan, int rank,
                          const rv_vit_tokens *in, uint8_t *hidden);

/* Masked-reconstruction loss over the cp group: for each hidden token, the
 * prediction W y_i + b (the modality's head) against its patch normalised per
 * patch ((x - mean) / sqrt(var + 1e-6), VideoMAE's normalised pixels; the same
 * for fbank values); loss = sum of squared errors / (hidden tokens' elements
 * over all ranks). Adds dy (len, D) and the head gradient of this rank's
 * hidden tokens into dhead (every rank: each has its own tokens), times scale.
 * *loss is the cp group's loss (identical on every rank); *hidden_total the
 * hidden tokens over all ranks. */
RV_API rv_status rv_mae_loss(rv_comm *comm, const rv_train_head *h, const rv_vit_tokens *in,
                             const uint8_t *hidden, const float *y, float scale, double *loss,
                             int64_t *hidden_total, float *dy, rv_train_head *dhead);

/* ---- optimizer ---------------------------------------------------------------------------- */

typedef struct rv_adamw_opts {
    double lr;          /* peak learning rate (1e-4) */
    double beta1, beta2; /* 0.9, 0.999 */
    double eps;         /* 1e-8 */
    double wd;          /* decoupled weight decay (0.05), on the decay mask only */
    int64_t warmup;     /* steps of linear warm-up from 0 (lr * (step + 1) / warmup) */
    int64_t total;      /* total steps: cosine decay from lr to min_lr at total */
    double min_lr;      /* 0 */
    double clip;        /* global gradient-norm clip (1.0; <= 0 disables) */
} rv_adamw_opts;

RV_API void rv_adamw_opts_default(rv_adamw_opts *o);

/* The learning rate of step (0-based): warm-up, then cosine decay. */
RV_API double rv_lr_at(const rv_adamw_opts *o, int64_t step);

/* AdamW state over a flat parameter vector of n floats. */
typedef struct rv_adamw {
    int64_t n;
    float *m;          /* (n) first moments */
    float *v;          /* (n) second moments */
    uint8_t *decay;    /* (n) 1: weight decay applies (matrices), 0: biases, norms,
                          embeddings, tokens */
    int64_t step;      /* steps taken */
} rv_adamw;

/* State for n parameters; decay (n) is copied (NULL: decay everything). */
RV_API rv_status rv_adamw_new(int64_t n, const uint8_t *decay, rv_adamw **out);
RV_API void rv_adamw_free(rv_adamw **o);

/* The global gradient norm sqrt(sum g^2) over several vectors (double sums). */
RV_API double rv_grad_norm(const float *const *g, const int64_t *n, int count);

/* One step on params (n) with grads (n) (already all-reduced and averaged,
 * already clipped by the caller when wanted): bias-corrected Adam moments,
 * decoupled weight decay p -= lr * wd * p on the decay mask, lr = rv_lr_at(o,
 * o->step); then o->step++. */
RV_API rv_status rv_adamw_step(rv_adamw *o, const rv_adamw_opts *opts, float *params,
                               const float *grads);

/* The decay mask of an encoder followed by its head, in the order of
 * [m->arena | h->arena] (n = rv_vit_params(m) + h->arena_floats; h may be NULL):
 * 1 on video_w, audio_w, time_w, qkv_w, proj_w, fc1_w, fc2_w, cls_w, mae_*_w. */
RV_API void rv_train_decay_mask(const rv_vit_model *m, const rv_train_head *h, uint8_t *mask);

/* AdamW state for an encoder followed by its head (h may be NULL): n =
 * rv_vit_params(m) + h->arena_floats, decay mask rv_train_decay_mask, zero
 * moments, step 0. Free with rv_adamw_free. */
RV_API rv_status rv_adamw_new_model(const rv_vit_model *m, const rv_train_head *h, rv_adamw **out);

/* Copies src's moments and step count into dst (the same n; the decay mask
 * stays dst's): e.g. every rank's own state from a loaded checkpoint's. */
RV_API rv_status rv_adamw_copy(rv_adamw *dst, const rv_adamw *src);

/* ---- the training step -------------------------------------------------------------------- */

typedef struct rv_train_step_opts {
    const rv_adamw_opts *model; /* the encoder's AdamW and schedule; model->clip is the
                                   global clip over model and head (<= 0: none) */
    const rv_adamw_opts *head;  /* the head's (e.g. its own lr; its clip is unused);
                                   NULL: model's */
} rv_train_step_opts;

typedef struct rv_train_step_info {
    double grad_norm;    /* global norm of the summed gradients, before clipping */
    int clipped;         /* 1: the gradients were scaled by clip / grad_norm */
    double lr, head_lr;  /* the learning rates of this step (rv_lr_at) */
    int64_t step;        /* steps taken, this one included */
} rv_train_step_info;

/* One optimizer step on every rank of the dp x cp mesh together (each calls it
 * with its own copies; all end with the same parameters). grad and dhead hold
 * this rank's share of the step's gradient (the backward's and the loss's
 * additions, already scaled to the step's mean); they are summed in place over
 * cp, then over dp (F32 all-reduce; either comm may be NULL: no sum), then
 * scaled by opts->model->clip / norm when the global norm over [model | head]
 * exceeds that clip; then AdamW (rv_adamw_step) updates m with opts->model and
 * h with opts->head at the same step count, and state->step advances by one.
 * state is over [model | head] (rv_adamw_new_model). h may be NULL (no head;
 * dhead NULL too). A non-finite norm fails with RV_ERR_INVALID before any
 * parameter changes (info->grad_norm holds it). info (may be NULL) gets what
 * the step did. On return grad and dhead hold the summed, clipped gradient. */
RV_API rv_status rv_train_step(rv_adamw *state, rv_vit_model *m, rv_vit_model *grad,
                               rv_train_head *h, rv_train_head *dhead, rv_comm *cp, rv_comm *dp,
                               const rv_train_step_opts *opts, rv_train_step_info *info);

/* ---- checkpoints -------------------------------------------------------------------------- */

/* A training checkpoint: the model (rv_vit_save's names and config), the head,
 * the optimizer moments (optim.m / optim.v, flat F32 over [model | head]), and
 * in the metadata the step, the data position, the seed and the run's
 * settings (a JSON text the caller owns, e.g. the finetune flags). Written to
 * a temporary name and renamed when complete. rv_vit_load reads a checkpoint as
 * a model (the other tensors are known to it and ignored). */
typedef struct rv_ckpt_info {
    int64_t step;        /* optimizer steps taken */
    int64_t data_pos;    /* recordings consumed (the data order is a function of seed) */
    uint64_t seed;
    char settings[4096]; /* JSON text */
} rv_ckpt_info;

RV_API rv_status rv_ckpt_save(const char *path, const rv_vit_model *m, const rv_train_head *h,
                              const rv_adamw *o, const rv_ckpt_info *info);
/* Reads into existing m, h, o of the right sizes (RV_ERR_FORMAT naming what
 * differs); info gets the metadata. */
RV_API rv_status rv_ckpt_load(const char *path, rv_vit_model *m, rv_train_head *h, rv_adamw *o,
                              rv_ckpt_info *info);

#ifdef __cplusplus
}
#endif
#endif
