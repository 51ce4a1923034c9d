/* vit_save.c: writes an encoder's weights as safetensors (rv_vit_save): every
 * tensor of vit_tensors.h under its torchvision or ringvit.* name, f32, in
 * arena order, with the config JSON as metadata "ringvit.config" and
 * "format": "pt" (what torch-side safetensors loaders expect), and with a
 * classifier head its labels as "ringvit.labels". The video weight
 * is permuted back to the Conv layout; everything else is written straight from
 * the arena. The writer goes through a temporary file renamed when complete. */
#include <stdlib.h>

#include "rv_safetensors.h"
#include "rv_vit.h"
#include "vit_load_util.h"
#include "vit_tensors.h"

rv_status rv_vit_save(const rv_vit_model *m, const char *path)
{
    rv_status s = RV_OK;
    rv_st_writer *w = NULL;
    vit_tensor *list = NULL;
    float *video = NULL; /* (D, 3, T, P, P) the file's layout */
    char *json = NULL, *labels = NULL;
    if (!m || !path) {
        s = rv_fail(RV_ERR_INVALID, "rv_vit_save: NULL argument");
        goto end;
    }
    const rv_vit_config *c = &m->cfg;
    if ((s = rv_vit_config_check(c)) != RV_OK)
        goto end;
    int n = vit_tensor_count(c);
    list = malloc((size_t)n * sizeof *list);
    json = rv_vit_config_to_json(c);
    labels = c->head != RV_HEAD_NONE ? vit_labels_json(m) : NULL;
    if (!list || !json || (c->head != RV_HEAD_NONE && !labels)) {
        s = rv_fail(RV_ERR_NOMEM, "saving weights '%s': out of memory", path);
        goto end;
    }
    vit_tensor_list(m, list);
    if ((s = rv_st_writer_new(&w)) != RV_OK)
        goto end;
    for (int i = 0; i < n; i++) {
        const float *data = list[i].data;
        if ((s = vit_floats_finite("saving weights", path, list[i].name, data, list[i].numel)) != RV_OK)
            goto end;
        if (list[i].layout == VIT_VIDEO) {
            video = malloc((size_t)list[i].numel * sizeof *video);
            if (!video) {
                s = rv_fail(RV_ERR_NOMEM, "saving weights '%s': out of memory", path);
                goto end;
            }
            vit_video_to_file(m->video_w, c->dim, c->tubelet, c->patch, video);
            data = video;
        }
        s = rv_st_writer_add(w, list[i].name, RV_F32, list[i].ndim, list[i].shape, data);
        if (s != RV_OK)
            goto end;
    }
    if ((s = rv_st_writer_meta(w, RV_VIT_META_CONFIG, json)) != RV_OK ||
        (s = rv_st_writer_meta(w, "format", "pt")) != RV_OK ||
        (labels && (s = rv_st_writer_meta(w, RV_VIT_META_LABELS, labels)) != RV_OK))
        goto end;
    s = rv_st_writer_write(w, path);
end:
    rv_st_writer_free(&w);
    free(video);
    free(list);
    free(json);
    free(labels);
    return s;
}
