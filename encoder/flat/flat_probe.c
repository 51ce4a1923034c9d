/* flat_probe.c: the texts the command prints and the flat calls return, built
 * once here: the probe as JSON (`ringvit probe --json`, and the "probe"
 * metadata of frames, tokens and embed), the version and build facts
 * (`ringvit --version`) and those facts as JSON (rv_flat_build_info). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_cuda.h"
#include "rv_version.h"

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

json_t *flat_json_path(const char *path)
{
    json_t *j = json_string(path);
    if (j || !path)
        return j;
    char *text = rv_utf8_text(path);
    j = text ? json_string(text) : NULL;
    free(text);
    return j;
}

static json_t *probe_json(const rv_probe *p)
{
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) {
        json_decref(root);
        json_decref(arr);
        return NULL;
    }
    json_object_set_new(root, "path", flat_json_path(p->path));
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
                                            : JSON_COMPACT | JSON_REAL_PRECISION(17))
                 : NULL;
    json_decref(root);
    return *json ? RV_OK : rv_fail(RV_ERR_NOMEM, "out of memory");
}

rv_status rv_flat_probe(const char *path, char **json)
{
    rv_probe *p = NULL;
    *json = NULL;
    rv_status st = path ? rv_probe_file(path, &p) : rv_fail(RV_ERR_INVALID, "probe: no path");
    if (st == RV_OK)
        st = rv_probe_json_text(p, 1, json);
    rv_probe_free(&p);
    return st;
}

/* ---- the build ------------------------------------------------------------------ */

rv_status rv_version_text(char **text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    *text = NULL;
    if (!f)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
#ifdef RINGVIT_HAVE_MPI
    const char *mpi = "yes";
#else
    const char *mpi = "no";
#endif
    const char *core = rv_blas_corename();
    fprintf(f, "ringvit %s\n", RINGVIT_VERSION);
#ifdef RINGVIT_HAVE_CUDA
    int ndev = rv_cuda_device_count();
    char name[256] = "";
    if (ndev > 0 && rv_cuda_device_name(0, name, sizeof name) != RV_OK)
        snprintf(name, sizeof name, "%s", rv_last_error());
    fprintf(f, "cuda: backend built (sm_%s), %d device%s%s%s\n", rv_cuda_build_archs(), ndev,
            ndev == 1 ? "" : "s", ndev > 0 ? ": " : "", name);
#else
    fprintf(f, "cuda: no\n");
#endif
    fprintf(f, "mpi: %s\n", mpi);
    /* NCCL is loaded when the first NCCL communicator is made, not at start-up. */
    fprintf(f, "nccl: %s\n", rv_comm_backend_built("nccl") ? "built (libnccl.so.2 loaded on first use)"
                                                          : "no");
#ifdef RINGVIT_HAVE_MEDIA
    fprintf(f, "media: yes (FFmpeg)\n");
#else
    fprintf(f, "media: no (built without FFmpeg)\n");
#endif
    fprintf(f, "blas: OpenBLAS, core %s\n", core && core[0] ? core : "unknown");
    /* The attention kernels: the best this CPU runs, or RINGVIT_CPU_KERNELS. */
    const char *kernels = rv_cpu_kernels();
    if (kernels)
        fprintf(f, "cpu kernels: %s (best on this CPU: %s)\n", kernels, rv_cpu_kernels_best());
    else
        fprintf(f, "cpu kernels: refused: %s\n", rv_last_error());
    fprintf(f, "threads: %d (default)\n", rv_cpu_default_threads());
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    }
    *text = buf;
    return RV_OK;
}

rv_status rv_flat_build_info(char **json)
{
    char *text = NULL;
    json_t *o = json_object();
    *json = NULL;
    rv_status st = o ? rv_version_text(&text) : rv_fail(RV_ERR_NOMEM, "out of memory");
    if (st != RV_OK)
        goto end;
    json_object_set_new(o, "version", json_string(RINGVIT_VERSION));
    json_object_set_new(o, "text", json_string(text));
    /* Every "key: value" line of the text, the key's spaces as underscores. */
    for (char *line = strchr(text, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        char key[64], *colon = strstr(line + 1, ": "), *eol = strchr(line + 1, '\n');
        if (!colon || !eol || colon > eol || colon - (line + 1) >= (long)sizeof key)
            continue;
        snprintf(key, sizeof key, "%.*s", (int)(colon - (line + 1)), line + 1);
        for (char *k = key; *k; k++)
            if (*k == ' ')
                *k = '_';
        json_object_set_new(o, key, json_stringn(colon + 2, (size_t)(eol - colon - 2)));
    }
    if (!(*json = json_dumps(o, JSON_COMPACT)))
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
end:
    free(text);
    json_decref(o);
    return st;
}
