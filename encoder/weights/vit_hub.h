/* vit_hub.h (internal to encoder/): models in the Hugging Face hub layout, a
 * folder holding config.json, model.safetensors (or shards listed by
 * model.safetensors.index.json) and, where the family has one,
 * preprocessor_config.json, exactly as the hub stores them.
 *
 *   vit_hub_config.c  config.json + preprocessor_config.json -> rv_vit_config and
 *                     the facts the tensor mapping needs (vit_hub_model), and
 *                     the classifier's labels (id2label)
 *   vit_hub.c         the tensors: names of each family, checks against the
 *                     config, conversion into ringvit's layout (rv_vit_load_ex) */
#ifndef RV_VIT_HUB_H
#define RV_VIT_HUB_H

#include <jansson.h>

#include "rv_vit.h"

/* Files bigger than this are not a config (a hostile folder could hold anything). */
#define VIT_HUB_JSON_MAX (4 << 20)

/* What config.json says, besides the rv_vit_config. */
typedef struct vit_hub_model {
    char model_type[64];   /* config.json's model_type */
    char label[4200];      /* the folder, for messages */
    rv_vit_config cfg;     /* sizes and the family description (before the tensors
                              settle pool and proj_dim: see vit_hub.c) */
    int file_tubelet;      /* the patch weight's T (1: a 2D weight) */
    int ast_steps;         /* AST: the stored grid's time steps (Td) */
    int use_mean_pooling;  /* VideoMAE */
    int has_preprocessor;  /* 1: preprocessor_config.json was read */
    json_t *id2label;      /* config.json's id2label (owned; NULL when absent), read
                              only when the weights hold a classifier */
    int multi_label;       /* 1: problem_type "multi_label_classification" */
} vit_hub_model;

/* Reads dir/config.json and dir/preprocessor_config.json (when present) into
 * *out. RV_ERR_FORMAT naming the folder, the file and the key for a missing or
 * malformed config, RV_ERR_UNSUPPORTED for a model_type or a variant ringvit
 * does not run (naming it and what is supported). Notes on what was decided go
 * to info->notes. */
rv_status vit_hub_read_config(const char *dir, vit_hub_model *out, rv_vit_load_info *info);

/* Frees what vit_hub_read_config kept (id2label); h stays usable. */
void vit_hub_model_free(vit_hub_model *h);

/* m's labels from h's id2label (its C = m->cfg.classes ids "0" .. "C-1", each
 * once, every value a string), the classifier being the tensor head_name;
 * without an id2label, transformers' defaults LABEL_0 .. (noted in info).
 * RV_ERR_FORMAT naming the folder, config.json, the key and the tensor. */
rv_status vit_hub_labels(const vit_hub_model *h, const char *head_name, rv_vit_model *m,
                         rv_vit_load_info *info);

/* A model folder in the Hugging Face layout (vit_hub.c): rv_vit_load_ex's work for
 * a directory; info is non-NULL and zeroed. */
rv_status vit_hub_load(const char *dir, const rv_vit_load_opts *opts, rv_vit_model **out,
                       rv_vit_load_info *info);

#endif
