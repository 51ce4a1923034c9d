/* embed_run.c: rv_embed_run, one prepared recording on one group. Every rank:
 *   1. votes on its probe and plan, which must be the same on every rank; a
 *      file that states no duration (a still image) is first counted by rank 0
 *      and the counts shared, then each rank tokenizes its slice in turn;
 *   2. votes on its decoded and tokenized slice;
 *   3. the context-parallel forward, pooling by all-reduce and the family's
 *      pooled head, then a vote on the encode.
 * What each vote carries is a struct of its own (rv_comm_vote.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "embed_internal.h"
#include "rv_clock.h"

/* Stage 1: every rank plans alone, so the ranks must plan alike. */
typedef struct plan_vote {
    int64_t need_count;  /* 1: the file states no duration */
    int64_t seq;         /* the planned tokens (-1 with need_count or a failure) */
} plan_vote;

/* The counts of a need_count recording, from rank 0's pass. */
typedef struct count_vote {
    int64_t frames, samples;
    double end_s;
} count_vote;

/* Stage 2: how long this rank's slice took. */
typedef struct slice_vote {
    double wall_s;       /* decode and tokenize, wall */
    double cpu_s;        /* of which the tokenizer's CPU time */
    double wait_s;       /* the encoder's wait for it */
} slice_vote;

/* Stage 3: the encode on this rank. */
typedef struct encode_vote {
    double seconds, flops;
    double held_bytes;   /* the slice's arrays and the forward's peak */
    double rss_bytes;    /* this process's peak resident set */
} encode_vote;

#define VOTE_OF(j, type, r) ((const type *)rv_vote_payload(&(j)->vote, (r)))

/* Peak resident set of this process, bytes. */
static double peak_rss(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss * 1024.0 : 0.0;
}

/* This rank's outcome of a prepared stage, as its thread-local error for the vote. */
static rv_status stage_status(rv_status st, const char *msg)
{
    if (st != RV_OK)
        rv_fail(st, "%s", msg);
    else
        rv_clear_error();
    return st;
}

static void stage(const rv_embed_job *j, const rv_embed_input *in, const char *name,
                  double total_s, int64_t tokens, double flops)
{
    if (j->rank == 0 && j->h.stage)
        j->h.stage(j->h.user, in->index, in->path ? in->path : "tokens", name, total_s, tokens,
                   flops);
}

/* Beaten per chunk while rank 0 counts: the other ranks wait for the count. */
static rv_status count_beat(void *user)
{
    rv_embed_job *j = user;
    rv_comm_watch_beat(j->watch);
    return embed_stopping(j) ? rv_fail(RV_ERR_IO, "stopped by a signal") : RV_OK;
}

/* Before each layer of the forward, every rank together: a stop asked of any
 * rank stops all of them at the same layer (one rank leaving alone would leave
 * the others waiting for its keys and values). */
static rv_status layer_check(void *arg)
{
    rv_embed_job *j = arg;
    double stop = embed_stopping(j);
    rv_status st = j->size > 1 ? rv_comm_allreduce(j->comm, &stop, &stop, 1, RV_COMM_F64) : RV_OK;
    if (st != RV_OK)
        return st;
    return stop > 0 ? rv_fail(RV_ERR_IO, "stopped by a signal") : RV_OK;
}

/* Stage 1, and the count of a file without a stated duration. */
static rv_vote_outcome agree_plan(rv_embed_job *j, rv_embed_input *in)
{
    const rv_tok_layout *L = &in->rec.layout;
    rv_status st = stage_status(in->probe_st, in->probe_msg);
    plan_vote mine = {.need_count = in->rec.need_count,
                      .seq = st == RV_OK && !in->rec.need_count ? L->seq : -1};
    rv_vote_outcome v = embed_agree(j, st, &mine, sizeof mine);
    if (v != RV_VOTE_OK)
        return v;
    const plan_vote *p0 = VOTE_OF(j, plan_vote, 0);
    for (int r = 1; r < j->size; r++) {
        const plan_vote *p = VOTE_OF(j, plan_vote, r);
        if (p->need_count != p0->need_count || p->seq != p0->seq) {
            rv_fail(RV_ERR_FORMAT, "%s: rank %d planned %lld tokens, rank 0 %lld (did the file "
                    "change while it was read?)", in->path, r, (long long)p->seq,
                    (long long)p0->seq);
            return RV_VOTE_FAILED;
        }
    }
    if (in->reached != PREP_PROBED)
        return RV_VOTE_OK;
    /* No stated duration: rank 0 counts the frames and samples, then every rank
     * tokenizes its slice in turn. */
    stage(j, in, "count", 0, 0, 0);
    count_vote c = {0};
    st = j->rank == 0 ? rv_tok_recording_count(in->path, &j->to, &in->rec, count_beat, j,
                                                &c.frames, &c.samples, &c.end_s)
                      : RV_OK;
    if ((v = embed_agree(j, st, &c, sizeof c)) != RV_VOTE_OK)
        return v;
    const count_vote *c0 = VOTE_OF(j, count_vote, 0);
    rv_clear_error();
    /* The same arithmetic on every rank: all fail alike. */
    if (rv_tok_recording_counted(&j->to, &in->rec, c0->frames, c0->samples, c0->end_s) != RV_OK)
        return RV_VOTE_FAILED;
    stage(j, in, "tokenize", in->rec.end_s, L->seq, 0);
    embed_prepare_tokens(j, in, embed_host_backend(j), j->watch);
    return RV_VOTE_OK;
}

rv_vote_outcome rv_embed_run(rv_embed_job *j, rv_embed_input *in, rv_embed_stats *stats)
{
    const rv_vit_config *cfg = &j->m.model->cfg;
    const int D = cfg->dim;
    rv_embed_stats scratch;
    rv_vit_stats vs;
    rv_vote_outcome v;
    rv_status st;
    double t;
    if (!stats)
        stats = &scratch;
    memset(stats, 0, sizeof *stats);
    if (!in) {
        /* A rank that could not queue the input still takes part in the vote, so
         * the group fails it together. */
        rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for an input", j->rank);
        v = embed_agree(j, RV_ERR_NOMEM, &(plan_vote){.seq = -1}, sizeof(plan_vote));
        return v == RV_VOTE_OK ? RV_VOTE_FAILED : v;
    }
    memset(&vs, 0, sizeof vs);
    rv_tok_layout *L = &in->rec.layout;
    embed_slice *s = &in->s;
    const double t_run = rv_clock_s();
    /* Prepared ahead, or now in turn: probe, then this rank's slice. */
    double wait_s;
    if (in->queued) {
        stage(j, in, atomic_load(&in->finished) ? "probe" : "tokenize", 0, 0, 0);
        wait_s = embed_ahead_wait(j->ahead, in);
    } else {
        stage(j, in, "probe", 0, 0, 0);
        if (in->patches) {
            embed_prepare_patches(j, in);
        } else {
            embed_prepare_probe(j, in);
            if (in->reached == PREP_DONE && in->probe_st == RV_OK) {
                stage(j, in, "tokenize", in->rec.end_s, L->seq, 0);
                embed_prepare_tokens(j, in, embed_host_backend(j), j->watch);
            }
        }
        wait_s = rv_clock_s() - t_run;
    }
    /* 1. probe and plan (and the count of a file that states none) */
    if ((v = agree_plan(j, in)) != RV_VOTE_OK)
        goto end;
    stats->tokens = L->seq;
    stats->video_tokens = L->nvideo;
    stats->audio_tokens = L->naudio;
    stats->recording_s = in->rec.end_s - in->rec.rec_start;
    stats->probe_s = in->probe_s;

    /* 2. this rank's slice, decoded and tokenized */
    t = rv_clock_s();
    st = stage_status(in->tok_st, in->tok_msg);
    slice_vote sv = {.wall_s = in->tok_wall, .cpu_s = in->ts.cpu_s, .wait_s = wait_s};
    if ((v = embed_agree(j, st, &sv, sizeof sv)) != RV_VOTE_OK)
        goto end;
    double slow = 0, slow_cpu = 0, most_wait = 0;
    for (int r = 0; r < j->size; r++) {
        const slice_vote *x = VOTE_OF(j, slice_vote, r);
        if (x->wall_s >= slow)
            slow = x->wall_s, slow_cpu = x->cpu_s;
        most_wait = fmax(most_wait, x->wait_s);
    }
    stats->tokenize_s = slow > 0 ? slow * fmin(1.0, slow_cpu / slow) : 0;
    stats->decode_s = slow - stats->tokenize_s;
    /* The encoder's wait: the slowest rank's wait for its slice plus the vote's. */
    stats->wait_s = most_wait + (rv_clock_s() - t);

    /* 3. encode and pool */
    t = rv_clock_s();
    const double fwd_flops = j->o.span.kind == RV_SPAN_FULL
                                 ? rv_vit_forward_flops(cfg, L->seq, L->nvideo, L->naudio,
                                                        j->o.causal)
                                 : 0;
    stage(j, in, "encode", in->rec.end_s, L->seq, fwd_flops);
    rv_vit_tokens tok = rv_vit_slice_tokens(L, &s->t);
    rv_vit_run run = {.be = j->be, .comm = j->dev ? j->dev : j->comm, .plan = s->t.plan,
                      .strategy = j->o.strategy, .causal = j->o.causal,
                      .weights = j->dev_weights, .span = j->o.span, .host = j->host,
                      .check = layer_check, .check_arg = j};
    rv_vit_pool_opts po = {.segment_s = j->o.segment_s, .end_s = in->rec.end_s,
                           .hop_s = j->o.hop_s, .start_s = in->rec.io.start_s,
                           .t0 = in->rec.t0};
    rv_clear_error();
    st = rv_vit_forward_embedded(j->m.model, &run, &tok, s->y, &vs);
    vs.flops += s->flops;
    if (st == RV_OK)
        st = rv_vit_pool(j->comm, &tok, s->y, D, &po, &in->pooled);
    if (st == RV_OK) /* every rank: the same sums give the same pooled output */
        st = rv_vit_pool_head(j->m.model, &in->pooled);
    /* Blocks are sequences of their own: each one's pooled output, on rank 0. */
    const int blocks = j->o.span.kind == RV_SPAN_BLOCK || j->o.span.kind == RV_SPAN_FRAME;
    if (st == RV_OK && blocks &&
        (st = rv_vit_pool_blocks(j->comm, &tok, s->y, D, L->windows, &in->blocks)) == RV_OK &&
        j->rank == 0)
        st = rv_vit_pool_blocks_head(j->m.model, &in->blocks);
    encode_vote ev = {.seconds = rv_clock_s() - t, .flops = vs.flops,
                      .held_bytes = (double)(embed_slice_bytes(s, D) + vs.peak_bytes),
                      .rss_bytes = peak_rss()};
    /* A rank that failed inside the collectives leaves the others timing out
     * there: the communicator is then broken and the vote says so. */
    if ((v = embed_agree(j, st, &ev, sizeof ev)) != RV_VOTE_OK)
        goto end;
    stats->encode_s = rv_clock_s() - t;
    for (int r = 0; r < j->size; r++) {
        const encode_vote *x = VOTE_OF(j, encode_vote, r);
        stats->flops += x->flops;
        stats->rank_mb = fmax(stats->rank_mb, x->held_bytes / 1048576.0);
        stats->rss_mb = fmax(stats->rss_mb, x->rss_bytes / 1048576.0);
    }
    in->ran = 1;
end:
    /* From the start of its preparation (ahead or in turn). */
    stats->seconds = rv_clock_s() - (in->t_start > 0 ? in->t_start : t_run);
    return v;
}
