/* finetune_output.c: the tuned weights of `ringvit finetune` (-o). The file is
 * what rv_vit_save writes, the model's own classifier head and its labels
 * (ringvit.labels) included (so rv_vit_load and `ringvit embed --model` read it;
 * they ignore the heads.* and ringvit.mae_* tensors of a ringvit file), plus the
 * task head and metadata: the class names (ringvit.classes, a JSON array, in
 * class-index order) for classify, the settings JSON (ringvit.finetune) and the
 * steps taken (ringvit.finetune_steps). Made through the public API only: the
 * model is saved to a scratch name, reopened, and its tensors copied into one
 * writer with the head, which writes the final file atomically. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "finetune.h"
#include "out_path.h"
#include "rv_safetensors.h"

rv_status ft_output_write(const char *path, const rv_vit_model *m, const rv_train_head *h,
                          const ft_settings *set, int64_t steps)
{
    char scratch[4300];
    rv_safetensors *st = NULL;
    rv_st_writer *w = NULL;
    char *classes = NULL;
    json_t *arr = NULL;
    rv_status s;
    char target[4096];
    /* Checked before training and again now (see out_path.h); a symlink is
     * written through to its target, whose folder holds the scratch file. */
    scratch[0] = '\0';
    if ((s = out_target_path(path, target, sizeof target)) != RV_OK)
        goto end;
    snprintf(scratch, sizeof scratch, "%s.model.%ld", target, (long)getpid());
    if ((s = rv_vit_save(m, scratch)) != RV_OK || (s = rv_st_open(scratch, &st)) != RV_OK ||
        (s = rv_st_writer_new(&w)) != RV_OK)
        goto end;
    for (int i = 0; i < rv_st_count(st); i++) {
        const rv_st_tensor *t = rv_st_at(st, i);
        if ((s = rv_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data)) != RV_OK)
            goto end;
    }
    if ((s = rv_train_head_write(h, w)) != RV_OK)
        goto end;
    const char *cfg = rv_st_meta(st, RV_VIT_META_CONFIG);
    const char *labels = rv_st_meta(st, RV_VIT_META_LABELS); /* a model's own head */
    char nsteps[32];
    snprintf(nsteps, sizeof nsteps, "%" PRId64, steps);
    if ((cfg && (s = rv_st_writer_meta(w, RV_VIT_META_CONFIG, cfg)) != RV_OK) ||
        (labels && (s = rv_st_writer_meta(w, RV_VIT_META_LABELS, labels)) != RV_OK) ||
        (s = rv_st_writer_meta(w, "format", "pt")) != RV_OK ||
        (s = rv_st_writer_meta(w, "ringvit.producer", FT_FORMAT)) != RV_OK ||
        (s = rv_st_writer_meta(w, FT_META_SETTINGS, set->settings)) != RV_OK ||
        (s = rv_st_writer_meta(w, "ringvit.finetune_steps", nsteps)) != RV_OK)
        goto end;
    if (set->task == RV_TASK_CLASSIFY) {
        arr = json_array();
        for (int i = 0; arr && i < set->classes.n; i++)
            if (json_array_append_new(arr, json_string(set->classes.name[i])) != 0) {
                json_decref(arr);
                arr = NULL;
            }
        classes = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
        if (!classes) {
            s = rv_fail(RV_ERR_NOMEM, "%s: out of memory for the class names (are they UTF-8?)",
                        path);
            goto end;
        }
        if ((s = rv_st_writer_meta(w, FT_META_CLASSES, classes)) != RV_OK)
            goto end;
    }
    s = rv_st_writer_write(w, target);
end:
    rv_st_writer_free(&w);
    rv_st_free(&st);
    if (scratch[0])
        unlink(scratch);
    json_decref(arr);
    free(classes);
    return s;
}
