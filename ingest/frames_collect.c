/* frames_collect.c: what `ringvit frames` writes and rv_flat_reader hands out
 * (rv_ingest.h, "frames"): the recording opened as both open it (probe,
 * timeline, the grid's start on the container's clock), and the chunks gathered
 * into the four tensors, in memory or in scratch files beside the output. The
 * chunks' times are already on the container's clock; nothing is added here. */
#include <stdlib.h>
#include <string.h>

#include "collect_column.h"
#include "rv_ingest.h"

rv_status rv_frames_plan_make(const char *path, const rv_ingest_opts *io, double start_at,
                              rv_frames_plan *out)
{
    rv_status st;
    memset(out, 0, sizeof *out);
    out->io = *io;
    if ((st = rv_probe_file(path, &out->probe)) != RV_OK ||
        (st = rv_ingest_timeline(path, &out->io, &out->tl)) != RV_OK)
        goto end;
    out->io.start_s = rv_timeline_start(&out->tl, start_at);
    out->start_time = out->tl.t0 + out->io.start_s;
    st = rv_ingest_opts_check(&out->io);
end:
    if (st != RV_OK)
        rv_frames_plan_release(out);
    return st;
}

void rv_frames_plan_release(rv_frames_plan *p)
{
    if (p)
        rv_probe_free(&p->probe);
}

struct rv_frames_collector {
    int size;                          /* S */
    int64_t nframes, nsamples;
    collect_column col[RV_FRAMES_ARRAYS];
};

void rv_frames_collector_free(rv_frames_collector **pc)
{
    rv_frames_collector *c = pc ? *pc : NULL;
    if (!c)
        return;
    for (int i = 0; i < RV_FRAMES_ARRAYS; i++)
        collect_column_close(&c->col[i]);
    free(c);
    *pc = NULL;
}

rv_status rv_frames_collector_new(int size, rv_collect_keep keep, const char *beside,
                                  rv_frames_collector **out)
{
    rv_status st = RV_OK;
    *out = NULL;
    if (keep != RV_KEEP_MEMORY && keep != RV_KEEP_SCRATCH)
        return rv_fail(RV_ERR_INVALID, "frames: the frames are kept in memory or in scratch "
                       "files");
    rv_frames_collector *c = calloc(1, sizeof *c);
    if (!c)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    c->size = size;
    for (int i = 0; i < RV_FRAMES_ARRAYS; i++)
        c->col[i].fd = -1; /* closable before it is opened */
    for (int i = 0; i < RV_FRAMES_ARRAYS && st == RV_OK; i++)
        st = collect_column_open(&c->col[i], keep, beside);
    if (st != RV_OK)
        rv_frames_collector_free(&c);
    *out = c;
    return st;
}

rv_status rv_frames_collect(const rv_ingest_chunk *ch, void *collector)
{
    rv_frames_collector *c = collector;
    const size_t n = ch->nframes > 0 ? (size_t)ch->nframes : 0;
    const size_t ns = ch->nsamples > 0 && ch->audio ? (size_t)ch->nsamples : 0;
    rv_status st;
    if (n > 0 && ch->size != c->size)
        return rv_fail(RV_ERR_INVALID, "frames: a chunk of %d px frames, collecting %d px",
                       ch->size, c->size);
    if ((st = collect_column_put(&c->col[RV_FRAMES_TIME], ch->frame_time, sizeof(double) * n)) ||
        (st = collect_column_put(&c->col[RV_FRAMES_SOURCE_TIME], ch->source_time,
                                 sizeof(double) * n)) ||
        (st = collect_column_put(&c->col[RV_FRAMES_AUDIO], ch->audio, sizeof(float) * ns)) ||
        (st = collect_column_put(&c->col[RV_FRAMES_PICTURES], ch->frames,
                                 (size_t)c->size * c->size * 3 * n)))
        return st;
    c->nframes += (int64_t)n;
    c->nsamples += (int64_t)ns;
    return RV_OK;
}

rv_status rv_frames_arrays(rv_frames_collector *c, rv_collected out[RV_FRAMES_ARRAYS])
{
    rv_status st = RV_OK;
    for (int i = 0; i < RV_FRAMES_ARRAYS && st == RV_OK; i++)
        st = collect_column_seal(&c->col[i]);
    if (st != RV_OK)
        return st;
    const int64_t N = c->nframes, S = c->size;
    out[RV_FRAMES_TIME] = (rv_collected){.name = "frame_time", .dtype = "f64", .ndim = 1,
                                         .shape = {N}};
    out[RV_FRAMES_SOURCE_TIME] = (rv_collected){.name = "frame_source_time", .dtype = "f64",
                                                .ndim = 1, .shape = {N}};
    out[RV_FRAMES_AUDIO] = (rv_collected){.name = "audio", .dtype = "f32", .ndim = 1,
                                          .shape = {c->nsamples}};
    out[RV_FRAMES_PICTURES] = (rv_collected){.name = "frames", .dtype = "u8", .ndim = 4,
                                             .shape = {N, S, S, 3}};
    for (int i = 0; i < RV_FRAMES_ARRAYS; i++)
        out[i].data = collect_column_data(&c->col[i]);
    return RV_OK;
}

void *rv_frames_take(rv_frames_collector *c, int i)
{
    return i >= 0 && i < RV_FRAMES_ARRAYS ? collect_column_take(&c->col[i]) : NULL;
}
