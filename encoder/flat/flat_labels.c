/* flat_labels.c: an embed output's ranked labels as named arrays
 * (rv_flat_labels, rv_flat.h), over rv_embed_labels_read: what `ringvit labels`
 * prints, for Python's ringvit.labels. */
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"
#include "rv_embed.h"

static rv_status read_opts(const char *opts_json, rv_labels_opts *o)
{
    static const char *const keys[] = {"top", "multi_label", "level", NULL};
    json_t *j = NULL;
    rv_status st = flat_opts_parse(opts_json, keys, &j);
    int64_t top = o->top;
    const char *level = NULL;
    if (st == RV_OK)
        st = flat_opt_int(j, "top", 1, RV_VIT_MAX_CLASSES, &top);
    if (st == RV_OK)
        st = flat_opt_bool(j, "multi_label", &o->multi_label);
    if (st == RV_OK)
        st = flat_opt_str(j, "level", &level);
    if (st == RV_OK && level) {
        if (strcmp(level, "block") == 0)
            o->level = RV_LABELS_BLOCK;
        else if (strcmp(level, "recording") == 0)
            o->level = RV_LABELS_RECORDING;
        else if (strcmp(level, "auto") != 0)
            st = rv_fail(RV_ERR_INVALID, "option \"level\": '%.32s' is not block, recording or "
                         "auto", level);
    }
    o->top = (int)top;
    json_decref(j);
    return st;
}

rv_status rv_flat_labels(const char *path, const char *opts_json, rv_arrays **out)
{
    rv_labels_opts o;
    rv_embed_labels *l = NULL;
    rv_arrays *a = NULL;
    int64_t *index = NULL;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "labels: out is NULL");
    *out = NULL;
    rv_labels_opts_default(&o);
    rv_status st = read_opts(opts_json, &o);
    if (st == RV_OK)
        st = path ? rv_embed_labels_read(path, &o, &l) : rv_fail(RV_ERR_INVALID, "labels: no path");
    if (st != RV_OK)
        return st;
    const size_t cells = (size_t)l->rows * (size_t)l->top;
    const int64_t rk[2] = {l->rows, l->top}, r1[1] = {l->rows};
    json_t *meta = json_object(), *names = json_array();
    index = malloc(sizeof *index * cells + 1);
    if (!meta || !names || !index || (st = flat_arrays_new(&a)) != RV_OK) {
        st = st != RV_OK ? st : rv_fail(RV_ERR_NOMEM, "labels: out of memory");
        goto end;
    }
    for (size_t i = 0; i < cells; i++)
        index[i] = l->index[i];
    for (int c = 0; c < l->classes; c++)
        json_array_append_new(names, json_string(l->labels[c]));
    json_object_set_new(meta, "labels", names);
    names = NULL;
    json_object_set_new(meta, "multi_label", json_boolean(l->multi_label));
    json_object_set_new(meta, "level",
                        json_string(l->level == RV_LABELS_BLOCK ? "block" : "recording"));
    if ((st = flat_arrays_adopt(a, "index", "i64", 2, rk, index)) != RV_OK)
        goto end;
    index = NULL;
    if ((st = flat_arrays_add(a, "prob", "f32", 2, rk, l->prob, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "start", "f64", 1, r1, l->start, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "end", "f64", 1, r1, l->end, NULL)) != RV_OK)
        goto end;
    st = flat_arrays_meta(a, meta);
    meta = NULL;
    if (st == RV_OK) {
        *out = a;
        a = NULL;
    }
end:
    json_decref(meta);
    json_decref(names);
    free(index);
    rv_arrays_free(&a);
    rv_embed_labels_free(&l);
    return st;
}
