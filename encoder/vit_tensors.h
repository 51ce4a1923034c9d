/* vit_tensors.h (internal to encoder/): the list of an encoder's weight tensors,
 * one entry per safetensors name (rv_vit.h), pointing into the model's arena,
 * in arena order. vit_load.c and vit_save.c walk it, so the two cannot drift
 * apart; vit_model.c builds it. */
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

typedef struct vit_tensor {
    char name[VIT_NAME_MAX];
    float *data;       /* (numel) into the model's arena */
    int ndim;
    int64_t shape[5];  /* (ndim) the shape in the file */
    int64_t numel;
    vit_layout layout;
    int torchvision;   /* 1: a torchvision name (required on load); 0: ringvit.* (zero when absent) */
} vit_tensor;

/* Entries of a model of config c: 9 + 12 L + 2. */
int vit_tensor_count(const rv_vit_config *c);

/* Fills t (vit_tensor_count entries) for m; the video entry is named
 * VIT_VIDEO_2D (4D) when T == 1, else VIT_VIDEO_3D (5D). */
void vit_tensor_list(const rv_vit_model *m, vit_tensor *t);

/* Video weights between the file's (D, 3, T, P, P) and memory's (D, T*P*P*3). */
void vit_video_to_file(const float *mem, int dim, int T, int P, float *file);
void vit_video_from_file(const float *file, int dim, int T, int P, float *mem);

#endif
