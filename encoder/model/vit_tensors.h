/* vit_tensors.h (internal to encoder/): the list of an encoder's weight tensors,
 * one entry per tensor of ringvit's own safetensors names (rv_vit.h), pointing
 * into the model's arena, in arena order. Which tensors exist follows the
 * config's family description. vit_load.c, vit_save.c, train_ckpt.c and the hub
 * loader (vit_hub.c) walk it, so they cannot drift apart; vit_model.c builds it. */
#ifndef RV_VIT_TENSORS_H
#define RV_VIT_TENSORS_H

#include <stdint.h>

#include "rv_vit.h"

#define VIT_NAME_MAX 96
#define VIT_LAYER_PREFIX "encoder.layers.encoder_layer_"
#define VIT_VIDEO_2D "conv_proj.weight"
#define VIT_VIDEO_3D "ringvit.tubelet_proj.weight"

typedef enum vit_layout {
    VIT_PLAIN = 0, /* memory = the file's row-major bytes (audio_w: (D,1,F,W) == (D,F*W)) */
    VIT_VIDEO = 1, /* memory (D, T*P*P*3) (t,y,x,c) vs file (D, 3, T, P, P) / (D, 3, P, P) */
} vit_layout;

/* What a tensor is: which field of rv_vit_model (or of layer `layer`) it fills. */
typedef enum vit_role {
    VR_VIDEO_W, VR_VIDEO_B, VR_AUDIO_W, VR_AUDIO_B, VR_CLS, VR_POS, VR_BAND, VR_TIME_W,
    VR_MODALITY, VR_AUDIO_POS, VR_PRE_LN_W, VR_PRE_LN_B,
    VR_LN1_W, VR_LN1_B, VR_QKV_W, VR_QKV_B, VR_PROJ_W, VR_PROJ_B, VR_LN2_W, VR_LN2_B,
    VR_FC1_W, VR_FC1_B, VR_FC2_W, VR_FC2_B, VR_LS1, VR_LS2,
    VR_LN_W, VR_LN_B, VR_POOL_LN_W, VR_POOL_LN_B, VR_POOLER_W, VR_POOLER_B, VR_PROJ_OUT,
    VR_HEAD_W, VR_HEAD_B, VR_HEAD_LN_W, VR_HEAD_LN_B,
    VR_COUNT
} vit_role;

typedef struct vit_tensor {
    char name[VIT_NAME_MAX];
    float *data;       /* (numel) into the model's arena */
    int ndim;
    int64_t shape[5];  /* (ndim) the shape in the file */
    int64_t numel;
    vit_layout layout;
    int torchvision;   /* 1: a torchvision name (required in a torchvision file);
                          0: ringvit.* (zero when a torchvision file lacks it) */
    vit_role role;
    int layer;         /* the layer of a per-layer tensor, else -1 */
} vit_tensor;

/* 1 for the classifier head's tensors (required whenever the config has a head,
 * whatever the family: a head read as zeros would give every input the same
 * scores). */
int vit_is_head_role(vit_role r);

/* Entries of a model of config c. */
int vit_tensor_count(const rv_vit_config *c);

/* Fills t (vit_tensor_count entries) for m; the video entry is named
 * VIT_VIDEO_2D (4D) when T == 1, else VIT_VIDEO_3D (5D). */
void vit_tensor_list(const rv_vit_model *m, vit_tensor *t);

/* The field of m that role (of layer, for per-layer roles) fills. */
float **vit_slot(rv_vit_model *m, vit_role role, int layer);

/* Video weights between the file's (D, 3, T, P, P) and memory's (D, T*P*P*3). */
void vit_video_to_file(const float *mem, int dim, int T, int P, float *file);
void vit_video_from_file(const float *file, int dim, int T, int P, float *mem);

#endif
