/* vit_config.c: the encoder's configuration (rv_vit.h): the named presets, the
 * check of sizes and their relations, and the JSON text stored as the
 * "ringvit.config" metadata of a weights file.
 *
 * The JSON is one flat object, keys in a fixed order, so the same config always
 * gives the same text (rv_vit_hash hashes it). eps is written as the shortest
 * decimal that reads back as the same float ("1e-06", not
 * "9.9999999747524271e-07"), so files stay readable and round trips exact. */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit.h"

/* Upper bounds: far above any real model, low enough that every size product in
 * vit_model.c fits an int64 without overflow checks at each step. */
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_MLP (1 << 20)
#define MAX_TUBELET 64
#define MAX_PATCH 1024
#define MAX_GRID 1024
#define MAX_AUDIO_TIME 4096

rv_status rv_vit_preset(const char *name, rv_vit_config *out)
{
    static const struct {
        const char *name;
        int dim, layers, heads;
    } presets[] = {
        {"tiny", 192, 12, 3},
        {"small", 384, 12, 6},
        {"base", 768, 12, 12},
    };
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_vit_preset: out is NULL");
    if (!name)
        return rv_fail(RV_ERR_INVALID, "rv_vit_preset: name is NULL");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0)
            continue;
        rv_vit_config c;
        memset(&c, 0, sizeof c);
        snprintf(c.preset, sizeof c.preset, "%s", presets[i].name);
        c.dim = presets[i].dim;
        c.layers = presets[i].layers;
        c.heads = presets[i].heads;
        c.mlp = 4 * c.dim;
        c.eps = 1e-6f;
        c.tubelet = 2;
        c.patch = 16;
        c.grid = 14;
        c.audio_freq = 16;
        c.audio_time = 16;
        c.cls = 1;
        *out = c;
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "unknown model preset '%.64s' (tiny, small or base)", name);
}

static rv_status check_range(const char *what, int v, int lo, int hi)
{
    if (v < lo || v > hi)
        return rv_fail(RV_ERR_INVALID, "vit config: %s %d is outside [%d, %d]", what, v, lo,
                       hi);
    return RV_OK;
}

rv_status rv_vit_config_check(const rv_vit_config *c)
{
    rv_status s = RV_OK;
    if (!c)
        return rv_fail(RV_ERR_INVALID, "vit config: NULL");
    if (memchr(c->preset, '\0', sizeof c->preset) == NULL)
        return rv_fail(RV_ERR_INVALID, "vit config: preset name is not terminated");
    if ((s = check_range("dim", c->dim, 1, MAX_DIM)) != RV_OK ||
        (s = check_range("layers", c->layers, 1, MAX_LAYERS)) != RV_OK ||
        (s = check_range("heads", c->heads, 1, MAX_DIM)) != RV_OK ||
        (s = check_range("mlp", c->mlp, 1, MAX_MLP)) != RV_OK ||
        (s = check_range("tubelet", c->tubelet, 1, MAX_TUBELET)) != RV_OK ||
        (s = check_range("patch", c->patch, 1, MAX_PATCH)) != RV_OK ||
        (s = check_range("grid", c->grid, 1, MAX_GRID)) != RV_OK ||
        (s = check_range("audio_freq", c->audio_freq, 1, RV_VIT_MEL_BINS)) != RV_OK ||
        (s = check_range("audio_time", c->audio_time, 1, MAX_AUDIO_TIME)) != RV_OK ||
        (s = check_range("cls", c->cls, 0, 1)) != RV_OK)
        return s;
    if (c->dim % c->heads != 0)
        return rv_fail(RV_ERR_INVALID, "vit config: dim %d is not divisible by heads %d",
                       c->dim, c->heads);
    if (RV_VIT_MEL_BINS % c->audio_freq != 0)
        return rv_fail(RV_ERR_INVALID,
                       "vit config: audio_freq %d does not divide the %d mel bins",
                       c->audio_freq, RV_VIT_MEL_BINS);
    if (!isfinite(c->eps) || !(c->eps > 0.0f) || c->eps > 1.0f)
        return rv_fail(RV_ERR_INVALID, "vit config: LayerNorm eps %g is not in (0, 1]",
                       (double)c->eps);
    return RV_OK;
}

/* The shortest decimal (up to FLT_DECIMAL_DIG digits) that reads back as v. */
static double shortest_float(float v)
{
    char buf[48];
    for (int p = 1; p <= FLT_DECIMAL_DIG; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        double d = strtod(buf, NULL);
        if ((float)d == v)
            return d;
    }
    return (double)v;
}

char *rv_vit_config_to_json(const rv_vit_config *c)
{
    char *text = NULL;
    json_t *o = NULL;
    if (!c)
        goto end;
    char preset[sizeof c->preset + 1];
    memcpy(preset, c->preset, sizeof c->preset);
    preset[sizeof c->preset] = '\0';
    o = json_object();
    if (!o)
        goto end;
    /* json_object_set_new steals the value even on failure; any NULL value makes
     * the set fail, which the combined check below catches. */
    int bad = 0;
    bad |= json_object_set_new(o, "preset", json_string(preset));
    bad |= json_object_set_new(o, "dim", json_integer(c->dim));
    bad |= json_object_set_new(o, "layers", json_integer(c->layers));
    bad |= json_object_set_new(o, "heads", json_integer(c->heads));
    bad |= json_object_set_new(o, "mlp", json_integer(c->mlp));
    bad |= json_object_set_new(o, "eps", json_real(shortest_float(c->eps)));
    bad |= json_object_set_new(o, "tubelet", json_integer(c->tubelet));
    bad |= json_object_set_new(o, "patch", json_integer(c->patch));
    bad |= json_object_set_new(o, "grid", json_integer(c->grid));
    bad |= json_object_set_new(o, "audio_freq", json_integer(c->audio_freq));
    bad |= json_object_set_new(o, "audio_time", json_integer(c->audio_time));
    bad |= json_object_set_new(o, "cls", json_integer(c->cls));
    if (bad)
        goto end;
    text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                             JSON_REAL_PRECISION(FLT_DECIMAL_DIG));
end:
    json_decref(o);
    return text;
}

/* o[key] as an int; required. */
static rv_status get_int(const json_t *o, const char *key, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: missing \"%s\"", key);
    if (!json_is_integer(v))
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" is not an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < -2147483647 || x > 2147483647)
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" %lld is out of range", key,
                       (long long)x);
    *out = (int)x;
    return RV_OK;
}

rv_status rv_vit_config_from_json(const char *text, rv_vit_config *out)
{
    rv_status s = RV_OK;
    json_t *o = NULL;
    json_error_t err;
    rv_vit_config c;
    memset(&c, 0, sizeof c);
    if (!text || !out) {
        s = rv_fail(RV_ERR_INVALID, "rv_vit_config_from_json: NULL argument");
        goto end;
    }
    o = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!o) {
        s = rv_fail(RV_ERR_FORMAT, "vit config JSON: %.200s (line %d, column %d)", err.text,
                    err.line, err.column);
        goto end;
    }
    if (!json_is_object(o)) {
        s = rv_fail(RV_ERR_FORMAT, "vit config JSON: not an object");
        goto end;
    }
    /* preset is optional (a hand-written config is "custom"). */
    const json_t *p = json_object_get(o, "preset");
    if (p && !json_is_string(p)) {
        s = rv_fail(RV_ERR_FORMAT, "vit config JSON: \"preset\" is not a string");
        goto end;
    }
    const char *pname = p ? json_string_value(p) : "custom";
    if (strlen(pname) >= sizeof c.preset) {
        s = rv_fail(RV_ERR_FORMAT, "vit config JSON: preset name '%.32s' is longer than %d",
                    pname, (int)sizeof c.preset - 1);
        goto end;
    }
    snprintf(c.preset, sizeof c.preset, "%s", pname);
    if ((s = get_int(o, "dim", &c.dim)) != RV_OK ||
        (s = get_int(o, "layers", &c.layers)) != RV_OK ||
        (s = get_int(o, "heads", &c.heads)) != RV_OK ||
        (s = get_int(o, "mlp", &c.mlp)) != RV_OK ||
        (s = get_int(o, "tubelet", &c.tubelet)) != RV_OK ||
        (s = get_int(o, "patch", &c.patch)) != RV_OK ||
        (s = get_int(o, "grid", &c.grid)) != RV_OK ||
        (s = get_int(o, "audio_freq", &c.audio_freq)) != RV_OK ||
        (s = get_int(o, "audio_time", &c.audio_time)) != RV_OK ||
        (s = get_int(o, "cls", &c.cls)) != RV_OK)
        goto end;
    /* eps is optional (default 1e-6, torchvision's). */
    const json_t *e = json_object_get(o, "eps");
    c.eps = 1e-6f;
    if (e) {
        if (!json_is_number(e)) {
            s = rv_fail(RV_ERR_FORMAT, "vit config JSON: \"eps\" is not a number");
            goto end;
        }
        c.eps = (float)json_number_value(e);
    }
    if ((s = rv_vit_config_check(&c)) != RV_OK) {
        char msg[512]; /* the message is rewritten below: copy it out first */
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        s = rv_fail(RV_ERR_FORMAT, "%s", msg);
        goto end;
    }
    *out = c;
end:
    json_decref(o);
    return s;
}
