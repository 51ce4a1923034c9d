/* vit_labels_meta.c: a classifier head's labels in ringvit's own files (the
 * metadata entry "ringvit.labels", rv_vit.h): written by rv_vit_save and the
 * training checkpoints, read back by rv_vit_load, which treats the text as
 * hostile (a list of exactly C strings, nothing else). */
#include <jansson.h>
#include <stdlib.h>

#include "vit_load_util.h"

char *vit_labels_json(const rv_vit_model *m)
{
    if (!m || m->cfg.head == RV_HEAD_NONE || !m->labels)
        return NULL;
    json_t *a = json_array();
    for (int i = 0; a && i < m->cfg.classes; i++)
        if (json_array_append_new(a, json_string(m->labels[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}

rv_status vit_labels_from_json(const char *what, const char *key, const char *text,
                               rv_vit_model *m)
{
    rv_status s = RV_OK;
    const char **v = NULL;
    json_error_t err;
    const int C = m->cfg.classes;
    if (!text)
        return rv_fail(RV_ERR_FORMAT, "%s: the model has a %s head of %d classes but no '%s' "
                       "metadata (its labels)", what, rv_vit_head_name(m->cfg.head), C,
                       key);
    json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_array(a)) {
        s = rv_fail(RV_ERR_FORMAT, "%s: metadata '%s' is not a JSON list%s%.200s", what,
                    key, a ? "" : ": ", a ? "" : err.text);
        goto end;
    }
    if (json_array_size(a) != (size_t)C) {
        s = rv_fail(RV_ERR_FORMAT, "%s: metadata '%s' holds %zu labels; the head has %d "
                    "classes", what, key, json_array_size(a), C);
        goto end;
    }
    if (!(v = malloc(sizeof *v * (size_t)C + 1))) {
        s = rv_fail(RV_ERR_NOMEM, "%s: out of memory for %d labels", what, C);
        goto end;
    }
    for (int i = 0; i < C; i++) {
        const json_t *e = json_array_get(a, (size_t)i);
        if (!json_is_string(e)) {
            s = rv_fail(RV_ERR_FORMAT, "%s: metadata '%s': label %d is not a string", what,
                        key, i);
            goto end;
        }
        v[i] = json_string_value(e);
    }
    s = rv_vit_set_labels(m, v, C);
end:
    free(v);
    json_decref(a);
    return s;
}
