/* probe_json.c: the probe as JSON, the one implementation behind `ringvit
 * probe --json`, the "probe" metadata of frames, tokens and embed, and the flat
 * calls; with the path text it needs (bytes that are not UTF-8 as \xNN). Needs
 * no FFmpeg, so a build without media keeps it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest_json.h"
#include "rv_ingest.h"

char *rv_utf8_text(const char *text)
{
    const size_t n = strlen(text);
    char *out = malloc(4 * n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)text[i];
        const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                       : (c & 0xF8) == 0xF0  ? 4
                                                             : 0;
        json_t *one = NULL; /* jansson validates the character (overlong, surrogates) */
        if (len && i + len <= n && (len == 1 || (one = json_stringn(text + i, len)))) {
            memcpy(o, text + i, len);
            o += len;
            i += len;
        } else {
            o += sprintf(o, "\\x%02X", c);
            i++;
        }
        json_decref(one);
    }
    *o = '\0';
    return out;
}

json_t *ingest_json_path(const char *path)
{
    json_t *j = json_string(path);
    if (j || !path)
        return j;
    char *text = rv_utf8_text(path);
    j = text ? json_string(text) : NULL;
    free(text);
    return j;
}

static json_t *num_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static const char *kind_name(rv_stream_kind k)
{
    switch (k) {
    case RV_STREAM_VIDEO: return "video";
    case RV_STREAM_AUDIO: return "audio";
    default: return "other";
    }
}

static json_t *probe_json(const rv_probe *p)
{
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) {
        json_decref(root);
        json_decref(arr);
        return NULL;
    }
    json_object_set_new(root, "path", ingest_json_path(p->path));
    json_object_set_new(root, "format", json_string(p->format));
    json_object_set_new(root, "duration_s", num_or_null(p->duration_s));
    json_object_set_new(root, "start_s", num_or_null(p->start_s));
    json_object_set_new(root, "bit_rate", json_integer(p->bit_rate));
    json_object_set_new(root, "size_bytes", json_integer(p->size_bytes));
    json_object_set_new(root, "video_stream", p->video >= 0 ? json_integer(p->video) : json_null());
    json_object_set_new(root, "audio_stream", p->audio >= 0 ? json_integer(p->audio) : json_null());
    for (int i = 0; i < p->nstreams; i++) {
        const rv_probe_stream *s = &p->streams[i];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(s->index));
        json_object_set_new(o, "type", json_string(kind_name(s->kind)));
        json_object_set_new(o, "codec", json_string(s->codec));
        json_object_set_new(o, "decodable", json_boolean(s->decodable));
        json_object_set_new(o, "default", json_boolean(s->is_default));
        json_object_set_new(o, "start_s", num_or_null(s->start_s));
        json_object_set_new(o, "duration_s", num_or_null(s->duration_s));
        json_object_set_new(o, "nb_frames", s->nb_frames > 0 ? json_integer(s->nb_frames) : json_null());
        json_object_set_new(o, "bit_rate", json_integer(s->bit_rate));
        if (s->kind == RV_STREAM_VIDEO) {
            json_object_set_new(o, "width", json_integer(s->width));
            json_object_set_new(o, "height", json_integer(s->height));
            json_object_set_new(o, "rotation", json_integer(s->rotation));
            json_object_set_new(o, "fps", s->fps > 0 ? json_real(s->fps) : json_null());
            json_object_set_new(o, "pix_fmt", json_string(s->pix_fmt));
        } else if (s->kind == RV_STREAM_AUDIO) {
            json_object_set_new(o, "sample_rate", json_integer(s->sample_rate));
            json_object_set_new(o, "channels", json_integer(s->channels));
            json_object_set_new(o, "channel_layout", json_string(s->channel_layout));
        }
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "streams", arr);
    return root;
}

rv_status rv_probe_json_text(const rv_probe *p, int printed, char **json)
{
    *json = NULL;
    json_t *root = probe_json(p);
    *json = root ? json_dumps(root, printed ? JSON_INDENT(2) | JSON_REAL_PRECISION(9)
                                            : JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))
                 : NULL;
    json_decref(root);
    return *json ? RV_OK : rv_fail(RV_ERR_NOMEM, "out of memory");
}
