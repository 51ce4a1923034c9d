/* vit_load_util.h (internal to encoder/): what the two weight readers share —
 * vit_load.c (ringvit's and torchvision's safetensors files) and vit_hub.c (the
 * Hugging Face layouts): dtype and shape checks with messages naming the file
 * and the tensor, the conversion of F32/F16/BF16 data to f32, the patch
 * weight's permutation and inflation, the name lists of rv_vit_load_info, and
 * the caller's head count and tubelet applied to the config. Neither reader calls
 * the other but vit_load.c handing a folder to vit_hub_load. */
#ifndef RV_VIT_LOAD_UTIL_H
#define RV_VIT_LOAD_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "rv_safetensors.h"
#include "rv_vit.h"

/* Names come from hostile files: cap how much of one goes into a message. */
#define VIT_NAME_FMT "%.200s"
/* Largest extent taken from a file before the config check bounds it. */
#define VIT_MAX_EXTENT (1 << 24)

/* 1 for the dtypes weights may have (F32, F16, BF16). */
int vit_dtype_ok(rv_dtype d);

/* "[a, b, c]" */
void vit_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape);

/* RV_ERR_FORMAT unless t's dtype is one of vit_dtype_ok's. */
rv_status vit_check_dtype(const rv_safetensors *st, const rv_st_tensor *t);

/* dtype, then the exact shape; why says where the expected shape comes from
 * (appended to the message). */
rv_status vit_check_tensor(const rv_safetensors *st, const rv_st_tensor *t, int ndim,
                           const int64_t *shape, const char *why);

/* Extent dim of t, bounded to [1, VIT_MAX_EXTENT] (RV_ERR_FORMAT otherwise). */
rv_status vit_extent(const rv_safetensors *st, const rv_st_tensor *t, int dim, int *out);

/* RV_ERR_FORMAT naming the tensor and the first bad index when t (dtype passed
 * vit_check_dtype) holds a NaN or an infinity: such a weight turns every
 * embedding into NaN, so it is refused at load rather than written out. */
rv_status vit_check_finite(const rv_safetensors *st, const rv_st_tensor *t);

/* The writers' side: RV_ERR_INVALID naming the tensor and the first bad index when
 * the n floats of tensor name hold a NaN or an infinity, so a diverged model is
 * never written (what: "saving weights", "saving checkpoint"; path: the output). */
rv_status vit_floats_finite(const char *what, const char *path, const char *name,
                            const float *x, int64_t n);

/* RV_ERR_FORMAT when the tensors a config requires (need_floats values, at
 * least 2 bytes each: F16/BF16 are the smallest accepted dtypes) cannot fit in
 * the have_bytes of tensor data the weights hold. Checked before the model is
 * allocated, so a tiny file whose config (source: "ringvit.config metadata",
 * "config.json") claims a huge model is refused at once. what names the file
 * or folder. */
rv_status vit_check_fits(const char *what, const char *source, const rv_vit_config *c,
                         uint64_t need_floats, uint64_t have_bytes);


/* The video patch weight t, of file tubelet file_T (1: a 2D (D, 3, P, P)
 * weight), into the model's (D, T*P*P*3) layout for c's tubelet: permuted, and
 * inflated (each of the T frames gets weight / T) when file_T is 1 and c's
 * tubelet is not. */
rv_status vit_read_video(const rv_st_tensor *t, const rv_vit_config *c, int file_T, float *dst,
                         const char *label);

/* One warning naming the unknown tensors of info (the first two and a count),
 * when there are any; what is the file or folder. */
void vit_warn_unknown(const char *what, const rv_vit_load_info *info);

/* The caller's head count and tubelet applied to c, read from file label whose
 * patch weight (named video_name) has tubelet file_T, then c checked: the same
 * for both readers. */
rv_status vit_apply_load_opts(const rv_vit_load_opts *opts, const char *label, int file_T,
                              const char *video_name, rv_vit_config *c);

/* The head's labels as the "ringvit.labels" metadata text: a compact JSON list
 * (malloc'd; NULL when out of memory or the model has no head). vit_labels_meta.c */
char *vit_labels_json(const rv_vit_model *m);

/* The labels of m's head from text, the metadata entry key (RV_VIT_META_LABELS,
 * or a finetune output's ringvit.classes) of the file what names ("weights file
 * 'x'"): a JSON list of exactly C strings, each checked; RV_ERR_FORMAT naming the
 * file and the key otherwise (text NULL: the entry is missing). */
rv_status vit_labels_from_json(const char *what, const char *key, const char *text,
                               rv_vit_model *m);

/* Appends a printf-formatted string to a name list of rv_vit_load_info
 * (*list grows; NULL info lists are fine to append to). */
rv_status vit_info_add(char ***list, int *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
