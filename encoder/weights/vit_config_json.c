/* vit_config_json.c: rv_vit_config <-> the JSON text stored as the
 * "ringvit.config" metadata of a weights file (rv_vit.h).
 *
 * The JSON is one flat object, keys in a fixed order, so the same config always
 * gives the same text (rv_vit_hash hashes it). The size keys come first, as
 * they always have; the family keys follow and are written only where they
 * differ from ringvit's defaults (rv_vit_family_defaults), so a config of
 * ringvit's own model reads exactly as before families existed and a key that
 * is missing takes its default. Floats are written as the shortest decimal that
 * reads back as the same float ("1e-06", not "9.9999999747524271e-07"), so files
 * stay readable and round trips exact; enums by name; flags as booleans;
 * qkv_bias as the letters present ("qkv", "qv", "none"). */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit.h"

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

static json_t *float3(const float v[3])
{
    json_t *a = json_array();
    for (int k = 0; a && k < 3; k++)
        if (json_array_append_new(a, json_real(shortest_float(v[k]))) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static void bias_letters(int bits, char out[4])
{
    int n = 0;
    if (bits & RV_VIT_BIAS_Q)
        out[n++] = 'q';
    if (bits & RV_VIT_BIAS_K)
        out[n++] = 'k';
    if (bits & RV_VIT_BIAS_V)
        out[n++] = 'v';
    out[n] = '\0';
}

/* Adds the family keys that differ from the defaults d; returns nonzero when a
 * set failed. */
static int set_family(json_t *o, const rv_vit_config *c, const rv_vit_config *d)
{
    int bad = 0;
#define DIFF(f) (c->f != d->f)
    if (DIFF(family))
        bad |= json_object_set_new(o, "family", json_string(rv_vit_family_name(c->family)));
    if (DIFF(act))
        bad |= json_object_set_new(o, "act", json_string(rv_vit_act_name(c->act)));
    if (DIFF(qkv_bias)) {
        char l[4];
        bias_letters(c->qkv_bias, l);
        bad |= json_object_set_new(o, "qkv_bias", json_string(l[0] ? l : "none"));
    }
    if (DIFF(patch_bias))
        bad |= json_object_set_new(o, "patch_bias", json_boolean(c->patch_bias));
    if (DIFF(layer_scale))
        bad |= json_object_set_new(o, "layer_scale", json_boolean(c->layer_scale));
    if (DIFF(pre_norm))
        bad |= json_object_set_new(o, "pre_norm", json_boolean(c->pre_norm));
    if (DIFF(final_norm))
        bad |= json_object_set_new(o, "final_norm", json_boolean(c->final_norm));
    if (DIFF(pool))
        bad |= json_object_set_new(o, "pool", json_string(rv_vit_pool_name(c->pool)));
    if (DIFF(pool_eps))
        bad |= json_object_set_new(o, "pool_eps", json_real(shortest_float(c->pool_eps)));
    if (DIFF(pos))
        bad |= json_object_set_new(o, "pos", json_string(rv_vit_pos_name(c->pos)));
    if (DIFF(audio_pos))
        bad |= json_object_set_new(o, "audio_pos",
                                   json_string(rv_vit_audio_pos_name(c->audio_pos)));
    if (DIFF(time_code))
        bad |= json_object_set_new(o, "time_code", json_boolean(c->time_code));
    if (DIFF(audio_fstride))
        bad |= json_object_set_new(o, "audio_fstride", json_integer(c->audio_fstride));
    if (DIFF(audio_tstride))
        bad |= json_object_set_new(o, "audio_tstride", json_integer(c->audio_tstride));
    if (DIFF(audio_grid_t))
        bad |= json_object_set_new(o, "audio_grid_t", json_integer(c->audio_grid_t));
    if (DIFF(video))
        bad |= json_object_set_new(o, "video", json_boolean(c->video));
    if (DIFF(audio))
        bad |= json_object_set_new(o, "audio", json_boolean(c->audio));
    if (DIFF(proj_dim))
        bad |= json_object_set_new(o, "proj_dim", json_integer(c->proj_dim));
    if (memcmp(c->mean, d->mean, sizeof c->mean) != 0)
        bad |= json_object_set_new(o, "mean", float3(c->mean));
    if (memcmp(c->std, d->std, sizeof c->std) != 0)
        bad |= json_object_set_new(o, "std", float3(c->std));
    if (DIFF(audio_mean))
        bad |= json_object_set_new(o, "audio_mean", json_real(shortest_float(c->audio_mean)));
    if (DIFF(audio_std))
        bad |= json_object_set_new(o, "audio_std", json_real(shortest_float(c->audio_std)));
    if (DIFF(image_size))
        bad |= json_object_set_new(o, "image_size", json_integer(c->image_size));
    if (DIFF(head))
        bad |= json_object_set_new(o, "head", json_string(rv_vit_head_name(c->head)));
    if (DIFF(classes))
        bad |= json_object_set_new(o, "classes", json_integer(c->classes));
    if (DIFF(multi_label))
        bad |= json_object_set_new(o, "multi_label", json_boolean(c->multi_label));
#undef DIFF
    return bad;
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
    rv_vit_config d = *c;
    rv_vit_family_defaults(&d);
    bad |= set_family(o, c, &d);
    if (bad)
        goto end;
    text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                             JSON_REAL_PRECISION(FLT_DECIMAL_DIG));
end:
    json_decref(o);
    return text;
}

/* o[key] as an int; required (missing: RV_ERR_FORMAT) unless opt. */
static rv_status get_int(const json_t *o, const char *key, int opt, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        if (opt)
            return RV_OK;
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: missing \"%s\"", key);
    }
    if (!json_is_integer(v))
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" is not an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < -2147483647 || x > 2147483647)
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" %lld is out of range", key,
                       (long long)x);
    *out = (int)x;
    return RV_OK;
}

static rv_status get_float(const json_t *o, const char *key, float *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return RV_OK;
    if (!json_is_number(v))
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" is not a number", key);
    *out = (float)json_number_value(v);
    return RV_OK;
}

static rv_status get_bool(const json_t *o, const char *key, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return RV_OK;
    if (!json_is_boolean(v))
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" is not true or false", key);
    *out = json_is_true(v);
    return RV_OK;
}

static rv_status get_float3(const json_t *o, const char *key, float out[3])
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return RV_OK;
    if (!json_is_array(v) || json_array_size(v) != 3)
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" is not an array of 3 numbers",
                       key);
    for (int k = 0; k < 3; k++) {
        const json_t *e = json_array_get(v, (size_t)k);
        if (!json_is_number(e))
            return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\"[%d] is not a number", key, k);
        out[k] = (float)json_number_value(e);
    }
    return RV_OK;
}

/* An enum by name: names[0..count) are the values. */
static rv_status get_enum(const json_t *o, const char *key, const char *(*name_of)(int),
                          int count, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return RV_OK;
    if (!json_is_string(v))
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" is not a string", key);
    const char *t = json_string_value(v);
    for (int i = 0; i < count; i++)
        if (strcmp(t, name_of(i)) == 0) {
            *out = i;
            return RV_OK;
        }
    return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"%s\" has the unknown value '%.64s'", key, t);
}

static rv_status get_bias(const json_t *o, int *out)
{
    const json_t *v = json_object_get(o, "qkv_bias");
    if (!v)
        return RV_OK;
    const char *t = json_is_string(v) ? json_string_value(v) : NULL;
    if (!t)
        return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"qkv_bias\" is not a string");
    int bits = 0;
    if (strcmp(t, "none") != 0)
        for (const char *p = t; *p; p++) {
            int b = *p == 'q' ? RV_VIT_BIAS_Q : *p == 'k' ? RV_VIT_BIAS_K
                    : *p == 'v' ? RV_VIT_BIAS_V : 0;
            if (!b || (bits & b))
                return rv_fail(RV_ERR_FORMAT, "vit config JSON: \"qkv_bias\" '%.16s' is not "
                               "made of q, k, v (or \"none\")", t);
            bits |= b;
        }
    *out = bits;
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
    if ((s = get_int(o, "dim", 0, &c.dim)) != RV_OK ||
        (s = get_int(o, "layers", 0, &c.layers)) != RV_OK ||
        (s = get_int(o, "heads", 0, &c.heads)) != RV_OK ||
        (s = get_int(o, "mlp", 0, &c.mlp)) != RV_OK ||
        (s = get_int(o, "tubelet", 0, &c.tubelet)) != RV_OK ||
        (s = get_int(o, "patch", 0, &c.patch)) != RV_OK ||
        (s = get_int(o, "grid", 0, &c.grid)) != RV_OK ||
        (s = get_int(o, "audio_freq", 0, &c.audio_freq)) != RV_OK ||
        (s = get_int(o, "audio_time", 0, &c.audio_time)) != RV_OK ||
        (s = get_int(o, "cls", 0, &c.cls)) != RV_OK)
        goto end;
    /* eps is optional (default 1e-6, torchvision's). */
    c.eps = 1e-6f;
    if ((s = get_float(o, "eps", &c.eps)) != RV_OK)
        goto end;
    rv_vit_family_defaults(&c); /* then what the text says over them */
    if ((s = get_enum(o, "family", rv_vit_family_name, RV_FAMILY_DINOV2 + 1, &c.family)) != RV_OK ||
        (s = get_enum(o, "act", rv_vit_act_name, RV_ACT_QUICK_GELU + 1, &c.act)) != RV_OK ||
        (s = get_bias(o, &c.qkv_bias)) != RV_OK ||
        (s = get_bool(o, "patch_bias", &c.patch_bias)) != RV_OK ||
        (s = get_bool(o, "layer_scale", &c.layer_scale)) != RV_OK ||
        (s = get_bool(o, "pre_norm", &c.pre_norm)) != RV_OK ||
        (s = get_bool(o, "final_norm", &c.final_norm)) != RV_OK ||
        (s = get_enum(o, "pool", rv_vit_pool_name, RV_POOL_MEAN + 1, &c.pool)) != RV_OK ||
        (s = get_float(o, "pool_eps", &c.pool_eps)) != RV_OK ||
        (s = get_enum(o, "pos", rv_vit_pos_name, RV_POS_SINUSOID + 1, &c.pos)) != RV_OK ||
        (s = get_enum(o, "audio_pos", rv_vit_audio_pos_name, RV_APOS_GRID + 1,
                      &c.audio_pos)) != RV_OK ||
        (s = get_bool(o, "time_code", &c.time_code)) != RV_OK ||
        (s = get_int(o, "audio_fstride", 1, &c.audio_fstride)) != RV_OK ||
        (s = get_int(o, "audio_tstride", 1, &c.audio_tstride)) != RV_OK ||
        (s = get_int(o, "audio_grid_t", 1, &c.audio_grid_t)) != RV_OK ||
        (s = get_bool(o, "video", &c.video)) != RV_OK ||
        (s = get_bool(o, "audio", &c.audio)) != RV_OK ||
        (s = get_int(o, "proj_dim", 1, &c.proj_dim)) != RV_OK ||
        (s = get_float3(o, "mean", c.mean)) != RV_OK ||
        (s = get_float3(o, "std", c.std)) != RV_OK ||
        (s = get_float(o, "audio_mean", &c.audio_mean)) != RV_OK ||
        (s = get_float(o, "audio_std", &c.audio_std)) != RV_OK ||
        (s = get_int(o, "image_size", 1, &c.image_size)) != RV_OK ||
        (s = get_enum(o, "head", rv_vit_head_name, RV_HEAD_MEAN + 1, &c.head)) != RV_OK ||
        (s = get_int(o, "classes", 1, &c.classes)) != RV_OK ||
        (s = get_bool(o, "multi_label", &c.multi_label)) != RV_OK)
        goto end;
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
