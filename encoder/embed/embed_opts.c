/* embed_opts.c: the job's defaults (one set, for the command, Python and C),
 * the names of the output dtypes, and which modalities a model embeds. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "embed_internal.h"

void rv_embed_opts_default(rv_embed_opts *o)
{
    memset(o, 0, sizeof *o);
    rv_ingest_opts_default(&o->io);
    o->io.size = 0; /* the model's */
    o->start_at = NAN;
    o->device = "cpu";
    o->gpu = -1;
    o->strategy = RV_CP_RING;
    o->span.kind = RV_SPAN_FULL;
    o->dtype = RV_F32;
    o->max_tokens = RV_EMBED_MAX_TOKENS;
    o->prefetch = 1;
    if (rv_comm_default_timeout(&o->timeout_s) != RV_OK)
        o->timeout_s = RV_COMM_DEFAULT_TIMEOUT_S;
}

const char *embed_dtype_name(rv_dtype dtype)
{
    return dtype == RV_F32 ? "f32" : dtype == RV_F16 ? "f16" : dtype == RV_BF16 ? "bf16" : NULL;
}

rv_status rv_embed_dtype_parse(const char *name, rv_dtype *out)
{
    static const rv_dtype all[] = {RV_F32, RV_F16, RV_BF16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, embed_dtype_name(all[i])) == 0) {
            *out = all[i];
            return RV_OK;
        }
    return rv_fail(RV_ERR_INVALID, "dtype wants f32, f16 or bf16, got '%s'", name ? name : "");
}

rv_status rv_embed_modalities(const rv_vit_config *c, const rv_embed_opts *o, int *video,
                              int *audio, char *why, size_t cap)
{
    const char *family = rv_vit_family_name(c->family);
    const int no_video = o->io.video_stream == -2, no_audio = o->io.audio_stream == -2;
    char none[1];
    if (!why)
        why = none, cap = sizeof none;
    why[0] = '\0';
    *video = *audio = 0;
    if (o->want_video && !c->video)
        return rv_fail(RV_ERR_INVALID, "--video: the %s model has no video weights (its video "
                       "tokens would be noise); it embeds audio only", family);
    if (o->want_audio && !c->audio)
        return rv_fail(RV_ERR_INVALID, "--audio: the %s model has no audio weights (its audio "
                       "tokens would be noise); it embeds %s only", family,
                       c->video ? "video" : "nothing");
    *video = c->video && !no_video;
    *audio = c->audio && !no_audio;
    if (!c->audio && !no_audio)
        snprintf(why, cap, "video only: the %s model has no audio weights, so recordings are "
                 "embedded from their pictures and their audio is left out (--no-audio says so "
                 "explicitly)", family);
    else if (!c->video && !no_video)
        snprintf(why, cap, "audio only: the %s model has no video weights, so recordings are "
                 "embedded from their audio and their pictures are left out (--no-video says "
                 "so explicitly)", family);
    if (!*video && !*audio)
        return rv_fail(RV_ERR_INVALID, "%s leaves nothing to embed with the %s model",
                       no_video ? "--no-video" : "--no-audio", family);
    return RV_OK;
}
