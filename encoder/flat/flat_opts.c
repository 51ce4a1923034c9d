/* flat_opts.c: the options of the flat calls, a JSON object whose every key is
 * checked (an unknown key or a value of the wrong type fails naming the key),
 * and the ingest keys every media call shares, with the meaning and defaults of
 * the command's flags of the same names (ingest_cli.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flat_internal.h"

rv_status flat_opts_parse(const char *text, const char *const *allowed, json_t **out)
{
    *out = NULL;
    if (!text || !text[0])
        text = "{}";
    json_error_t err;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!o)
        return rv_fail(RV_ERR_INVALID, "options: not JSON: %s (line %d)", err.text, err.line);
    if (!json_is_object(o)) {
        json_decref(o);
        return rv_fail(RV_ERR_INVALID, "options: a JSON object is wanted");
    }
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = strcmp(allowed[i], key) == 0;
        if (!ok) {
            rv_status st = rv_fail(RV_ERR_INVALID, "options: unknown key \"%s\"", key);
            json_decref(o);
            return st;
        }
    }
    *out = o;
    return RV_OK;
}

static const json_t *get(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

rv_status flat_opt_bool(const json_t *o, const char *key, int *v)
{
    const json_t *x = get(o, key);
    if (!x)
        return RV_OK;
    if (!json_is_boolean(x))
        return rv_fail(RV_ERR_INVALID, "option \"%s\" wants true or false", key);
    *v = json_is_true(x);
    return RV_OK;
}

rv_status flat_opt_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *v)
{
    const json_t *x = get(o, key);
    if (!x)
        return RV_OK;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
        return rv_fail(RV_ERR_INVALID, "option \"%s\" wants an integer from %lld to %lld", key,
                       (long long)lo, (long long)hi);
    *v = json_integer_value(x);
    return RV_OK;
}

rv_status flat_opt_num(const json_t *o, const char *key, double lo, double hi, double *v)
{
    const json_t *x = get(o, key);
    if (!x)
        return RV_OK;
    double d = json_is_number(x) ? json_number_value(x) : NAN;
    if (!(d >= lo && d <= hi))
        return rv_fail(RV_ERR_INVALID, "option \"%s\" wants a number from %g to %g", key, lo, hi);
    *v = d;
    return RV_OK;
}

rv_status flat_opt_str(const json_t *o, const char *key, const char **v)
{
    const json_t *x = get(o, key);
    if (!x)
        return RV_OK;
    if (!json_is_string(x))
        return rv_fail(RV_ERR_INVALID, "option \"%s\" wants text", key);
    *v = json_string_value(x);
    return RV_OK;
}

/* x as the command line would spell it: text as it is, an integer as digits, a
 * decimal (when decimals allows: finite, in (0, 1e6]) as its shortest text of at
 * most 6 decimals (as the command reads --fps 29.97). 0, or -1 for another type. */
static int as_flag_text(const json_t *x, int decimals, char *text, size_t cap)
{
    if (json_is_string(x)) {
        snprintf(text, cap, "%s", json_string_value(x));
    } else if (json_is_integer(x)) {
        snprintf(text, cap, "%lld", (long long)json_integer_value(x));
    } else if (decimals && json_is_real(x) && isfinite(json_real_value(x)) &&
               json_real_value(x) > 0 && json_real_value(x) <= 1e6) {
        snprintf(text, cap, "%.6f", json_real_value(x));
        char *e = text + strlen(text) - 1;
        while (*e == '0')
            *e-- = '\0';
        if (*e == '.')
            *e = '\0';
    } else {
        return -1;
    }
    return 0;
}

/* "fps": an integer, a decimal number or text "N/D". */
static rv_status opt_fps(const json_t *o, rv_ingest_opts *io)
{
    const json_t *x = get(o, "fps");
    char text[64];
    if (!x)
        return RV_OK;
    if (as_flag_text(x, 1, text, sizeof text) != 0)
        return rv_fail(RV_ERR_INVALID, "option \"fps\" wants a number or text like \"30000/1001\"");
    if (rv_ingest_parse_fps(text, &io->fps_num, &io->fps_den) != RV_OK)
        return rv_fail(RV_ERR_INVALID, "option \"fps\": %s", rv_last_error());
    return RV_OK;
}

/* "max_corrupt": a count, or text "P%". */
static rv_status opt_max_corrupt(const json_t *o, rv_ingest_opts *io)
{
    const json_t *x = get(o, "max_corrupt");
    char text[64];
    if (!x)
        return RV_OK;
    if (as_flag_text(x, 0, text, sizeof text) != 0)
        return rv_fail(RV_ERR_INVALID, "option \"max_corrupt\" wants a count or text like \"0.5%%\"");
    if (rv_ingest_parse_max_corrupt(text, io) != RV_OK)
        return rv_fail(RV_ERR_INVALID, "option \"max_corrupt\": %s", rv_last_error());
    return RV_OK;
}

rv_status flat_opts_ingest(const json_t *o, rv_ingest_opts *io, double *start_at, int *size_set)
{
    rv_status st;
    int64_t size = io->size, threads = io->threads, vs = -1, as = -1;
    int video = 1, audio = 1, pad = io->pad, decode_all = io->decode_all;
    double start = NAN, duration = io->duration_s;
    if ((st = opt_fps(o, io)) != RV_OK || (st = opt_max_corrupt(o, io)) != RV_OK ||
        (st = flat_opt_int(o, "size", 8, 4096, &size)) != RV_OK ||
        (st = flat_opt_num(o, "start", 0, 1e8, &start)) != RV_OK ||
        (st = flat_opt_num(o, "duration", 1e-6, 1e8, &duration)) != RV_OK ||
        (st = flat_opt_bool(o, "pad", &pad)) != RV_OK ||
        (st = flat_opt_bool(o, "video", &video)) != RV_OK ||
        (st = flat_opt_bool(o, "audio", &audio)) != RV_OK ||
        (st = flat_opt_bool(o, "decode_all", &decode_all)) != RV_OK ||
        (st = flat_opt_int(o, "video_stream", 0, 65535, &vs)) != RV_OK ||
        (st = flat_opt_int(o, "audio_stream", 0, 65535, &as)) != RV_OK ||
        (st = flat_opt_int(o, "threads", 0, RV_INGEST_MAX_THREADS, &threads)) != RV_OK)
        return st;
    if (!video && vs >= 0)
        return rv_fail(RV_ERR_INVALID, "options \"video\": false and \"video_stream\" contradict "
                       "each other");
    if (!audio && as >= 0)
        return rv_fail(RV_ERR_INVALID, "options \"audio\": false and \"audio_stream\" contradict "
                       "each other");
    if (!video && !audio)
        return rv_fail(RV_ERR_INVALID, "options \"video\" and \"audio\" both false leave nothing "
                       "to read");
    if (size_set)
        *size_set = get(o, "size") != NULL;
    io->size = (int)size;
    io->threads = (int)threads;
    io->pad = pad;
    io->decode_all = decode_all;
    io->duration_s = duration;
    io->video_stream = video ? (int)vs : -2;
    io->audio_stream = audio ? (int)as : -2;
    io->start_s = 0;
    *start_at = start;
    return RV_OK;
}
