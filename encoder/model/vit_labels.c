/* vit_labels.c: the names of a classifier head's classes (rv_vit_model.labels,
 * rv_vit.h). They live beside the weight arena in one allocation: the C
 * pointers, then the NUL-terminated texts they point at, so rv_vit_free frees
 * them with one call. A head made by rv_vit_new is labelled by its ids until
 * rv_vit_set_labels (the loaders call it with config.json's id2label or the
 * file's ringvit.labels). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit.h"
#include "vit_internal.h"

/* 1 when text is valid UTF-8 (jansson refuses a string that is not). */
static int is_utf8(const char *text)
{
    json_t *j = json_string(text);
    json_decref(j);
    return j != NULL;
}

/* One block: n pointers, then the n texts. */
static rv_status labels_block(const char *const *src, int n, char ***out)
{
    size_t bytes = (size_t)n * sizeof(char *);
    for (int i = 0; i < n; i++)
        bytes += strlen(src[i]) + 1;
    char **v = malloc(bytes > 0 ? bytes : 1);
    if (!v)
        return rv_fail(RV_ERR_NOMEM, "vit labels: out of memory for %d labels", n);
    char *at = (char *)(v + n);
    for (int i = 0; i < n; i++) {
        const size_t len = strlen(src[i]) + 1;
        memcpy(at, src[i], len);
        v[i] = at;
        at += len;
    }
    *out = v;
    return RV_OK;
}

rv_status rv_vit_set_labels(rv_vit_model *m, const char *const *labels, int n)
{
    if (!m || !labels)
        return rv_fail(RV_ERR_INVALID, "vit labels: model and labels are required");
    if (m->cfg.head == RV_HEAD_NONE)
        return rv_fail(RV_ERR_INVALID, "vit labels: the model has no classifier head");
    if (n != m->cfg.classes)
        return rv_fail(RV_ERR_INVALID, "vit labels: %d labels for a head of %d classes", n,
                       m->cfg.classes);
    for (int i = 0; i < n; i++) {
        if (!labels[i])
            return rv_fail(RV_ERR_INVALID, "vit labels: label %d is NULL", i);
        if (!is_utf8(labels[i]))
            return rv_fail(RV_ERR_INVALID, "vit labels: label %d is not UTF-8 text", i);
    }
    char **v = NULL;
    rv_status s = labels_block(labels, n, &v);
    if (s != RV_OK)
        return s;
    free(m->labels);
    m->labels = v;
    return RV_OK;
}

rv_status vit_labels_default(rv_vit_model *m)
{
    const int n = m->cfg.classes;
    char *text = malloc((size_t)n * 12 + 1);         /* an int's digits and a NUL each */
    const char **ids = malloc((size_t)n * sizeof *ids + 1);
    rv_status s = RV_OK;
    if (!text || !ids) {
        s = rv_fail(RV_ERR_NOMEM, "vit labels: out of memory for %d labels", n);
        goto end;
    }
    for (int i = 0; i < n; i++) {
        snprintf(text + (size_t)i * 12, 12, "%d", i);
        ids[i] = text + (size_t)i * 12;
    }
    char **v = NULL;
    if ((s = labels_block(ids, n, &v)) == RV_OK) {
        free(m->labels);
        m->labels = v;
    }
end:
    free(text);
    free(ids);
    return s;
}
