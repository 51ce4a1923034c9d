/* finetune_tokens.c: one recording's tokens on one rank of `ringvit finetune`,
 * as `ringvit embed` makes them, through the library's recipe (rv_tok_slice.h):
 * the sequence is planned from the file's headers from the recording's start (a
 * file that states no duration is counted with a whole pass first), split over
 * the cp group by a shard plan (zigzag with --causal over full attention, else
 * contiguous), and only this rank's slice is decoded and tokenized. Every rank
 * of the group finds the same plan from the same file without communicating.
 * The loop keeps the slices in a per-rank cache so later epochs do not decode
 * again. */
#include <math.h>
#include <stdlib.h>

#include "finetune.h"

/* Whom the passes tell that this rank works. */
typedef struct beating {
    void (*beat)(void *);
    void *arg;
} beating;

static rv_status on_chunk(void *user)
{
    beating *b = user;
    if (b->beat)
        b->beat(b->arg);
    return RV_OK;
}

static rv_status on_batch(const rv_tok_batch *batch, int64_t offset, void *user)
{
    (void)batch, (void)offset;
    return on_chunk(user);
}

rv_status ft_slice_load(const char *path, const rv_tok_opts *to, const rv_ingest_opts *io,
                        int zigzag, int ranks, int rank, void (*beat)(void *), void *beat_arg,
                        ft_slice **out)
{
    ft_slice *s = calloc(1, sizeof *s);
    beating b = {.beat = beat, .arg = beat_arg};
    rv_tok_recording rec;
    rv_status st = RV_OK;
    *out = NULL;
    if (!s)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
    if ((st = rv_tok_recording_plan(path, to, io, NAN, &rec, NULL)) != RV_OK)
        goto end;
    if (rec.need_count &&
        (st = rv_tok_recording_count(path, to, &rec, on_chunk, &b, NULL, NULL, NULL)) != RV_OK)
        goto end;
    s->L = rec.layout;
    s->end_s = rec.end_s;
    if (s->L.nvideo + s->L.naudio == 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: nothing to train on: no video or audio tokens (%lld "
                     "frames, %lld audio samples at these settings)", path,
                     (long long)s->L.nframes, (long long)s->L.nsamples);
        goto end;
    }
    if ((st = rv_tok_slice_plan(&s->L, zigzag ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, ranks,
                                rank, 1, &s->t)) != RV_OK ||
        (st = rv_tok_slice_fill(path, &s->L, &s->t, on_batch, &b, NULL)) != RV_OK)
        goto end;
end:
    if (st != RV_OK)
        ft_slice_free(&s);
    *out = s;
    return st;
}

size_t ft_slice_bytes(const ft_slice *s)
{
    return sizeof *s + rv_tok_slice_bytes(&s->t, &s->L);
}

void ft_slice_free(ft_slice **p)
{
    if (!p || !*p)
        return;
    rv_tok_slice_release(&(*p)->t);
    free(*p);
    *p = NULL;
}
