/* tok_collect.c: a recording's whole token sequence gathered into the tensors
 * of rv_tok_collect.h, batch by batch, each kept as rv_collect_keep says (the
 * byte runs of ingest's collect_column.h). The batches' times are already on
 * the container's clock; nothing is added here. */
#include <stdlib.h>
#include <string.h>

#include "collect_column.h"
#include "rv_tok_collect.h"

struct rv_tok_collected {
    collect_column col[RV_TOK_ARRAYS];
    int64_t video_dim, audio_dim;
    int64_t tokens, video, audio, fbank; /* counted */
    rv_tok_layout L;                     /* the sequence, once complete */
    const rv_tok_collect_opts *o;
};

void rv_tok_collected_free(rv_tok_collected **pc)
{
    rv_tok_collected *c = pc ? *pc : NULL;
    if (!c)
        return;
    for (int i = 0; i < RV_TOK_ARRAYS; i++)
        collect_column_close(&c->col[i]);
    free(c);
    *pc = NULL;
}

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    rv_tok_collected *c = user;
    collect_column *col = c->col;
    const size_t n = (size_t)b->count;
    rv_status st = c->o->check ? c->o->check(b, c->o->user) : RV_OK;
    if (st != RV_OK ||
        (st = collect_column_put(&col[RV_TOK_VIDEO_PATCHES], b->video,
                                 sizeof(float) * (size_t)(b->nvideo * c->video_dim))) ||
        (st = collect_column_put(&col[RV_TOK_AUDIO_PATCHES], b->audio,
                                 sizeof(float) * (size_t)(b->naudio * c->audio_dim))) ||
        (st = collect_column_put(&col[RV_TOK_AUDIO_FBANK], b->fbank,
                                 sizeof(float) * (size_t)b->nfbank * RV_FBANK_BINS)) ||
        (st = collect_column_put(&col[RV_TOK_MODALITY], b->modality, n)) ||
        (st = collect_column_put(&col[RV_TOK_POS], b->pos, sizeof(int64_t) * 3 * n)) ||
        (st = collect_column_put(&col[RV_TOK_TIME], b->time, sizeof(double) * 2 * n)) ||
        (st = collect_column_put(&col[RV_TOK_WINDOW], b->window, sizeof(int64_t) * n)))
        return st;
    c->tokens += b->count;
    c->video += b->nvideo;
    c->audio += b->naudio;
    c->fbank += b->nfbank;
    return RV_OK;
}

rv_status rv_tok_collect(const char *path, const rv_tok_recording *rec, const rv_tok_opts *to,
                         const rv_tok_collect_opts *o, rv_tok_collected **out,
                         rv_tok_stats *stats)
{
    rv_tok_stats local;
    rv_tok_layout shape;
    rv_status st = RV_OK;
    *out = NULL;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    rv_tok_collected *c = calloc(1, sizeof *c);
    if (!c)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    c->o = o;
    for (int i = 0; i < RV_TOK_ARRAYS; i++)
        c->col[i].fd = -1; /* closable before it is opened */
    for (int i = 0; i < RV_TOK_ARRAYS && st == RV_OK; i++)
        st = collect_column_open(&c->col[i], o->keep, o->beside);
    if (st != RV_OK || (st = rv_tok_layout_make(to, &rec->io, 0, 0, &shape)) != RV_OK)
        goto end;
    c->video_dim = shape.video_dim;
    c->audio_dim = shape.audio_dim;
    if (rec->need_count)
        st = rv_tokenize_file(path, &rec->io, to, on_batch, c, stats);
    else
        st = rv_tokenize_range(path, &rec->layout, 0, rec->layout.seq, on_batch, c, stats);
    if (st != RV_OK)
        goto end;
    c->L = stats->layout;
    const rv_tok_layout *L = &c->L;
    if (c->tokens != L->seq || c->video != L->nvideo || c->audio != L->naudio ||
        c->fbank != L->fbank_frames) {
        st = rv_fail(RV_ERR_INTERNAL, "%s: %lld tokens collected, the layout has %lld", path,
                     (long long)c->tokens, (long long)L->seq);
        goto end;
    }
    for (int i = 0; i < RV_TOK_ARRAYS && st == RV_OK; i++)
        st = collect_column_seal(&c->col[i]);
end:
    c->o = NULL; /* the options are the caller's, for this call only */
    if (st != RV_OK)
        rv_tok_collected_free(&c);
    *out = c;
    return st;
}

void rv_tok_collected_arrays(const rv_tok_collected *c, rv_collected out[RV_TOK_ARRAYS])
{
    const rv_tok_layout *L = &c->L;
    out[RV_TOK_VIDEO_PATCHES] = (rv_collected){.name = "video_patches", .dtype = "f32",
                                               .ndim = 2, .shape = {L->nvideo, L->video_dim}};
    out[RV_TOK_AUDIO_PATCHES] = (rv_collected){.name = "audio_patches", .dtype = "f32",
                                               .ndim = 2, .shape = {L->naudio, L->audio_dim}};
    out[RV_TOK_AUDIO_FBANK] = (rv_collected){.name = "audio_fbank", .dtype = "f32", .ndim = 2,
                                             .shape = {L->fbank_frames, RV_FBANK_BINS}};
    out[RV_TOK_MODALITY] = (rv_collected){.name = "token_modality", .dtype = "u8", .ndim = 1,
                                          .shape = {L->seq}};
    out[RV_TOK_POS] = (rv_collected){.name = "token_pos", .dtype = "i64", .ndim = 2,
                                     .shape = {L->seq, 3}};
    out[RV_TOK_TIME] = (rv_collected){.name = "token_time", .dtype = "f64", .ndim = 2,
                                      .shape = {L->seq, 2}};
    out[RV_TOK_WINDOW] = (rv_collected){.name = "token_window", .dtype = "i64", .ndim = 1,
                                        .shape = {L->seq}};
    for (int i = 0; i < RV_TOK_ARRAYS; i++)
        out[i].data = collect_column_data(&c->col[i]);
}

void *rv_tok_collected_take(rv_tok_collected *c, int i)
{
    return i >= 0 && i < RV_TOK_ARRAYS ? collect_column_take(&c->col[i]) : NULL;
}
