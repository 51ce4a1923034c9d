/* embed_patches.c: an input whose token sequence is already in memory (the
 * patches rv_flat_tokens made, passed back by a caller): each rank copies its
 * tokens' descriptions and patches out of the whole sequence and embeds them in
 * the batches the tokenizer would have handed a fill from the file (one per
 * window, cut at the rank's segment ends, the leading special tokens with the
 * first), so the GEMM shapes, and the sums, are the same to the bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_internal.h"
#include "rv_clock.h"

/* The slice from the arrays: what the tokenizer would have handed out. */
static rv_status fill_from_patches(const embed_patches *p, int rank, rv_tok_slice *s)
{
    const rv_tok_layout *L = &p->layout;
    rv_shard_seg segs[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(&s->plan, rank, segs);
    int64_t at = 0, nv = 0, na = 0;
    rv_status st;
    for (int g = 0; g < n; g++) {
        int64_t vi = rv_tok_video_before(L, segs[g].start), ai = rv_tok_audio_before(L, segs[g].start);
        for (int64_t i = segs[g].start; i < segs[g].start + segs[g].len; i++, at++) {
            rv_token tk;
            if ((st = rv_tok_info(L, i, &tk)) != RV_OK)
                return st;
            s->modality[at] = (uint8_t)tk.modality;
            memcpy(s->pos + 3 * at, tk.pos, sizeof tk.pos);
            memcpy(s->seq_time + 2 * at, tk.seq_time, sizeof tk.seq_time);
            s->window[at] = tk.window;
            if (tk.modality == RV_MOD_VIDEO)
                memcpy(s->video + (size_t)(nv++ * L->video_dim), p->video + (size_t)(vi++ * L->video_dim),
                       sizeof(float) * (size_t)L->video_dim);
            else if (tk.modality == RV_MOD_AUDIO)
                memcpy(s->audio + (size_t)(na++ * L->audio_dim), p->audio + (size_t)(ai++ * L->audio_dim),
                       sizeof(float) * (size_t)L->audio_dim);
        }
    }
    s->got = at;
    s->got_video = nv;
    s->got_audio = na;
    return at == s->len && nv == s->nvideo && na == s->naudio
               ? RV_OK
               : rv_fail(RV_ERR_INTERNAL, "rank %d: %lld tokens filled of %lld", rank,
                         (long long)at, (long long)s->len);
}

/* Embeds the filled slice window by window, as a fill from the file would. */
static rv_status embed_as_batches(const embed_slice *es, const rv_tok_layout *L, int rank,
                                  float *y)
{
    const rv_tok_slice *s = &es->t;
    const int D = es->model->cfg.dim;
    rv_shard_seg segs[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(&s->plan, rank, segs);
    int64_t off = 0, v = 0, au = 0;
    rv_status st = RV_OK;
    for (int g = 0; g < n && st == RV_OK; g++) {
        const int64_t end = segs[g].start + segs[g].len;
        int64_t a = segs[g].start, w = segs[g].len > 0 ? rv_tok_window_of(L, a) : 0;
        while (a < end && st == RV_OK) {
            int64_t b = end;
            while (++w <= L->windows) {
                int64_t ws = rv_tok_window_start(L, w);
                if (ws > a) {
                    b = ws < end ? ws : end;
                    break;
                }
            }
            int64_t nv = 0, na = 0;
            for (int64_t i = off; i < off + (b - a); i++) {
                nv += s->modality[i] == RV_MOD_VIDEO;
                na += s->modality[i] == RV_MOD_AUDIO;
            }
            rv_vit_tokens bt = {.len = b - a, .modality = s->modality + off, .pos = s->pos + 3 * off,
                                .seq_time = s->seq_time + 2 * off, .nvideo = nv,
                                .video = s->video ? s->video + (size_t)v * (size_t)L->video_dim : NULL,
                                .naudio = na,
                                .audio = s->audio ? s->audio + (size_t)au * (size_t)L->audio_dim : NULL,
                                .grid = es->grid, .audio_steps = es->audio_steps,
                                .window = s->window + off, .layout = L};
            st = rv_vit_embed(es->model, es->hb, &bt, y + (size_t)off * D, NULL);
            off += b - a, v += nv, au += na;
            a = b;
        }
    }
    return st;
}

void embed_prepare_patches(rv_embed_job *j, rv_embed_input *in)
{
    const embed_patches *p = in->patches;
    const double t0 = rv_clock_s();
    rv_status st;
    in->t_start = t0;
    in->reached = PREP_DONE;
    in->probe_st = RV_OK;
    rv_clear_error();
    /* The plan is the layout the arrays were made with. */
    in->rec = (rv_tok_recording){.layout = p->layout, .io = p->layout.ingest, .end_s = p->end_s,
                                 .time_origin = p->time_origin, .t0 = p->t0,
                                 .rec_start = p->rec_start};
    /* On the rank's own thread and host backend (never queued to the worker). */
    if ((st = embed_plan_slice(j, in, 1, embed_host_backend(j), NULL)) == RV_OK &&
        (st = fill_from_patches(p, j->rank, &in->s.t)) == RV_OK)
        st = embed_as_batches(&in->s, &p->layout, j->rank, in->s.y);
    if (st == RV_OK && j->h.tokens)
        j->h.tokens(j->h.user, in->s.t.len);
    in->tok_st = st;
    if (st != RV_OK) {
        const char *m = rv_last_error();
        snprintf(in->tok_msg, sizeof in->tok_msg, "%s", m && m[0] ? m : rv_status_name(st));
    }
    in->tok_wall = rv_clock_s() - t0;
}

rv_status embed_queue_patches(rv_embed_job *j, const embed_patches *p, int index,
                              rv_embed_input **out)
{
    rv_embed_input *in = calloc(1, sizeof *in);
    *out = NULL;
    if (!in || !(in->patches = malloc(sizeof *in->patches))) {
        free(in);
        return rv_fail(RV_ERR_NOMEM, "embed: out of memory");
    }
    *in->patches = *p;
    in->patches->probe_json = NULL;
    if (p->probe_json && !(in->patches->probe_json = strdup(p->probe_json))) {
        free(in->patches);
        free(in);
        return rv_fail(RV_ERR_NOMEM, "embed: out of memory");
    }
    in->index = index;
    in->job = j;
    /* Prepared when its turn comes: the copies are quick, and the rank's backend
     * is the one to embed them on (the worker's threads would compete with it). */
    *out = in;
    return RV_OK;
}
